"""``bytecanary prepare``: corpus -> tokenizer -> shards -> character snapshot -> eval sets.

Each stage replaces its folder whole and is skipped while its inputs' hash matches (docs/data.md).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict
from pathlib import Path

from tqdm.auto import tqdm

from bytecanary.bytecodec import ByteCodec
from bytecanary.config import load_config
from bytecanary.data import collect, engine, evalsets, mixture, ownership, shards, wordcomp
from bytecanary.data.chunks import leading, split_chunks, split_documents
from bytecanary.data.config import DataConfig
from bytecanary.data.corpus import source_name
from bytecanary.data.encode import Chunk, Encoder, counts_dict
from bytecanary.data.languages import LANGUAGES
from bytecanary.data.parallel import Parallel
from bytecanary.data.tokenizer import save_tokenizer, train_tokenizer
from bytecanary.errors import BytecanaryError
from bytecanary.io import atomic_dir, check_output, link_or_copy, read_json, warn, write_json

STAGES = ("corpus", "tokenizer", "shards", "snapshot", "evalsets")  # run_stage's names, in order


def _hash(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def run_stage(
    out: Path, name: str, key: dict, build: Callable[[Path, Path], dict], outputs: Iterable[str] = ()
) -> dict:
    """Run ``build(tmp_dir, task_dir) -> info`` unless ``out/name`` finished with the same key
    and holds every file named in ``outputs`` (the key cannot tell that a newer version of a
    stage writes more files). ``task_dir`` outlives a killed run of the same key."""
    stage_dir = out / name
    digest = _hash(key)
    meta_path = stage_dir / ownership.STAGE_FILE
    if meta_path.exists():
        try:
            meta = read_json(meta_path)
        except BytecanaryError as err:  # torn by hand or by the disk: the stage is not known done
            warn(f"{err}; rebuilding the {name} stage")
            meta = {}
        if meta.get("hash") == digest and all((stage_dir / f).is_file() for f in outputs):
            print(f"[{name}] up to date, skipped")
            return meta
    task_dir = out / f".{name}.{digest}.tasks"
    for stale in [*out.glob(f".{name}.*.tmp"), *out.glob(f".{name}.*.tasks")]:  # a killed run's
        if stale != task_dir:
            shutil.rmtree(stale, ignore_errors=True)
    start = time.perf_counter()
    with atomic_dir(stage_dir) as tmp:
        info = build(tmp, task_dir)
        seconds = round(time.perf_counter() - start, 1)
        meta = {"hash": digest, "seconds": seconds, **info, "contents": ownership.contents(tmp)}
        write_json(tmp / ownership.STAGE_FILE, meta)
    shutil.rmtree(task_dir, ignore_errors=True)
    print(f"[{name}] done in {meta['seconds']:.1f} s")
    return meta


# --- stages ---------------------------------------------------------------------------


def _corpus(cfg: DataConfig, tmp: Path, tasks: Path, run: Parallel) -> dict:
    found, sizes = collect.items(cfg)
    results = engine.run_tasks(
        collect.Collector(cfg, str(tasks / "chunks")), found, sizes, tasks, run, "corpus"
    )
    stats = {lang: {s: {"documents": 0, "bytes": 0} for s in shards.SPLITS} for lang in cfg.mixture}
    for result in results:
        for split, counted in result["splits"].items():
            for field, value in counted.items():
                stats[result["language"]][split][field] += value
    for path in sorted((tasks / "chunks").rglob("*.jsonl")):
        link_or_copy(path, tmp / path.relative_to(tasks / "chunks"))
    for lang in cfg.mixture:
        for split in shards.SPLITS:
            if not split_chunks(tmp, lang, split):
                raise BytecanaryError(
                    f"sources ({lang}): no {split} documents; give more text or change val_fraction"
                )
    return {"languages": stats}


def _tokenizer_texts(cfg: DataConfig, corpus_dir: Path) -> list[str]:
    """The training split, up to ``train_megabytes`` split across languages by weight."""
    texts = []
    for lang, weight in cfg.mixture.items():
        budget = (cfg.tokenizer.train_megabytes or float("inf")) * 1e6 * weight
        for doc in split_documents(corpus_dir, lang, "train"):
            if budget <= 0:
                break
            texts.append(doc)
            budget -= len(doc.encode("utf-8"))
    return texts


def _tokenizer(cfg: DataConfig, corpus_dir: Path, tmp: Path) -> dict:
    tok = train_tokenizer(cfg.tokenizer, _tokenizer_texts(cfg, corpus_dir))
    return {"tokenizer_hash": save_tokenizer(tok, tmp), "vocab_size": len(tok)}


def _shards(cfg: DataConfig, out: Path, tok_meta: dict, tmp: Path, tasks: Path, run: Parallel) -> dict:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(out / "tokenizer"))
    dtype = shards.token_dtype(len(tok))
    corpus = out / "corpus"
    mine = {
        (lang, split): [Chunk(lang, split, path.stem) for path in split_chunks(corpus, lang, split)]
        for lang in cfg.mixture
        for split in shards.SPLITS
    }
    chunks = [chunk for group in mine.values() for chunk in group]
    sizes = [c.corpus_file(corpus).stat().st_size for c in chunks]
    codec = ByteCodec.from_tokenizer(tok)
    encoder = Encoder(
        str(corpus),
        str(out / "tokenizer"),
        str(tasks / "shards"),
        dtype.name,
        cfg.encode_batch,
        tok.eos_token_id,
        tuple(int(i) for i in codec.byte_ids),
    )
    start = time.perf_counter()
    records = dict(zip(chunks, engine.run_tasks(encoder, chunks, sizes, tasks, run, "shards"), strict=True))
    task_seconds = round(time.perf_counter() - start, 1)
    available = {lang: sum(records[c]["tokens"] for c in mine[lang, "train"]) for lang in cfg.mixture}
    targets = shards.mixture_cut(available, cfg.mixture)
    folders = (tasks / "shards", tmp, corpus)
    index: dict = {
        "tokenizer_hash": tok_meta["tokenizer_hash"],
        "dtype": dtype.name,
        "eos_id": tok.eos_token_id,
        "vocab_size": len(tok),
        "languages": {},
    }
    for lang in cfg.mixture:
        entry: dict = {"sources": [source_name(s) for s in cfg.sources if s.language == lang]}
        for split, target in (("train", targets[lang]), ("val", None)):
            group = mine[lang, split]
            entry[split] = mixture.cut_split(
                folders, group, [records[c] for c in group], target, codec.is_byte_token
            )
        entry["train"]["documents_available"] = sum(records[c]["documents"] for c in mine[lang, "train"])
        index["languages"][lang] = entry
    total = sum(e["train"]["tokens"] for e in index["languages"].values())
    for entry in index["languages"].values():
        entry["train"]["share"] = entry["train"]["tokens"] / total
    write_json(tmp / "index.json", index)
    return {"index": "index.json", "train_tokens": total, "task_seconds": task_seconds}


def _snapshot(cfg: DataConfig, out: Path, tmp: Path) -> dict:
    index = read_json(out / "shards" / "index.json")
    budgets: dict[str, dict] = {}
    for budget in ["all", *map(str, cfg.eval.snapshot_tokens)]:
        languages = {}
        for lang, weight in cfg.mixture.items():
            entry = index["languages"][lang]["train"]
            chunks = [Chunk(lang, "train", Path(f["path"]).stem) for f in entry["files"]]
            target = None if budget == "all" else int(int(budget) * weight)
            tokens, counts = mixture.counts_within(out / "shards", out / "corpus", chunks, entry, target)
            found = counts_dict(counts)
            languages[lang] = {"tokens": tokens, "characters": sum(found.values()), "counts": found}
        budgets[budget] = {
            "tokens": sum(v["tokens"] for v in languages.values()),
            "languages": languages,
        }
    write_json(tmp / "chars.json", {"budgets": budgets})
    return {"budgets": list(budgets)}


def _evalsets(cfg: DataConfig, corpus_dir: Path, snapshot_dir: Path, tok_dir: Path, tmp: Path) -> dict:
    """Level 0, Level 1 and the word-completion pools; the pools' distractors match their
    gold ending's token count under the data's tokenizer, the one its runs train with."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    snapshot = json.loads((snapshot_dir / "chars.json").read_text(encoding="utf-8"))
    budget = str(cfg.eval.tier_budget) if cfg.eval.tier_budget is not None else "all"
    level1: list[evalsets.Level1Sample] = []
    sizes: dict[str, dict] = {}
    heldout_bytes = int(cfg.eval.heldout_megabytes * 1e6)
    for lang in tqdm(cfg.mixture, desc="eval sets", leave=False, disable=not sys.stderr.isatty()):
        counts = snapshot["budgets"][budget]["languages"][lang]["counts"]
        language = LANGUAGES[lang]
        level0 = evalsets.build_level0(counts, language, cfg.eval.tier_mass, cfg.eval.max_per_tier, cfg.seed)
        write_json(tmp / f"level0_{lang}.json", evalsets.level0_json(level0))
        tiers = evalsets.tier_characters(counts, language, cfg.eval.tier_mass)
        targets = {c: t for t in ("rare", "unseen") for c in tiers[t]}
        samples = evalsets.build_level1(
            leading(split_documents(corpus_dir, lang, "val"), heldout_bytes),
            level0,
            targets,
            cfg.eval.level1_per_language,
            cfg.eval.min_context_chars,
            cfg.seed,
        )
        level1 += samples
        heldout = leading(split_documents(corpus_dir, lang, "val"), heldout_bytes)
        items, dropped = wordcomp.build_items(heldout, lang, cfg.eval.wordcomp_per_language, cfg.seed, tok)
        wordcomp.write_items(tmp / wordcomp.file_name(lang), items)
        sizes[lang] = {
            "level0": {t: sum(e.tier == t for e in level0.entries) for t in evalsets.TIERS},
            "level1": {s: sum(x.source == s for x in samples) for s in ("heldout", "template")},
            "wordcomp": len(items),
            "wordcomp_dropped": dropped,
        }
    write_json(tmp / "level1.json", evalsets.level1_json(level1))
    return {"tier_budget": budget, "sizes": sizes}


