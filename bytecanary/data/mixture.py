"""From encoded chunks to the shard index: the training split cut to the mixture, and character counts
at token budgets, reading only the one chunk a cut falls in (the chunks before it kept whole, the
ones after it left out).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from bytecanary.data.chunks import read_documents
from bytecanary.data.encode import CODE_POINTS, Chunk, character_counts, load_counts, save_counts
from bytecanary.data.shards import sha256
from bytecanary.io import link_or_copy


def chunked_docs_within(
    chunk_tokens: Sequence[int], doc_tokens: Callable[[int], np.ndarray], target: int
) -> tuple[int, int]:
    """``docs_within`` over chunks, loading one: (chunks kept whole, documents kept of the
    next chunk). ``doc_tokens(c)`` loads chunk ``c``'s document lengths."""
    ends = np.cumsum(chunk_tokens, dtype=np.int64)
    c = int(np.searchsorted(ends, target, side="right"))  # the chunks before c end <= target
    if c == len(ends):
        return c, 0
    before = int(ends[c - 1]) if c else 0  # 0 only when no document comes before chunk c
    cum = before + np.cumsum(doc_tokens(c))
    n = int(np.searchsorted(cum, target, side="right"))  # < len(cum): chunk c ends past target
    previous = int(cum[n - 1]) if n else before
    if (n == 0 and before == 0) or abs(int(cum[n]) - target) < abs(previous - target):
        n += 1  # one more document lands nearer the target
    return (c + 1, 0) if n == len(cum) else (c, n)


def _starts(shard_dir: Path, chunk: Chunk) -> np.ndarray:
    return np.load(chunk.shard_file(shard_dir, ".idx.npy"))


def doc_lengths(shard_dir: Path, chunk: Chunk, tokens: int) -> np.ndarray:
    return np.diff(np.append(_starts(shard_dir, chunk), tokens))


def _kept(shard_dir: Path, chunks: list[Chunk], tokens: list[int], target: int | None) -> tuple[int, int]:
    """(chunks kept whole, documents kept of the next) for ``target`` tokens (None: all)."""
    if target is None:
        return len(chunks), 0
    return chunked_docs_within(tokens, lambda c: doc_lengths(shard_dir, chunks[c], tokens[c]), target)


def cut_split(
    folders: tuple[Path, Path, Path],
    chunks: list[Chunk],
    records: list[dict],
    target: int | None,
    is_byte: np.ndarray,
) -> dict:
    """Place a split's shards from the task folder into the stage's (``folders``: tasks,
    stage, corpus), keeping the documents that come closest to ``target`` tokens (None:
    all); return its index entry. ``is_byte``: which token ids are byte-fallback tokens."""
    work, out, _ = folders
    whole, part = _kept(work, chunks, [r["tokens"] for r in records], target)
    for chunk in chunks[:whole]:
        for suffix in (".bin", ".idx.npy", ".chars.npz"):
            if chunk.shard_file(work, suffix).exists():
                link_or_copy(chunk.shard_file(work, suffix), chunk.shard_file(out, suffix))
    kept = list(zip(chunks[:whole], records[:whole], strict=True))
    if part:
        kept.append((chunks[whole], _cut_chunk(folders, chunks[whole], records[whole], part, is_byte)))
    files = [_file_entry(chunk, record) for chunk, record in kept]
    totals = {
        key: sum(record[key] for _, record in kept) for key in ("documents", "tokens", "bytes", "byte_tokens")
    }
    rate = totals["byte_tokens"] / totals["tokens"] if totals["tokens"] else 0.0
    return {
        "files": files,
        "documents": totals["documents"],
        "tokens": totals["tokens"],
        "bytes": totals["bytes"],
        "byte_fallback_rate": rate,
    }


def _file_entry(chunk: Chunk, record: dict) -> dict:
    keys = ("documents", "tokens", "file_bytes", "sha256")
    return {"path": f"{chunk.lang}/{chunk.split}/{chunk.name}.bin", **{k: record[k] for k in keys}}


def _cut_chunk(
    folders: tuple[Path, Path, Path], chunk: Chunk, record: dict, keep: int, is_byte: np.ndarray
) -> dict:
    """The first ``keep`` documents of a chunk as a shard of their own, with their totals."""
    work, out, corpus_dir = folders
    starts = _starts(work, chunk)
    tokens = int(starts[keep])
    dtype = "uint16" if record["file_bytes"] == 2 * record["tokens"] else "uint32"
    ids = np.fromfile(chunk.shard_file(work), dtype=dtype, count=tokens)
    path = chunk.shard_file(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    ids.tofile(path)
    np.save(chunk.shard_file(out, ".idx.npy"), starts[:keep])
    docs = [d for _, d in zip(range(keep), read_documents(chunk.corpus_file(corpus_dir)), strict=False)]
    if chunk.split == "train":
        save_counts(chunk.shard_file(out, ".chars.npz"), character_counts(docs))
    return {
        "documents": keep,
        "tokens": tokens,
        "file_bytes": path.stat().st_size,
        "sha256": sha256(path),
        "bytes": sum(len(d.encode("utf-8")) for d in docs),
        "byte_tokens": int(is_byte[ids].sum()),
    }


def counts_within(
    shard_dir: Path, corpus_dir: Path, chunks: list[Chunk], entry: dict, target: int | None
) -> tuple[int, np.ndarray]:
    """(tokens, character counts) of a training split's leading documents that come closest
    to ``target`` tokens (None: the whole split), from the chunks' saved counts."""
    tokens = [f["tokens"] for f in entry["files"]]
    whole, part = _kept(shard_dir, chunks, tokens, target)
    counts = np.zeros(CODE_POINTS, dtype=np.int64)
    for chunk in chunks[:whole]:
        counts += load_counts(chunk.shard_file(shard_dir, ".chars.npz"))
    kept = sum(tokens[:whole])
    if part:
        kept += int(_starts(shard_dir, chunks[whole])[part])
        docs = read_documents(chunks[whole].corpus_file(corpus_dir))
        counts += character_counts(d for _, d in zip(range(part), docs, strict=False))
    return kept, counts
