"""Probing a checkpoint series with one worker against two, side by side in one run.

Each side is ``bytecanary probe RUN`` as a user launches it, one thread per process: one
process alone, then ``torchrun --nproc-per-node 2 -m bytecanary.cli probe`` (two workers that
claim pairs, ``probes/claims.py``). Wall time covers everything a user waits for (start-up,
loading each checkpoint, probing, records). The two record files must hold the same pairs.

    python benchmarks/series_workers.py RUN_DIR [--probes level0,level1] [--per-language 64 | --full]

RUN_DIR is a run folder with at least 8 weights files, e.g. one trained by
``bytecanary train --config configs/tiny.yaml --trainer.max_steps=16 --run.checkpoint_every=2
--run.log_spaced_until=null --run.name=series``.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import torch

from bytecanary.records import read


def probe_seconds(command: list[str], out: Path) -> float:
    """Wall seconds of one launch writing ``out``."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1", "WANDB_MODE": "offline"}
    start = time.perf_counter()
    subprocess.run([*command, "--out", str(out), "--no-wandb"], check=True, env=env, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a run folder with at least 8 weights files")
    parser.add_argument("--probes", default="level0,level1")
    parser.add_argument("--per-language", type=int, default=64, help="each probe's trial size")
    parser.add_argument("--full", action="store_true", help="the whole eval sets instead of trial samples")
    args = parser.parse_args()
    weights = sorted((args.run / "checkpoints").glob("step*.safetensors"))
    if len(weights) < 8:
        sys.exit(f"{args.run}: {len(weights)} weights files; the benchmark wants at least 8")
    work = Path(tempfile.mkdtemp(prefix="series_workers."))
    config = work / "probes.yaml"
    entries = "".join(
        f"- {{name: {p}, trial: {str(not args.full).lower()}, per_language: {args.per_language}}}\n"
        for p in args.probes.split(",")
    )
    config.write_text("probes:\n" + entries, encoding="utf-8")
    probe = ["probe", str(args.run), "--config", str(config)]
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).parent / "torchrun")
    one = probe_seconds([sys.executable, "-m", "bytecanary.cli", *probe], work / "one.jsonl")
    launch = [torchrun, "--nproc-per-node", "2", "-m", "bytecanary.cli"]
    two = probe_seconds([*launch, *probe], work / "two.jsonl")
    pairs = [Counter((r.checkpoint, r.probe) for r in read(work / f"{n}.jsonl")) for n in ("one", "two")]
    assert pairs[0] == pairs[1] and set(pairs[0].values()) == {1}, "the two sides differ"
    workers = Counter(r.worker for r in read(work / "two.jsonl"))
    n = sum(pairs[0].values())
    machine = f"{platform.machine()}  {os.cpu_count()} cores  load {os.getloadavg()[0]:.2f}"
    print(f"torch {torch.__version__}  {machine}")
    print(f"series: {len(weights)} checkpoints x {len(args.probes.split(','))} probes = {n} pairs")
    print(f"{'launch':<44}{'wall s':>10}{'pairs/s':>10}{'speed-up':>10}")
    print(f"{'1 process x 1 thread':<44}{one:>10.1f}{n / one:>10.2f}{1:>10.2f}")
    print(f"{'torchrun 2 processes x 1 thread':<44}{two:>10.1f}{n / two:>10.2f}{one / two:>10.2f}")
    print("pairs per worker: " + ", ".join(f"{w.rsplit(':', 1)[-1]} {c}" for w, c in sorted(workers.items())))
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