# --- the command ----------------------------------------------------------------------


def prepare(
    config: DataConfig | str | Path,
    out: str | Path | None = None,
    verify: bool = False,
    run: Parallel | None = None,
) -> Path:
    """Run every stage of ``config`` (or the YAML it names) that is not up to date, print the summary
    and return the data folder; ``verify`` also checks every shard against ``index.json``, ``run``
    says how the parallel stages run (default: one worker per core).
    """
    cfg = config if isinstance(config, DataConfig) else load_config(DataConfig, config)
    run = run or Parallel()
    run.processes()  # a bad count stops here, before any stage
    if out is not None and not str(out).strip():  # Path("") is the working directory
        raise BytecanaryError("prepare: --out is empty; give a folder (unset, it is data/<config name>)")
    out = check_output(Path(out) if out is not None else Path("data") / cfg.name, folder=True)
    out.mkdir(exist_ok=True)
    with ownership.hold(out):
        ownership.check_stages(out, STAGES)
        tok, evals = _stages(cfg, out, run)
        print(summary(cfg, out, tok, evals))
        if verify:
            print(f"[shards] verified {shards.verify(out / 'shards')} shard files against index.json")
    return out


def _stages(cfg: DataConfig, out: Path, run: Parallel) -> tuple[dict, dict]:
    """Every stage in order, each skipped when up to date; the tokenizer's and eval sets' infos."""
    corpus_key = {
        "seed": cfg.seed,
        "val_fraction": cfg.val_fraction,
        "sources": asdict(cfg)["sources"],
        "languages": sorted(cfg.mixture),
        "chunk_megabytes": cfg.chunk_megabytes,
    }
    corpus = run_stage(out, "corpus", corpus_key, lambda tmp, tasks: _corpus(cfg, tmp, tasks, run))
    tok_key = {"corpus": corpus["hash"], "tokenizer": asdict(cfg.tokenizer), "mixture": cfg.mixture}
    tok = run_stage(out, "tokenizer", tok_key, lambda tmp, _: _tokenizer(cfg, out / "corpus", tmp))
    shard_key = {
        "corpus": corpus["hash"],
        "tokenizer": tok["tokenizer_hash"],
        "mixture": cfg.mixture,
    }
    shard = run_stage(out, "shards", shard_key, lambda tmp, tasks: _shards(cfg, out, tok, tmp, tasks, run))
    snap_key = {"shards": shard["hash"], "budgets": cfg.eval.snapshot_tokens}
    snap = run_stage(out, "snapshot", snap_key, lambda tmp, _: _snapshot(cfg, out, tmp))
    # the tokenizer is in the snapshot's hash already; named here because the word-completion
    # pools read it, so folders whose pools predate token matching rebuild them
    eval_key = {
        "snapshot": snap["hash"],
        "tokenizer": tok["tokenizer_hash"],
        "eval": asdict(cfg.eval),
        "seed": cfg.seed,
    }
    eval_files = ["level1.json"]
    eval_files += [name for lang in cfg.mixture for name in (f"level0_{lang}.json", wordcomp.file_name(lang))]
    evals = run_stage(
        out,
        "evalsets",
        eval_key,
        lambda tmp, _: _evalsets(cfg, out / "corpus", out / "snapshot", out / "tokenizer", tmp),
        eval_files,
    )
    return tok, evals


