"""Held-out perplexity: the same text at every checkpoint, with bits per UTF-8 byte
(``bpb``) comparable across tokenizers (docs/ppl-probe.md). Shape suffixes: B windows
in a batch, T positions, V vocabulary.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bytecanary import keys
from bytecanary.data.shards import open_split, split_files
from bytecanary.display import Display, Perplexity, Table
from bytecanary.errors import BytecanaryError
from bytecanary.io import read_json
from bytecanary.probes import batching
from bytecanary.probes.dist import merge_shards, shard_indices
from bytecanary.probes.evalsets import DEFAULT_DATA_DIR
from bytecanary.probes.models import context_size, pad_id
from bytecanary.probes.params import PerSample, at_least
from bytecanary.probes.registry import Probe, register_probe
from bytecanary.records import Context

SPLIT = "val"  # the held-out split `bytecanary prepare` writes


def heldout(lang: str = "all", metric: str = "ppl", split: str = SPLIT) -> str:
    """``probe/ppl/<split>/<lang>/<metric>``: the ``ppl`` probe on a data folder's held-out text."""
    return f"{keys.probe_root('ppl')}/{split}/{lang}/{metric}"


HEADLINE = ("ppl", "bpb")
TABLE = Table(
    "Held-out perplexity",
    (("ppl", heldout(metric="ppl")), ("bpb", heldout(metric="bpb"))),
    lambda lang: heldout(lang, metric="bpb"),
)


def headline(k: keys.ProbeKey) -> bool:
    """Charted: perplexity and bits per byte, per language and over all."""
    return k.metric in HEADLINE


@dataclass(frozen=True)
class PplConfig(PerSample):
    """The ``ppl`` probe's parameters (a flat spec: ``{name: ppl, bytes: 65536, seq_len: 1024}``)."""

    bytes: int = 65536
    """Per language, the leading whole documents of the held-out split until their UTF-8
    bytes reach this (at least one document)."""
    seq_len: int = 1024
    """Tokens each scored token may see before it, at most (capped at the model's context)."""
    batch_size: int = 8
    """Windows per forward pass."""
    eval_sets: list[str] | None = None
    """One prepared data folder whose held-out text is read; None: the checkpoint's data folder."""

    def __post_init__(self) -> None:
        at_least("bytes", self.bytes, 1)
        at_least("seq_len", self.seq_len, 1)
        at_least("batch_size", self.batch_size, 1)
        if self.eval_sets is not None and len(self.eval_sets) != 1:
            raise ValueError(f"eval_sets must name one data folder, got {self.eval_sets!r}")
        super().__post_init__()


@dataclass(frozen=True)
class Document:
    """One held-out document: its place in its language's split, its text's UTF-8 bytes, and
    the tokens it is scored on (its own, then the separator after it)."""

    language: str
    index: int
    bytes: int
    tokens: int


@dataclass
class Prepared:
    streams: list[np.ndarray]
    """Per language, ``[sep] + enc(doc1) + [sep] + enc(doc2) + [sep] + ...``."""
    owners: list[np.ndarray]
    """Per language, the document (index into ``documents``) each token after the first is scored for."""
    documents: list[Document]
    pad_id: int


def data_folder(eval_sets: list[str] | None, data_dir: Path | None) -> Path:
    """The data folder read: the spec's, else the checkpoint's, else ``data/default``."""
    return Path(eval_sets[0]) if eval_sets else Path(data_dir or DEFAULT_DATA_DIR)


def check_folder(folder: Path) -> dict:
    """The folder's ``shards/index.json``, after checking that it, the tokenizer and every
    language's held-out split are there; else one line naming the path."""
    config = f"configs/data/{folder.name}.yaml"
    rerun = f"run bytecanary prepare --config {config} first, or give --eval_sets.ppl=DATA_DIR"
    index_path = folder / "shards" / "index.json"
    for path, kind in (
        (folder, "folder"),
        (index_path, "file"),
        (folder / "tokenizer" / "tokenizer.json", "file"),
    ):
        if not (path.is_dir() if kind == "folder" else path.is_file()):
            raise BytecanaryError(f"{path}: no such {kind} ({rerun})")
    index = read_json(index_path)
    languages = index.get("languages") if isinstance(index, dict) else None
    if not languages:
        raise BytecanaryError(f"{index_path}: no languages ({rerun})")
    for lang, entry in languages.items():
        if not entry.get(SPLIT, {}).get("tokens"):
            raise BytecanaryError(f"{index_path}: {lang}: the {SPLIT} split is empty ({rerun})")
        for file in split_files(entry[SPLIT]):
            starts = folder / "shards" / Path(file["path"]).with_suffix(".idx.npy")
            if not starts.is_file():
                raise BytecanaryError(f"{starts}: no such file ({rerun})")
    return index


