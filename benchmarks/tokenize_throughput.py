"""Tokenisation throughput: prepare's batched encoding vs a single-process encode loop.

Both encode the same documents with the same trained tokenizer and must produce the
same ids; ours is ``bytecanary.data.encode.encode_batch`` (``encode_batch_fast``, ``--batch``
documents a call, on the tokenizer's threads), the reference calls ``tokenizer.encode`` per
document. The shard stage runs it one thread per worker: ``prepare_throughput.py``.

    python benchmarks/tokenize_throughput.py [--data data/default] [--megabytes 8]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import numpy as np
import tokenizers
from transformers import AutoTokenizer

from bytecanary.data.chunks import split_documents
from bytecanary.data.encode import batches, encode_batch
from bytecanary.data.shards import token_dtype


def load_docs(data: Path, megabytes: float) -> list[str]:
    docs, budget = [], megabytes * 1e6
    langs = sorted(p.name for p in (data / "corpus").iterdir() if p.is_dir())
    for lang in langs:
        share = budget / len(langs)
        for doc in split_documents(data / "corpus", lang, "train"):
            if share <= 0:
                break
            docs.append(doc)
            share -= len(doc.encode("utf-8"))
    return docs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="data/default", help="a folder `bytecanary prepare` wrote")
    parser.add_argument("--megabytes", type=float, default=8.0)
    parser.add_argument("--batch", type=int, default=512)
    args = parser.parse_args()
    data = Path(args.data)
    if not (data / "tokenizer" / "tokenizer.json").exists():
        raise SystemExit(f"{data}: run `bytecanary prepare --config configs/data/default.yaml` first")

    tok = AutoTokenizer.from_pretrained(str(data / "tokenizer"))
    docs = load_docs(data, args.megabytes)
    size = sum(len(d.encode("utf-8")) for d in docs)
    dtype = token_dtype(len(tok))

    start = time.perf_counter()
    ref = [tok.encode(d, add_special_tokens=False) for d in docs]
    t_ref = time.perf_counter() - start

    start = time.perf_counter()
    lengths: list[int] = []
    backend, eos = tok.backend_tokenizer, tok.eos_token_id
    ours = np.concatenate(
        [encode_batch(backend, eos, b, dtype.name, lengths) for b in batches(docs, args.batch)]
    )
    t_ours = time.perf_counter() - start

    flat = np.concatenate([np.asarray([*ids, tok.eos_token_id], dtype=dtype) for ids in ref])
    assert np.array_equal(flat, ours), "batched encoding differs from the reference"
    print(
        f"python {platform.python_version()}  tokenizers {tokenizers.__version__}  "
        f"cores {os.cpu_count()}  {platform.machine()}"
    )
    print(f"{len(docs):,} documents, {size / 1e6:.1f} MB, {len(ours):,} tokens")
    print(f"{'method':<48}{'MB/s':>8}{'ratio':>8}")
    print(f"{'tokenizer.encode loop (single process)':<48}{size / t_ref / 1e6:>8.2f}{1.0:>8.2f}")
    name = f"encode_batch (encode_batch_fast x{args.batch})"
    print(f"{name:<48}{size / t_ours / 1e6:>8.2f}{t_ref / t_ours:>8.2f}")


if __name__ == "__main__":
    main()
