"""Probing a checkpoint series with one worker against two, side by side in one run.

Each side is ``bytecanary probe RUN`` as a user launches it, one thread per process: one
process alone; ``torchrun --nproc-per-node 2 -m bytecanary.cli probe`` (two workers that
claim pairs, ``probes/claims.py``); and two independent ``bytecanary probe`` workers on one
``--out``, as SLURM array jobs run (no launcher). Wall time covers everything a user waits
for (start-up, loading each checkpoint, probing, records); the records' own ``seconds`` split
it into probing (the busiest worker's sum) and the rest, which two workers cannot share (each
pays its own start-up). The record files of every side must hold the same pairs.

    python benchmarks/series_workers.py RUN_DIR [--probes level0,level1] [--per-language 512 | --full]

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
from collections import Counter, defaultdict
from pathlib import Path

import torch

from bytecanary.records import Record, read

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1", "WANDB_MODE": "offline"}


def launch_seconds(commands: list[list[str]], out: Path) -> float:
    """Wall seconds of ``commands`` started together, all writing ``out``, until the last ends."""
    start = time.perf_counter()
    quiet = {"env": ENV, "stdout": subprocess.DEVNULL}
    running = [subprocess.Popen([*c, "--out", str(out), "--wandb=false"], **quiet) for c in commands]
    if any([p.wait() != 0 for p in running]):  # a list: every process is waited for
        sys.exit(f"a probe launch failed: {commands}")
    return time.perf_counter() - start


def busiest(made: list[Record]) -> float:
    """Probing seconds of the worker that probed longest."""
    per_worker: dict[str | None, float] = defaultdict(float)
    for r in made:
        per_worker[r.worker] += r.seconds
    return max(per_worker.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a run folder with at least 8 weights files")
    parser.add_argument("--probes", default="level0,level1")
    parser.add_argument("--per-language", type=int, default=512, help="each probe's trial size")
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
    probe = ["-m", "bytecanary.cli", "probe", str(args.run), "--config", str(config)]
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).parent / "torchrun")
    sides = {
        "1 process x 1 thread": [[sys.executable, *probe]],
        "torchrun 2 processes x 1 thread": [[torchrun, "--nproc-per-node", "2", *probe]],
        "2 independent workers x 1 thread": [
            [sys.executable, *probe, "--workers.name", f"w{i}"] for i in (0, 1)
        ],
    }
    walls = {name: launch_seconds(c, work / f"{i}.jsonl") for i, (name, c) in enumerate(sides.items())}
    made = [read(work / f"{i}.jsonl") for i in range(len(sides))]
    pairs = [Counter((r.checkpoint, r.probe) for r in m) for m in made]
    assert all(p == pairs[0] for p in pairs) and set(pairs[0].values()) == {1}, "the sides differ"
    n = sum(pairs[0].values())
    machine = f"{platform.machine()}  {os.cpu_count()} cores  load {os.getloadavg()[0]:.2f}"
    print(f"torch {torch.__version__}  {machine}")
    print(f"series: {len(weights)} checkpoints x {len(args.probes.split(','))} probes = {n} pairs")
    columns = f"{'wall s':>9}{'probing s':>11}{'rest s':>8}{'pairs/s':>9}{'speed-up':>10}"
    print(f"{'launch':<36}{columns}  pairs per worker")
    one, alone = walls["1 process x 1 thread"], busiest(made[0])
    for (name, wall), m in zip(walls.items(), made, strict=True):
        probing = busiest(m)
        workers = ", ".join(str(c) for _, c in sorted(Counter(r.worker for r in m).items()))
        times = f"{wall:>9.1f}{probing:>11.1f}{wall - probing:>8.1f}{n / wall:>9.2f}{one / wall:>10.2f}"
        print(f"{name:<36}{times}  {workers}")
    bound = one / (one - alone + alone / 2)
    print(f"two workers at best (start-up unshared, probing halved): {bound:.2f}x")
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