def documents(folder: Path, entry: dict, dtype: str) -> Iterator[np.ndarray]:
    """A split's documents' ids in order, each without the eos that ends it."""
    series = open_split(folder / "shards", entry, dtype)
    for part, file in zip(series.parts, split_files(entry), strict=True):
        starts = np.load(folder / "shards" / Path(file["path"]).with_suffix(".idx.npy"))
        for start, end in zip(starts, [*starts[1:], len(part)], strict=True):
            yield part[start : end - 1]


def heldout_texts(folder: Path, budget: int) -> dict[str, list[str]]:
    """Per language, the texts of the leading whole documents of the held-out split whose
    UTF-8 bytes reach ``budget`` (at least one), decoded with the data's own tokenizer."""
    index_path = folder / "shards" / "index.json"
    version = index_path.stat().st_mtime_ns if index_path.is_file() else None
    return {lang: list(texts) for lang, texts in _read_texts(folder, budget, version)}


@functools.lru_cache(maxsize=4)
def _read_texts(folder: Path, budget: int, version: int | None) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``heldout_texts``, read and decoded once per version of the folder's index: every
    checkpoint of a series, and every fire of a training's callback, reads the same text."""
    from transformers import AutoTokenizer

    index = check_folder(folder)
    tokenizer = AutoTokenizer.from_pretrained(str(folder / "tokenizer"))
    texts: list[tuple[str, tuple[str, ...]]] = []
    for lang, entry in index["languages"].items():
        docs, size = [], 0
        for ids in documents(folder, entry[SPLIT], index["dtype"]):
            docs.append(tokenizer.decode(ids.tolist()))
            size += len(docs[-1].encode("utf-8"))
            if size >= budget:
                break
        texts.append((lang, tuple(docs)))
    return tuple(texts)


def separator(tokenizer: Any) -> int:
    """The id between documents: eos (what training shows the model there), else bos."""
    for token_id in (tokenizer.eos_token_id, tokenizer.bos_token_id):
        if token_id is not None:
            return int(token_id)
    raise BytecanaryError(
        f"{tokenizer.name_or_path}: the tokenizer has neither an eos nor a bos token to separate documents"
    )


def stream(tokenizer: Any, texts: list[str], first: int) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """The documents as one stream, ``[sep] + enc(doc) + [sep]`` per document; the document
    each token after the first is scored for (numbered from ``first``); each one's count."""
    sep = separator(tokenizer)
    encoded = tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]
    ids = np.array([sep, *(t for doc in encoded for t in [*doc, sep])], dtype=np.int64)
    counts = [len(doc) + 1 for doc in encoded]
    return ids, np.repeat(np.arange(first, first + len(counts)), counts), counts


def windows(streams: list[np.ndarray], seq_len: int) -> list[np.ndarray]:
    """Each stream cut into windows of ``seq_len + 1`` tokens, consecutive ones sharing a
    token, so every token after a stream's first is a target exactly once, in stream order."""
    return [s[lo : lo + seq_len + 1] for s in streams for lo in range(0, len(s) - 1, seq_len)]


@torch.inference_mode()
def token_nll(model: Any, rows: list[np.ndarray], pad: int) -> np.ndarray:
    """(B, T) NLL of each row's tokens after its first (beyond a short row's end: padding):
    one forward per batch, logits in float32 (right padding changes no earlier position)."""
    device = next(model.parameters()).device
    width = max(len(r) for r in rows)
    ids_BT = torch.full((len(rows), width), pad, dtype=torch.long)
    for b, r in enumerate(rows):
        ids_BT[b, : len(r)] = torch.from_numpy(r)
    scored_BT = torch.arange(width - 1)[None, :] < torch.tensor([len(r) - 1 for r in rows])[:, None]
    ids_BT, scored_BT = ids_BT.to(device), scored_BT.to(device)
    logits_BTV = model(input_ids=ids_BT[:, :-1], attention_mask=scored_BT.long()).logits.float()
    target_BT = ids_BT[:, 1:, None]
    nll_BT = logits_BTV.logsumexp(-1) - logits_BTV.gather(-1, target_BT).squeeze(-1)
    return nll_BT.double().cpu().numpy()


