"""One GPU check of the 355M path, written to one JSON.

On one CUDA GPU (about 8 minutes on an H200), everything through ``bytecanary`` as a user
runs it, on ``configs/gpt2-355m.yaml`` (bf16-mixed, torch.compile):

1. a short real run on the default data: tokens/s and MFU (``perf/*`` of metrics.jsonl)
   over warm log windows, then the window in which a checkpoint is written and the probes
   fire, the seconds of each probe (per checkpoint: the median over the run's two, and a
   420-checkpoint series at that cost), the final loss and validation perplexity;
2. its last checkpoint exported (``bytecanary export``) and probed again from the HF folder
   (``bytecanary probe`` in the dtype the training-time probes computed in), with the largest
   difference to the training-time probe metrics over the smooth ones (``keys.smooth``: no
   argmax enters them), and how many greedy metrics moved (a near tie flips with the process,
   threads and kernels, so those are reported, not held to a bound);
3. with two or more GPUs, the run's checkpoints probed by ``bytecanary probe`` as one process
   and as ``torchrun --nproc-per-node 2``: wall seconds, speed-up, and whether the two
   records files hold the same pairs with the same smooth metrics (one GPU: skipped);
4. a few steps with ``configs/strategy/fsdp.yaml`` (FSDP on one GPU), its checkpoint exported.

On a GPU each part has a time budget (``BUDGETS``, about 8 minutes in all): a part that runs
past it is killed, recorded as an error, and the next part runs. ``--smoke`` runs the same on
a CPU with a tiny model, a few steps and a small corpus it prepares itself, step 3 with two
CPU processes, without budgets (under a minute on 2 cores; ``make test`` runs it,
tests/test_gpu_check.py). On the GPU machine's own image, ``benchmarks/gpu_run.sh`` runs it.

    python benchmarks/gpu_check.py [--out gpu_check.json] [--data data/default] [--batch-size 64]
    python benchmarks/gpu_check.py --smoke --out /tmp/gpu_check.json
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import lightning
import numpy
import tokenizers
import torch
import transformers
import yaml
from gpu_budget import BUDGET, ROOT, command
from gpu_compare import StepFailed, close, compare_records, ok

from bytecanary import keys
from bytecanary.io import read_jsonl
from bytecanary.train.throughput import peak_flops

PRESET = ROOT / "configs" / "gpt2-355m.yaml"
FSDP = ROOT / "configs" / "strategy" / "fsdp.yaml"
SERIES = 420  # checkpoints of a long series, whose probing cost step 1 estimates
# seconds per part on a GPU: compile, 200 steps and two checkpoints' probes; an export and
# a probe; a few FSDP steps; the 2-rank series (2+ GPUs only)
BUDGETS = {"run": 270, "export_and_probe": 75, "fsdp": 75, "series_ranks": 60}
# the default corpus, else one that needs no network (a GPU machine may have none)
DATA_CONFIGS = (ROOT / "configs" / "data" / "default.yaml", ROOT / "configs" / "data" / "synthetic.yaml")
PROBES = yaml.safe_load(PRESET.read_text(encoding="utf-8"))["probes"]  # the preset's own, cadences included
SMOKE_PROBES = [
    {"name": "level0", "trial": True, "per_language": 2},
    {"name": "level1", "trial": True, "per_language": 2},
    {
        "name": "mcqa",
        "trial": True,
        "embedded_per_language": 2,
        "nonsense_per_language": 2,
        "generative_per_task": 1,
    },
]
SMOKE_DATA = {
    "name": "smoke",
    "seed": 0,
    "mixture": {"en": 0.1, "ja": 0.3, "ko": 0.3, "zh": 0.3},
    "val_fraction": 0.05,
    "sources": [{"language": lang, "synthetic": {"megabytes": 0.12}} for lang in ("en", "ja", "ko", "zh")],
    "tokenizer": {"vocab_size": 1200, "character_coverage": 0.995},
    "eval": {
        "max_per_tier": 20,
        "snapshot_tokens": [20000],
        "level1_per_language": 8,
        "wordcomp_per_language": 8,
    },
}
SMOKE_MODEL = {"n_layer": 2, "n_head": 2, "n_embd": 64, "n_positions": 64}


@dataclass
class Plan:
    """The sizes of one check: one GPU's, or ``--smoke``'s on a CPU."""

    batch_size: int
    steps: int  # of the run with probes; checkpoints (and probes) at steps/2 and steps
    log_every: int  # perf/* windows are this many steps
    fsdp_steps: int
    probes: list[dict[str, Any]]
    flags: list[str] = field(default_factory=list)  # extra `bytecanary train` flags
    budgets: dict[str, float] = field(default_factory=dict)  # seconds per part; none: no limit


def gpu_plan(batch_size: int | None) -> Plan:
    """Micro-batch 64 x 1024 tokens fills an H200 (about 70 GB in bf16); 32 on 80 GB cards."""
    memory = torch.cuda.get_device_properties(0).total_memory
    default = 64 if memory > 100 * 2**30 else 32
    one = ["--trainer.devices=1"]  # the preset's `auto` would take every GPU
    return Plan(batch_size or default, 200, 10, 30, PROBES, flags=one, budgets=BUDGETS)


def smoke_plan() -> Plan:
    arch = [f"--model.arch.{k}={v}" for k, v in SMOKE_MODEL.items()]
    cpu = ["--trainer.accelerator=cpu", "--trainer.devices=1", "--model.compile=false"]
    return Plan(4, steps=12, log_every=2, fsdp_steps=0, probes=SMOKE_PROBES, flags=[*arch, *cpu])


def bytecanary(*args: str, ranks: int = 1) -> float:
    """Run ``bytecanary ARGS`` as a user would (``ranks`` > 1: under torchrun); its wall seconds."""
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]
    return command([*(torchrun if ranks > 1 else [sys.executable]), "-m", "bytecanary.cli", *args])


def environment() -> dict[str, Any]:
    gpu = torch.cuda.is_available()
    device = torch.device("cuda", 0) if gpu else torch.device("cpu")
    cpu = f"cpu ({platform.processor() or platform.machine()})"
    return {
        "device": torch.cuda.get_device_name(0) if gpu else cpu,
        "gpu_memory_gb": round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1) if gpu else None,
        "peak_bf16_flops": peak_flops(device, torch.bfloat16),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if gpu else None,
        "lightning": lightning.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "numpy": numpy.__version__,
        "cpu_threads": torch.get_num_threads(),
    }


def prepare_data(data: str | None, smoke: bool, work: Path) -> Path:
    """``--data`` if given, else data/default when prepared, else prepare it (smoke: a small corpus)."""
    if data:
        return Path(data)
    if smoke:
        config = work / "smoke.yaml"
        config.write_text(yaml.safe_dump(SMOKE_DATA), encoding="utf-8")
        bytecanary("prepare", "--config", str(config), "--out", str(work / "data"))
        return work / "data"
    if (ROOT / "data" / "default" / "shards" / "index.json").exists():
        return ROOT / "data" / "default"
    for config in DATA_CONFIGS:
        try:
            bytecanary("prepare", "--config", str(config), "--out", str(ROOT / "data" / config.stem))
            return ROOT / "data" / config.stem
        except StepFailed as err:
            print(f"gpu_check: {config.name} could not be prepared here: {str(err).splitlines()[0]}")
    raise StepFailed("no corpus could be prepared; pass --data")


def train_args(plan: Plan, data: Path, run: Path, steps: int, every: int, *configs: Path) -> list[str]:
    """``bytecanary train`` of the preset into ``run``: checkpoints every ``every`` steps only,
    validation at the end, no progress bar (its per-step read of the loss syncs the GPU)."""
    config_args = [a for c in (PRESET, *configs) for a in ("--config", str(c))]
    return [
        "train",
        *config_args,
        *(f"--data.data_dir={data}", f"--data.batch_size={plan.batch_size}", "--data.val_tokens=16384"),
        *(f"--trainer.max_steps={steps}", f"--trainer.log_every_n_steps={plan.log_every}"),
        *(f"--trainer.val_check_interval={steps}", "--trainer.enable_progress_bar=false"),
        *(f"--run.checkpoint_every={every}", "--run.log_spaced_until=null"),
        *(f"--run.root={run.parent}", f"--run.name={run.name}", "--run.wandb=false"),
        *plan.flags,
    ]


def perf_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of ``perf/*`` over log windows, with the steps they end at."""
    perf = [r for r in rows if keys.perf("tokens_per_s") in r]
    out: dict[str, Any] = {"windows_ending_at_steps": [r[keys.STEP] for r in perf]}
    for name in ("tokens_per_s", "samples_per_s", "mfu"):
        values = [r[keys.perf(name)] for r in perf if keys.perf(name) in r]
        out[name] = statistics.median(values) if values else None
    return out


