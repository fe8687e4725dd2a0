"""The corpus stage's tasks: every source into train/val chunks of its language, split by a seeded
draw (a generated source, one task) or a seeded hash of (file, row) (a ``files`` source, one task
per file), so a document's split does not depend on which worker reads it (docs/data.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bytecanary.data.chunks import ChunkWriter
from bytecanary.data.config import DataConfig
from bytecanary.data.corpus import file_documents, held_out, source_documents, source_files
from bytecanary.data.engine import Reporter


@dataclass(frozen=True)
class Item:
    """One task: source ``source`` (its index in the config), file ``file`` of it (``path``
    None: the source's own stream)."""

    source: int
    file: int = 0
    path: str | None = None


def items(cfg: DataConfig) -> tuple[list[Item], list[int]]:
    """The stage's tasks in corpus order, and their expected sizes in bytes (0: unknown)."""
    found, sizes = [], []
    for i, src in enumerate(cfg.sources):
        if src.files is None:
            found.append(Item(i))
            sizes.append(_expected_bytes(src))
            continue
        for j, path in enumerate(source_files(src.files, f"sources[{i}] ({src.language})")):
            found.append(Item(i, j, str(path)))
            sizes.append(path.stat().st_size)
    return found, sizes


def _expected_bytes(src) -> int:
    if src.synthetic is not None:
        return int(src.synthetic.megabytes * 1e6)
    if src.dataset is not None and src.dataset.max_megabytes:
        return int(src.dataset.max_megabytes * 1e6)
    return 0


@dataclass(frozen=True)
class Collector:
    """What every task of the stage shares (picklable, for the worker processes)."""

    cfg: DataConfig
    out_dir: str

    def __call__(self, item: Item, report: Reporter) -> dict:
        """Write the item's documents as chunks; return documents and bytes per split."""
        cfg = self.cfg
        src = cfg.sources[item.source]
        writer = ChunkWriter(Path(self.out_dir), src.language, item.source, item.file, _chunk_bytes(cfg))
        if item.path is None:
            rng = np.random.default_rng([cfg.seed, 2, item.source])
            for doc in source_documents(src, item.source, cfg.seed):
                if doc.key is None:
                    split = "val" if rng.random() < cfg.val_fraction else "train"
                else:  # by page identity: a page's translations share its split
                    split = "val" if held_out(doc.key, cfg.seed, cfg.val_fraction) else "train"
                row = {"text": doc.text} if doc.key is None else {"text": doc.text, "key": doc.key}
                report(_write(writer, split, row))
        else:
            path = Path(item.path)
            name = path.relative_to(Path(src.files.path).expanduser()).as_posix()
            for number, text in file_documents(path, src.files.text_column):
                split = "val" if held_out(f"{name}#{number}", cfg.seed, cfg.val_fraction) else "train"
                report(_write(writer, split, {"text": text}))
        return {"language": src.language, "splits": writer.close()}


def _chunk_bytes(cfg: DataConfig) -> int:
    return int(cfg.chunk_megabytes * 1e6)


def _write(writer: ChunkWriter, split: str, row: dict) -> int:
    size = len(row["text"].encode("utf-8"))
    writer.write(split, row, size)
    return size
