"""The shard stage's task: one corpus chunk to token ids in one pass, counting on the way what later
steps need (tokens, byte-fallback tokens, bytes, SHA-256, characters), so nothing reads the text
again; memory is one batch of documents, whatever the chunk's size.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from bytecanary.data.chunks import read_documents
from bytecanary.data.engine import Reporter
from bytecanary.io import atomic_path

CODE_POINTS = 0x110000


def character_counts(texts: Iterable[str]) -> np.ndarray:
    """Occurrences of every code point in ``texts`` (length ``CODE_POINTS``)."""
    joined = "".join(texts)
    points = np.frombuffer(joined.encode("utf-32-le"), dtype="<u4")
    return np.bincount(points, minlength=CODE_POINTS)


def save_counts(path: Path, counts: np.ndarray) -> None:
    """Only the characters that occur: a chunk's alphabet, not 1.1M zeros."""
    seen = np.flatnonzero(counts)
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, points=seen.astype(np.uint32), counts=counts[seen].astype(np.int64))


def load_counts(path: Path) -> np.ndarray:
    with np.load(path) as saved:
        counts = np.zeros(CODE_POINTS, dtype=np.int64)
        counts[saved["points"]] = saved["counts"]
    return counts


def counts_dict(counts: np.ndarray) -> dict[str, int]:
    """Character -> count, most frequent first (ties by character)."""
    seen = np.flatnonzero(counts)
    pairs = sorted(((chr(int(p)), int(counts[p])) for p in seen), key=lambda kv: (-kv[1], kv[0]))
    return dict(pairs)


@dataclass(frozen=True)
class Chunk:
    """One corpus chunk to encode: ``<lang>/<split>/<name>`` below the corpus and shard folders."""

    lang: str
    split: str
    name: str

    def corpus_file(self, corpus_dir: Path) -> Path:
        return Path(corpus_dir) / self.lang / self.split / f"{self.name}.jsonl"

    def shard_file(self, shard_dir: Path, suffix: str = ".bin") -> Path:
        return Path(shard_dir) / self.lang / self.split / f"{self.name}{suffix}"


@dataclass(frozen=True)
class Encoder:
    """What every task of the stage shares (picklable, for the worker processes). The
    tokenizer is read with ``tokenizers`` alone: a worker starts without importing
    ``transformers``, whose fast tokenizers wrap the same object."""

    corpus_dir: str
    tokenizer_dir: str
    out_dir: str
    dtype: str
    batch: int
    eos_id: int
    byte_ids: tuple[int, ...]

    def __call__(self, chunk: Chunk, report: Reporter) -> dict:
        """Encode ``chunk``; write its shard, document offsets and (training split) character counts."""
        tok = _tokenizer(str(Path(self.tokenizer_dir) / "tokenizer.json"))
        is_byte = np.zeros(tok.get_vocab_size(with_added_tokens=True), dtype=bool)
        is_byte[list(self.byte_ids)] = True
        path = chunk.shard_file(self.out_dir)
        path.parent.mkdir(parents=True, exist_ok=True)
        counts = np.zeros(CODE_POINTS, dtype=np.int64) if chunk.split == "train" else None
        digest = hashlib.sha256()
        lengths: list[int] = []
        totals = {"bytes": 0, "byte_tokens": 0}
        with atomic_path(path) as tmp, open(tmp, "wb") as out:
            for docs in batches(read_documents(chunk.corpus_file(self.corpus_dir)), self.batch):
                ids = encode_batch(tok, self.eos_id, docs, self.dtype, lengths)
                raw = ids.tobytes()
                out.write(raw)
                digest.update(raw)
                totals["byte_tokens"] += int(is_byte[ids].sum())
                size = sum(len(d.encode("utf-8")) for d in docs)
                totals["bytes"] += size
                if counts is not None:
                    counts += character_counts(docs)
                report(size)
        starts = np.cumsum([0, *lengths[:-1]], dtype=np.int64) if lengths else np.zeros(0, np.int64)
        _save_array(chunk.shard_file(self.out_dir, ".idx.npy"), starts)
        if counts is not None:
            save_counts(chunk.shard_file(self.out_dir, ".chars.npz"), counts)
        tokens = int(sum(lengths))
        return {
            "documents": len(lengths),
            "tokens": tokens,
            "file_bytes": tokens * np.dtype(self.dtype).itemsize,
            "sha256": digest.hexdigest(),
            **totals,
        }


@lru_cache(maxsize=1)
def _tokenizer(path: str) -> Any:
    """One tokenizer per worker process: loading one per chunk grows the process by a few MB
    each time (memory the allocator keeps), which a long stage would notice."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(path)


def batches(docs: Iterable[str], size: int) -> Iterable[list[str]]:
    batch: list[str] = []
    for doc in docs:
        batch.append(doc)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def encode_batch(tok: Any, eos_id: int, docs: list[str], dtype: str, lengths: list[int]) -> np.ndarray:
    """Token ids of ``docs`` back to back, each followed by eos (a ``tokenizers.Tokenizer``'s
    ``encode_batch_fast``: no offsets); appends each document's token count to ``lengths``."""
    flat: list[int] = []
    for enc in tok.encode_batch_fast(docs, add_special_tokens=False):
        flat += enc.ids
        flat.append(eos_id)
        lengths.append(len(enc.ids) + 1)
    return np.array(flat, dtype=dtype)


def _save_array(path: Path, array: np.ndarray) -> None:
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.save(f, array)
