"""Token shards: memory-mapped token files, one per corpus chunk (nanoGPT style, split), with the
``index.json`` of their lengths and SHA-256, so opening a split refuses a cut-off file
(docs/data.md, "Stages").
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from bytecanary.errors import BytecanaryError
from bytecanary.io import read_json

SPLITS = ("train", "val")


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


def mixture_cut(tokens: dict[str, int], weights: dict[str, float]) -> dict[str, int]:
    """Per-language training-token targets: the largest total whose shares equal the
    weights without any language needing more tokens than it has."""
    total = min(tokens[lang] / w for lang, w in weights.items())
    return {lang: int(total * w) for lang, w in weights.items()}


def docs_within(doc_tokens: np.ndarray, target: int) -> int:
    """How many leading documents to keep so their tokens come closest to ``target``."""
    cum = np.cumsum(doc_tokens)
    n = int(np.searchsorted(cum, target, side="right"))
    if n < len(cum) and (n == 0 or abs(cum[n] - target) < abs(cum[n - 1] - target)):
        n += 1  # one more document lands nearer the target
    return max(n, 1)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


class TokenSeries:
    """A language's split as one token sequence over its memory-mapped shard files: a
    slice that spans two files is joined, so samplers index it like one array."""

    def __init__(self, parts: list[np.ndarray]) -> None:
        self.parts = parts
        self.ends = np.cumsum([len(p) for p in parts], dtype=np.int64)

    def __len__(self) -> int:
        return int(self.ends[-1]) if len(self.ends) else 0

    def __getitem__(self, key: slice) -> np.ndarray:
        start, stop, _ = key.indices(len(self))
        first = int(np.searchsorted(self.ends, start, side="right"))
        pieces = []
        while start < stop:
            offset = int(self.ends[first - 1]) if first else 0
            end = min(stop, int(self.ends[first]))
            pieces.append(self.parts[first][start - offset : end - offset])
            start, first = end, first + 1
        if len(pieces) == 1:
            return pieces[0]
        return np.concatenate(pieces) if pieces else np.zeros(0, dtype=self.parts[0].dtype)

    def __array__(self, dtype: np.dtype | None = None, copy: bool | None = None) -> np.ndarray:
        """The whole split in memory (for tests and small tools, not for training)."""
        return np.asarray(self[0 : len(self)], dtype=dtype)


def split_files(entry: dict) -> list[dict]:
    """An index entry's shard files; a folder prepared with one file per split lists that one."""
    return entry.get("files", [entry])


def open_split(shard_dir: Path, split_entry: dict, dtype: str) -> TokenSeries:
    """Memory-map a split's shards read-only, each checked to be as long as ``index.json``
    says (an entry without ``file_bytes``: ``tokens`` of ``dtype``)."""
    parts = []
    for entry in split_files(split_entry):
        path = Path(shard_dir) / entry["path"]
        expected = entry.get("file_bytes", entry["tokens"] * np.dtype(dtype).itemsize)
        size = path.stat().st_size if path.is_file() else None
        if size != expected:
            found = "missing" if size is None else f"{size:,} bytes"
            raise BytecanaryError(
                f"{path}: {found}, index.json says {expected:,} (truncated?); "
                f"delete {shard_dir} and rerun `bytecanary prepare`"
            )
        parts.append(np.memmap(path, dtype=np.dtype(dtype), mode="r") if expected else np.zeros(0, dtype))
    return TokenSeries(parts)


def verify(shard_dir: Path) -> int:
    """Check every shard of ``shard_dir/index.json`` against its recorded SHA-256; returns how many."""
    index = read_json(Path(shard_dir) / "index.json")
    checked = 0
    for entry in index["languages"].values():
        for split in SPLITS:
            open_split(shard_dir, entry[split], index["dtype"])  # the lengths first: cheap
            for file in split_files(entry[split]):
                path = Path(shard_dir) / file["path"]
                if file.get("sha256") is None:
                    raise BytecanaryError(
                        f"{shard_dir / 'index.json'}: no hashes (prepared by an older bytecanary); "
                        f"delete {shard_dir} and rerun `bytecanary prepare`"
                    )
                if sha256(path) != file["sha256"]:
                    raise BytecanaryError(
                        f"{path}: contents differ from index.json's hash (corrupt or modified); "
                        f"delete {shard_dir} and rerun `bytecanary prepare`"
                    )
                checked += 1
    return checked