def run_with_probes(plan: Plan, data: Path, work: Path) -> dict[str, Any]:
    """Train ``plan.steps`` with the probes firing at each checkpoint; split perf/* into warm
    windows (after compile and before the first checkpoint) and the window holding it."""
    probes = work / "probes.yaml"
    probes.write_text(yaml.safe_dump({"probes": plan.probes}), encoding="utf-8")
    run, first = work / "run", plan.steps // 2
    seconds = bytecanary(*train_args(plan, data, run, plan.steps, first, probes))
    rows = read_jsonl(run / "metrics.jsonl")
    warm = [r for r in rows if 3 * plan.log_every <= r[keys.STEP] <= first]
    firing = [r for r in rows if first < r[keys.STEP] <= first + plan.log_every]
    probe_seconds: dict[str, list[float]] = {}
    records = read_jsonl(run / "probes.jsonl")
    for record in records:
        probe_seconds.setdefault(ok(record)["probe"], []).append(record["seconds"])
    loss, ppl = keys.train("loss"), keys.val_ppl()
    train = [r for r in rows if loss in r]
    val = [r for r in rows if ppl in r]
    return {
        "seconds": seconds,
        "tokens_seen": train[-1][keys.TOKENS_SEEN],
        "train_loss": [train[0][loss], train[-1][loss]],
        "val_ppl": val[-1][ppl] if val else None,
        "warm": perf_summary(warm),
        "with_checkpoint_and_probes": perf_summary(firing),
        "probe_seconds": probe_seconds,
        "probe_cost": probe_cost(records),
        "checkpoint": records[-1]["checkpoint"],  # the last step's weights file, as the probes read it
    }


