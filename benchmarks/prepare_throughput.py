"""``bytecanary prepare`` on local corpora of 100 MB and 1 GB, with 1 and 2 workers, beside a
plain single-process pass, and a projection for ``configs/data/paper.yaml``.

Each corpus is a folder of JSONL files per language in the paper's mixture (en 10%, ja/ko/zh
30% each), what a cluster user has after downloading FineWeb; the text is the synthetic
source's, generated once and cycled. Each run is ``bytecanary prepare --workers N`` as a
user launches it, in a fresh output folder; peak memory is the PSS summed over the
command's whole process tree (a forked child's shared pages count once), sampled every
0.1 s. The reference is a plain pass in one process: read each document, encode it, write
its ids, nothing held. The checks the issue sets are printed with the share of their limit
reached.

    python benchmarks/prepare_throughput.py [--sizes 100,1000] [--workers 1,2] [--work /tmp/prep]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml

from bytecanary.data.config import SyntheticSource
from bytecanary.data.corpus import synthetic_documents
from bytecanary.data.languages import LANGUAGES

MIXTURE = {"en": 0.1, "ja": 0.3, "ko": 0.3, "zh": 0.3}
FILE_MB = 25
PAPER_MB = 40_000 + 3 * 120_000  # paper.yaml's max_megabytes
STAGES = ("corpus", "tokenizer", "shards", "snapshot", "evalsets")


def write_corpus(folder: Path, megabytes: int) -> None:
    """``folder/<lang>/NNNN.jsonl`` files of about ``FILE_MB`` each, cycling a seeded pool of
    synthetic documents per language (written once, reused by later runs)."""
    if (folder / "done").exists():
        return
    for lang, weight in MIXTURE.items():
        pool = list(synthetic_documents(LANGUAGES[lang], SyntheticSource(megabytes=4.0), seed=0))
        out = folder / lang
        out.mkdir(parents=True, exist_ok=True)
        budget, number, i = megabytes * 1e6 * weight, 0, 0
        while budget > 0:
            with open(out / f"{number:04d}.jsonl", "w", encoding="utf-8") as f:
                size = 0
                while size < FILE_MB * 1e6 and budget > 0:
                    doc = pool[i % len(pool)]
                    f.write(json.dumps({"text": doc, "id": i}, ensure_ascii=False) + "\n")
                    size += len(doc.encode("utf-8"))
                    budget -= len(doc.encode("utf-8"))
                    i += 1
            number += 1
    (folder / "done").touch()


def write_config(path: Path, corpus: Path) -> None:
    sources = [
        {"language": lang, "files": {"path": str(corpus / lang), "pattern": "*.jsonl"}} for lang in MIXTURE
    ]
    config = {
        "name": path.stem,
        "seed": 0,
        "mixture": MIXTURE,
        "val_fraction": 0.005,
        "chunk_megabytes": 16,
        "sources": sources,
        "tokenizer": {"vocab_size": 8192, "train_megabytes": 12},
        "eval": {"max_per_tier": 100, "level1_per_language": 64, "wordcomp_per_language": 64},
    }
    path.write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")


def memory(pid: int) -> int:
    """Proportional set size of one process: pages it shares with its forked parent count
    once over the tree, where summing RSS would count them in every process."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def tree_memory(pid: int) -> int:
    """Memory of ``pid`` and every process below it (PSS, from /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    tree, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        children = [p for p, pp in parents.items() if pp == parent and p not in tree]
        tree.update(children)
        frontier += children
    return sum(memory(p) for p in tree)


def running_stage(out: Path | None) -> str:
    """The first stage of ``out`` without a ``stage.json``: the one running now."""
    if out is None:
        return "-"
    return next((s for s in STAGES if not (out / s / "stage.json").exists()), "summary")


def measured(cmd: list[str], env: dict, out: Path | None = None) -> tuple[float, int, str]:
    """(wall seconds, peak memory of the process tree, the stage running at the peak) of a
    command run to completion."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak, at = 0, "-"
    while proc.poll() is None:
        now = tree_memory(proc.pid)
        if now > peak:
            peak, at = now, running_stage(out)
        time.sleep(0.1)
    seconds = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr.read()}")
    return seconds, peak, at


