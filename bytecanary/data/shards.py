"""Token shards: one flat memory-mapped token file per language and split (nanoGPT style).

``<lang>/train.bin`` holds the documents' token ids back to back, each followed by eos,
as uint16 (uint32 when the vocabulary exceeds 65535); ``<lang>/train.idx.npy`` holds the
start offset of every document. The training split is cut at a document boundary so the
languages' token counts follow the configured mixture. ``index.json`` records each shard's
length in bytes and its SHA-256: opening a shard checks the length (a cut-off file would
train on part of the data), ``bytecanary prepare --verify`` the hash.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from bytecanary.errors import BytecanaryError
from bytecanary.io import read_json

SPLITS = ("train", "val")


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


@dataclass
class Encoded:
    """Token ids of a list of documents, eos appended to each."""

    ids: np.ndarray  # (tokens,) all documents back to back
    starts: np.ndarray  # (documents,) offset of each document in ids

    def doc_tokens(self) -> np.ndarray:
        return np.diff(np.append(self.starts, len(self.ids)))

    def head(self, n_docs: int) -> Encoded:
        end = int(self.starts[n_docs]) if n_docs < len(self.starts) else len(self.ids)
        return Encoded(self.ids[:end], self.starts[:n_docs])


def encode_documents(
    tokenizer, docs: list[str], batch: int, dtype: np.dtype, desc: str = "encode"
) -> Encoded:
    """Encode with ``encode_batch_fast`` (Rust threads on every core, no offsets),
    ``batch`` documents a call, each followed by eos."""
    backend = tokenizer.backend_tokenizer
    eos = tokenizer.eos_token_id
    parts: list[np.ndarray] = []
    lengths: list[int] = []
    for lo in tqdm(range(0, len(docs), batch), desc=desc, unit="batch", leave=False):
        flat: list[int] = []
        for enc in backend.encode_batch_fast(docs[lo : lo + batch], add_special_tokens=False):
            flat += enc.ids
            flat.append(eos)
            lengths.append(len(enc.ids) + 1)
        parts.append(np.array(flat, dtype=dtype))
    ids = np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)
    starts = np.cumsum([0, *lengths[:-1]], dtype=np.int64) if lengths else np.zeros(0, np.int64)
    return Encoded(ids, starts)


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


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def write_split(out_dir: Path, lang: str, split: str, enc: Encoded) -> dict:
    """Write ``<lang>/<split>.bin`` and its document index; return their index entry."""
    (out_dir / lang).mkdir(parents=True, exist_ok=True)
    path = out_dir / lang / f"{split}.bin"
    enc.ids.tofile(path)
    np.save(out_dir / lang / f"{split}.idx.npy", enc.starts)
    return {
        "path": f"{lang}/{split}.bin",
        "documents": len(enc.starts),
        "tokens": len(enc.ids),
        "file_bytes": path.stat().st_size,
        "sha256": _sha256(path),
    }


def open_split(shard_dir: Path, lang: str, split: str, dtype: str, entry: dict) -> np.memmap:
    """Memory-map one shard read-only, checked to be as long as its ``index.json`` ``entry``
    says (older indexes, without ``file_bytes``: ``tokens`` of ``dtype``)."""
    path = Path(shard_dir) / lang / f"{split}.bin"
    expected = entry.get("file_bytes", entry["tokens"] * np.dtype(dtype).itemsize)
    size = path.stat().st_size if path.is_file() else None
    if size != expected:
        found = "missing" if size is None else f"{size:,} bytes"
        raise BytecanaryError(
            f"{path}: {found}, index.json says {expected:,} (truncated?); "
            f"delete {shard_dir} and rerun `bytecanary prepare`"
        )
    return np.memmap(path, dtype=np.dtype(dtype), mode="r")


def verify(shard_dir: Path) -> int:
    """Check every shard of ``shard_dir/index.json`` against its recorded SHA-256; returns how many."""
    index = read_json(Path(shard_dir) / "index.json")
    checked = 0
    for lang, entry in index["languages"].items():
        for split in SPLITS:
            path = Path(shard_dir) / entry[split]["path"]
            recorded = entry[split].get("sha256")
            if recorded is None:
                raise BytecanaryError(
                    f"{shard_dir / 'index.json'}: no hashes (prepared by an older bytecanary); "
                    f"delete {shard_dir} and rerun `bytecanary prepare`"
                )
            open_split(shard_dir, lang, split, index["dtype"], entry[split])  # the length first: cheap
            if _sha256(path) != recorded:
                raise BytecanaryError(
                    f"{path}: contents differ from index.json's hash (corrupt or modified); "
                    f"delete {shard_dir} and rerun `bytecanary prepare`"
                )
            checked += 1
    return checked