def summary(cfg: DataConfig, out: Path, tok: dict, evals: dict) -> str:
    """The end-of-run table: tokens, bytes, mixture, byte-fallback rate, eval-set sizes
    (a short ``wordcomp`` pool means the held-out text ran out of words)."""
    index = read_json(out / "shards" / "index.json")
    head = f"{'lang':<5}{'train tok':>11}{'val tok':>9}{'train MB':>9}{'mix cfg':>8}"
    head += f"{'mix real':>9}{'byte-fb':>8}"
    head += "".join(f"{t:>10}" for t in evalsets.TIERS) + f"{'L1 held/tpl':>13}{'wordcomp':>9}"
    lines = [
        f"data: {out}   tokenizer: {cfg.tokenizer.kind}, vocab {tok['vocab_size']}, "
        f"hash {tok['tokenizer_hash']}",
        head,
    ]
    for lang, entry in index["languages"].items():
        sizes = evals["sizes"][lang]
        mb = entry["train"]["bytes"] / 1e6
        row = (
            f"{lang:<5}{entry['train']['tokens']:>11,}{entry['val']['tokens']:>9,}{mb:>9.1f}"
            f"{cfg.mixture[lang]:>8.3f}{entry['train']['share']:>9.3f}{entry['train']['byte_fallback_rate']:>8.3f}"
        )
        row += "".join(f"{sizes['level0'][t]:>10}" for t in evalsets.TIERS)
        row += f"{sizes['level1']['heldout']:>7}/{sizes['level1']['template']:<5}{sizes['wordcomp']:>9}"
        lines.append(row)
    return "\n".join(lines)