def probe_cost(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per probe name, its seconds at one checkpoint (entries of one name summed; the median
    over the checkpoints probed), and a SERIES-checkpoint series with every probe at each."""
    at: dict[str, dict[str, float]] = {}
    for record in records:
        seconds = at.setdefault(ok(record)["probe"], {})
        seconds[record["checkpoint"]] = seconds.get(record["checkpoint"], 0.0) + record["seconds"]
    per = {name: round(statistics.median(s.values()), 3) for name, s in at.items()}
    series = round(SERIES * sum(per.values()), 1)
    shown = ", ".join(f"{name} {s}" for name, s in per.items())
    print(f"gpu_check: probe seconds per checkpoint: {shown}; {SERIES} checkpoints: {series} s")
    return {"seconds_per_checkpoint": per, f"series_{SERIES}_seconds": series}


def export_and_probe(trained: dict[str, Any], work: Path) -> dict[str, Any]:
    """Export the last checkpoint and run ``bytecanary probe`` on the HF folder; compare its
    metrics with the ones the training-time probes logged for the same weights."""
    hf, out = work / "hf", work / "probe_cli.jsonl"
    export_s = bytecanary("export", trained["checkpoint"], str(hf))
    during = {r["probe"]: r for r in read_jsonl(work / "run" / "probes.jsonl")}  # the last wins
    dtype = next(iter(during.values())).get("dtype") or "float32"  # what the training probes ran in
    probes = ["--config", str(work / "probes.yaml"), "--dtype", dtype]
    probe_s = bytecanary("probe", str(hf), *probes, "--wandb=false", "--out", str(out))
    cli = {r["probe"]: r for r in read_jsonl(out)}
    diff, moved = {}, {}
    for name, record in cli.items():
        now, then = ok(record)["metrics"], ok(during[name])["metrics"]
        shared = now.keys() & then.keys()
        diff[name] = max((abs(now[k] - then[k]) for k in shared if keys.smooth(k)), default=math.nan)
        moved[name] = sum(not close(now[k], then[k]) for k in shared if not keys.smooth(k))
    return {
        "export_seconds": export_s,
        "probe_command_seconds": probe_s,
        "probe_seconds": {n: r["seconds"] for n, r in cli.items()},
        "dtype": dtype,
        "max_abs_diff_to_training_probes": diff,
        "greedy_metrics_moved": moved,
    }


def series_ranks(work: Path, smoke: bool) -> dict[str, Any]:
    """The run's checkpoints probed by one process and by a 2-rank torchrun launch (smoke: two
    CPU processes): wall seconds, speed-up, and whether the records agree pair for pair."""
    if not smoke and torch.cuda.device_count() < 2:
        return {"skipped": "one GPU"}
    probe = ["probe", str(work / "run"), "--config", str(work / "probes.yaml"), "--wandb=false"]
    probe += ["--device", "cpu"] if smoke else []
    one, two = work / "series_1.jsonl", work / "series_2.jsonl"
    one_s = bytecanary(*probe, "--out", str(one))
    two_s = bytecanary(*probe, "--out", str(two), ranks=2)
    result = {"one_process_seconds": one_s, "two_ranks_seconds": two_s, "speed_up": round(one_s / two_s, 2)}
    result |= compare_records(read_jsonl(one), read_jsonl(two))
    print(f"gpu_check: series of {result['pairs']} pairs: 1 process {one_s} s, 2 ranks {two_s} s, ", end="")
    print(f"speed-up {result['speed_up']}, records {'agree' if result['agree'] else 'DIFFER'}")
    return result


def fsdp_run(plan: Plan, data: Path, work: Path) -> dict[str, Any]:
    """The preset composed with the FSDP preset on one GPU; its full checkpoint exported."""
    if not torch.cuda.is_available():
        return {"skipped": "Lightning's FSDP needs CUDA"}
    steps = plan.fsdp_steps
    seconds = bytecanary(*train_args(plan, data, work / "fsdp", steps, steps, FSDP))
    rows = read_jsonl(work / "fsdp" / "metrics.jsonl")
    export_s = bytecanary("export", str(work / "fsdp" / "checkpoints" / "last.ckpt"), str(work / "fsdp_hf"))
    warm = [r for r in rows if r[keys.STEP] >= 2 * plan.log_every]
    return {"seconds": seconds, "warm": perf_summary(warm), "export_seconds": export_s}


def attempt(
    results: dict[str, Any], name: str, step: Callable[[], dict[str, Any]], budget: float | None = None
) -> dict[str, Any] | None:
    """Run one part within ``budget`` seconds; a failure is recorded in the JSON and the other
    parts still run."""
    print(f"gpu_check: {name} ..." + (f" (budget {budget} s)" if budget else ""), flush=True)
    BUDGET.seconds, BUDGET.started = budget, time.perf_counter()
    try:
        results[name] = step()
    except Exception as err:
        results[name] = {"error": str(err) if isinstance(err, StepFailed) else traceback.format_exc()}
        return None
    return results[name]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="gpu_check.json")
    parser.add_argument("--data", help="a prepared data folder (default: data/default, prepared if missing)")
    parser.add_argument(
        "--batch-size", type=int, help="micro-batch (default: 64 above 100 GB of GPU memory, else 32)"
    )
    parser.add_argument(
        "--smoke", action="store_true", help="CPU, tiny model, a few steps: checks the script"
    )
    parser.add_argument("--work", help="folder for runs and data (default: a temporary one)")
    args = parser.parse_args()
    if not args.smoke and not torch.cuda.is_available():
        parser.error("no CUDA GPU here; --smoke runs the check on a CPU with tiny sizes")
    start = time.perf_counter()
    plan = smoke_plan() if args.smoke else gpu_plan(args.batch_size)
    results: dict[str, Any] = {"mode": "smoke" if args.smoke else "gpu", "environment": environment()}
    results["plan"] = asdict(plan)
    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        work = Path(tmp)
        data = attempt(results, "data", lambda: {"dir": str(prepare_data(args.data, args.smoke, work))})
        if data:
            data_dir = Path(data["dir"])
            budgets = plan.budgets
            trained = attempt(
                results, "run", lambda: run_with_probes(plan, data_dir, work), budgets.get("run")
            )
            if trained:
                checked = lambda: export_and_probe(trained, work)  # noqa: E731
                attempt(results, "export_and_probe", checked, budgets.get("export_and_probe"))
                ranks = lambda: series_ranks(work, args.smoke)  # noqa: E731
                attempt(results, "series_ranks", ranks, budgets.get("series_ranks"))
            attempt(results, "fsdp", lambda: fsdp_run(plan, data_dir, work), budgets.get("fsdp"))
    results["seconds"] = round(time.perf_counter() - start, 1)
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    failed = [k for k, v in results.items() if isinstance(v, dict) and "error" in v]
    print(
        f"gpu_check: {args.out} written in {results['seconds']} s" + (f"; failed: {failed}" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