def plain_pass(corpus: Path, tokenizer: Path, out: Path) -> None:
    """The reference: every document read, encoded and written in one process, one at a time."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tokenizer))
    with open(out, "wb") as f:
        for path in sorted(corpus.rglob("*.jsonl")):
            with open(path, encoding="utf-8") as lines:
                for line in lines:
                    ids = tok.encode(json.loads(line)["text"], add_special_tokens=False)
                    np.array([*ids, tok.eos_token_id], dtype=np.uint16).tofile(f)


def run_prepare(work: Path, megabytes: int, workers: int) -> dict:
    corpus = work / f"corpus_{megabytes}"
    write_corpus(corpus, megabytes)
    config = work / f"bench_{megabytes}.yaml"
    write_config(config, corpus)
    out = work / f"data_{megabytes}_w{workers}"
    subprocess.run(["rm", "-rf", str(out)], check=True)
    env = {**os.environ, "TQDM_DISABLE": "1"}
    cmd = [sys.executable, "-m", "bytecanary.cli", "prepare", "--config", str(config), "--out", str(out)]
    seconds, peak, at = measured([*cmd, "--workers", str(workers)], env, out)
    stages = {s: json.loads((out / s / "stage.json").read_text())["seconds"] for s in STAGES}
    stages["shard tasks"] = json.loads((out / "shards" / "stage.json").read_text())["task_seconds"]
    size = sum(p.stat().st_size for p in corpus.rglob("*.jsonl"))
    return {
        "mb": megabytes,
        "workers": workers,
        "seconds": seconds,
        "peak": peak,
        "peak_stage": at,
        "stages": stages,
        "bytes": size,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000", help="corpus sizes in MB")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--work", default="/tmp/bytecanary_prepare_bench")
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    sizes = [int(s) for s in args.sizes.split(",")]
    counts = [int(w) for w in args.workers.split(",")]
    print(
        f"python {platform.python_version()}  cores {os.cpu_count()}  "
        f"{platform.processor() or platform.machine()}"
    )
    rows = [run_prepare(work, mb, w) for mb in sizes for w in counts]
    head = f"{'corpus':>7}{'workers':>8}{'wall s':>8}{'MB/s':>7}{'MB/s/core':>10}{'peak PSS':>10}{'(in)':>10}"
    print(head + "".join(f"{s:>10}" for s in STAGES))
    for r in rows:
        rate = r["bytes"] / 1e6 / r["seconds"]
        line = f"{r['mb']:>5}MB{r['workers']:>8}{r['seconds']:>8.1f}{rate:>7.2f}{rate / r['workers']:>10.2f}"
        line += f"{r['peak'] / 2**20:>7.0f}MiB{r['peak_stage']:>10}" + "".join(
            f"{r['stages'][s]:>9.1f}s" for s in STAGES
        )
        print(line)
    smallest = min(sizes)
    ref_out = work / "plain.bin"
    ref_seconds, ref_peak, _ = measured(
        [
            sys.executable,
            __file__,
            "--plain",
            str(work / f"corpus_{smallest}"),
            str(work / f"data_{smallest}_w1"),
        ],
        os.environ.copy(),
    )
    ref_bytes = next(r["bytes"] for r in rows if r["mb"] == smallest)
    ours = next(r for r in rows if r["mb"] == smallest and r["workers"] == 1)
    print(
        f"reference, plain single-process pass over the {smallest} MB corpus "
        "(read, encode one by one, write): "
        f"{ref_seconds:.1f} s, {ref_bytes / 1e6 / ref_seconds:.2f} MB/s, peak {ref_peak / 2**20:.0f} MiB; "
        f"our shard stage, 1 worker: {ours['stages']['shards']:.1f} s "
        f"({ref_seconds / ours['stages']['shards']:.2f}x)"
    )
    ref_out.unlink(missing_ok=True)
    checks(rows, sizes, counts)


def checks(rows: list[dict], sizes: list[int], counts: list[int]) -> None:
    """The issue's limits, with the share of each reached, and the paper.yaml projection."""
    by = {(r["mb"], r["workers"]): r for r in rows}
    small, large = min(sizes), max(sizes)
    for w in counts:
        ratio = by[large, w]["peak"] / by[small, w]["peak"]
        print(
            f"peak memory {large} MB / {small} MB, {w} worker(s): {ratio:.2f}x "
            f"(limit 1.3x: {ratio / 1.3:.0%} of it)"
        )
    if 1 in counts and 2 in counts:
        for mb in sizes:
            one, two = by[mb, 1]["stages"], by[mb, 2]["stages"]
            speedup = one["shards"] / two["shards"]
            tasks = one["shard tasks"] / two["shard tasks"]
            print(
                f"shard stage, {mb} MB: 2 workers {speedup:.2f}x one (target >= 1.7x: "
                f"{speedup / 1.7:.0%} of it); its tasks {tasks:.2f}x, the serial merge after them "
                f"{one['shards'] - one['shard tasks']:.1f} s"
            )
    best = by[large, max(counts)]
    parallel = best["stages"]["corpus"] + best["stages"]["shards"]
    per_core = best["bytes"] / 1e6 / parallel / max(counts)
    tokenizer_rate = 12 / best["stages"]["tokenizer"]  # MB of training sample per second
    serial = 2000 / tokenizer_rate + best["stages"]["snapshot"] + best["stages"]["evalsets"]
    print(
        f"projection for paper.yaml ({PAPER_MB / 1e3:.0f} GB of local files), "
        f"at {per_core:.2f} MB/s per core:"
    )
    for nodes, label in ((1, "one 64-core node"), (8, "8 nodes of 64 cores under SLURM")):
        hours = (PAPER_MB / (per_core * 64 * nodes) + serial) / 3600
        print(
            f"  {label}: {hours:.1f} h (parallel stages on {64 * nodes} cores + {serial / 60:.0f} min serial)"
        )
    print("  (assumes the disk keeps up and the text is local: a hub download is not included)")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--plain":
        plain_pass(Path(sys.argv[2]), Path(sys.argv[3]) / "tokenizer", Path(sys.argv[3]).parent / "plain.bin")
    else:
        main()
