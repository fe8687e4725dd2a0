"""Corpus chunks: each language's split as numbered JSONL files of bounded size, the unit of parallel
work and of resume; names sort in corpus order, so reading them in name order gives the documents
in the order the sources produced them, whatever wrote them in parallel (docs/data.md).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TextIO


def chunk_name(source: int, file: int, part: int) -> str:
    return f"{source:03d}-{file:06d}-{part:04d}"


def split_dir(root: Path, lang: str, split: str) -> Path:
    return Path(root) / lang / split


def split_chunks(corpus_dir: Path, lang: str, split: str) -> list[Path]:
    """The split's chunk files in corpus order."""
    return sorted(split_dir(corpus_dir, lang, split).glob("*.jsonl"))


def read_documents(path: Path) -> Iterator[str]:
    """Documents of one chunk file."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)["text"]


def split_documents(corpus_dir: Path, lang: str, split: str) -> Iterator[str]:
    """Every document of a language's split, chunk after chunk."""
    for path in split_chunks(corpus_dir, lang, split):
        yield from read_documents(path)


def leading(docs: Iterable[str], limit: int) -> Iterator[str]:
    """The documents up to and including the one that reaches ``limit`` UTF-8 bytes."""
    total = 0
    for doc in docs:
        if total >= limit:
            return
        yield doc
        total += len(doc.encode("utf-8"))


class ChunkWriter:
    """Rolling JSONL chunks of one (source, file) into ``root/<lang>/<split>/``: a chunk is
    closed once it holds ``chunk_bytes`` of text, written as ``.tmp`` and renamed when closed,
    so a chunk file that exists is complete."""

    def __init__(self, root: Path, lang: str, source: int, file: int, chunk_bytes: int) -> None:
        self.root, self.lang, self.source, self.file = Path(root), lang, source, file
        self.chunk_bytes = chunk_bytes
        self.parts: dict[str, int] = {}
        self.open: dict[str, tuple[TextIO, Path, int]] = {}
        self.stats: dict[str, dict[str, int]] = {}
        prefix = chunk_name(source, file, 0)[:-4]
        for stale in self.root.glob(f"{lang}/*/{prefix}*"):  # left by an earlier try of this task
            stale.unlink()

    def write(self, split: str, row: dict, size: int) -> None:
        """Append one document (``row`` holds its text; ``size`` its UTF-8 bytes)."""
        if split not in self.open:
            part = self.parts.get(split, 0)
            self.parts[split] = part + 1
            folder = split_dir(self.root, self.lang, split)
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{chunk_name(self.source, self.file, part)}.jsonl"
            tmp = path.with_suffix(".tmp")
            self.open[split] = (open(tmp, "w", encoding="utf-8"), path, 0)  # noqa: SIM115 closed in _close
        handle, path, held = self.open[split]
        handle.write(json.dumps(row, ensure_ascii=False) + "\n")
        self.open[split] = (handle, path, held + size)
        stats = self.stats.setdefault(split, {"documents": 0, "bytes": 0})
        stats["documents"] += 1
        stats["bytes"] += size
        if held + size >= self.chunk_bytes:
            self._close(split)

    def _close(self, split: str) -> None:
        handle, path, _ = self.open.pop(split)
        handle.close()
        os.replace(path.with_suffix(".tmp"), path)

    def close(self) -> dict[str, dict[str, int]]:
        """Close the open chunks; return documents and bytes per split."""
        for split in list(self.open):
            self._close(split)
        return self.stats