def metrics(lang: str, nll: float, tokens: int, size: int) -> dict[str, float]:
    """The keys of one language (or ``all``) from its summed NLL, tokens and UTF-8 bytes."""
    return {
        heldout(lang, "ppl"): math.exp(nll / tokens),
        heldout(lang, "bpb"): nll / math.log(2) / size if size else math.nan,
        heldout(lang, "tokens"): tokens,
        heldout(lang, "bytes"): size,
    }


@register_probe("ppl")
class PplProbe(Probe):
    """Held-out perplexity and bits per byte per language, on fixed text of a data folder."""

    version = 1
    Config = PplConfig
    config: PplConfig
    display = Display(
        fields=("split", "language"),
        headline=headline,
        table=TABLE,
        perplexity=Perplexity(
            heldout(), "held-out perplexity (ppl probe)", "held-out ppl", heldout(metric="bpb")
        ),
    )

    def folder(self, data_dir: Path | None) -> Path:
        return data_folder(self.config.eval_sets, data_dir)

    def validate(self, data_dir: Path | None) -> None:
        check_folder(self.folder(data_dir))

    def measures(self) -> dict[str, Any]:
        """Its split and data folder decide its text and keys; budget and windows do not."""
        return {"split": SPLIT, "eval_sets": sorted(self.config.eval_sets or [])}

    def eval_files(self, data_dir: Path | None) -> list[Path]:
        """The shards' index (it holds every shard's SHA-256) and the data's tokenizer."""
        folder = self.folder(data_dir)
        return [folder / "shards" / "index.json", folder / "tokenizer" / "tokenizer.json"]

    def prepare(self, tokenizer: Any, data_dir: Path | None) -> Prepared:
        texts = heldout_texts(self.folder(data_dir), self.config.bytes)
        streams, owners, docs = [], [], []
        for lang, lang_texts in texts.items():
            ids, owner, counts = stream(tokenizer, lang_texts, len(docs))
            streams.append(ids)
            owners.append(owner)
            docs += [
                Document(lang, i, len(t.encode("utf-8")), n)
                for i, (t, n) in enumerate(zip(lang_texts, counts, strict=True))
            ]
        return Prepared(streams, owners, docs, pad_id(tokenizer))

    def compute(self, model: Any, tokenizer: Any, prepared: Prepared, rank: int = 0, world: int = 1):
        """This rank's windows, whole batches dealt round-robin (so each batch is the one a
        single process runs): their per-token NLL, rows keyed by window."""
        cfg = self.config
        seq_len = min(cfg.seq_len, context_size(model) or cfg.seq_len)
        every = windows(prepared.streams, seq_len)
        index = shard_indices(len(every), cfg.batch_size, rank, world)
        rows = [every[i] for i in index]
        nll = np.zeros((len(rows), seq_len))

        def step(lo: int, hi: int) -> None:
            nll[lo:hi, : max(len(r) for r in rows[lo:hi]) - 1] = token_nll(
                model, rows[lo:hi], prepared.pad_id
            )

        batching.each(len(rows), cfg.batch_size, step, costs=[len(r) for r in rows])
        return {"index": index, "nll": nll, "scored": np.array([len(r) - 1 for r in rows], dtype=np.int64)}

    def aggregate(self, prepared: Prepared, payloads: list[dict[str, np.ndarray]], context: Context):
        """Per-document NLL summed in stream order, whatever the ranks: then per language and all."""
        r = merge_shards(payloads)
        nll = np.concatenate([row[:n] for row, n in zip(r["nll"], r["scored"], strict=True)])
        docs = prepared.documents
        per_doc = np.bincount(np.concatenate(prepared.owners), weights=nll, minlength=len(docs))
        if self.config.records:
            write_records(self.config.records, self.name, docs, per_doc, context.fields())
        out: dict[str, float] = {}
        for lang in [*dict.fromkeys(d.language for d in docs), "all"]:
            mine = [i for i, d in enumerate(docs) if lang == "all" or d.language == lang]
            tokens = sum(docs[i].tokens for i in mine)
            out.update(metrics(lang, float(per_doc[mine].sum()), tokens, sum(docs[i].bytes for i in mine)))
        return out


def write_records(path: str, probe: str, docs: list[Document], nll: np.ndarray, context: dict) -> None:
    """One JSON line per document: ``context`` (checkpoint, step, ...), the document, its NLL and bpb."""
    with open(path, "a", encoding="utf-8") as f:
        for d, loss in zip(docs, nll, strict=True):
            row = {**context, "probe": probe, "split": SPLIT, **asdict(d), "nll": float(loss)}
            row["bpb"] = float(loss) / math.log(2) / d.bytes if d.bytes else None
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
