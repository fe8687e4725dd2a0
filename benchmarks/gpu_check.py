"""One GPU check of the 355M path, written to one JSON.

On one CUDA GPU (about 8 minutes on an H200), everything through ``bytecanary`` as a user
runs it, on ``configs/gpt2-355m.yaml`` (bf16-mixed, torch.compile):

1. a short real run on the default data: tokens/s and MFU (``perf/*`` of metrics.jsonl)
   over warm log windows, then the window in which a checkpoint is written and the probes
   fire, the seconds of each probe (per checkpoint: the median over the run's two, and a
   420-checkpoint series at that cost), the final loss and validation perplexity;
2. its last checkpoint exported (``bytecanary export``) and probed again from the HF folder
   (``bytecanary probe`` in the dtype the training-time probes computed in), with the largest
   difference to the training-time probe metrics over the smooth ones (``display.smooth``: no
   argmax enters them), and how many greedy metrics moved (a near tie flips with the process,
   threads and kernels, so those are reported, not held to a bound);
3. with two or more GPUs, the run's checkpoints probed by ``bytecanary probe`` as one process
   and as ``torchrun --nproc-per-node 2``: wall seconds, speed-up, and whether the two
   records files hold the same pairs with the same smooth metrics (one GPU: skipped);
4. ``level0_vs_generate``: the Level 0 probe against batched HF ``model.generate`` on the
   run's last weights file, the same samples on the same device (bf16 on a GPU): how many
   generations are identical, the seconds of each and the speed-up (benchmarks/gpu_level0.py);
5. ``profile``: a few more steps of the same ``bytecanary train`` (no probes) with the callback
   of benchmarks/gpu_profile.py added on its command line: the top 15 CUDA kernels by total
   time over 3 warm steps (on a CPU: CPU ops by self time);
6. ``ceiling``: a lean nanoGPT-style model of the same shape and batch in a bare loop
   (benchmarks/gpu_ceiling.py): tokens/s, MFU and peak memory; the run's warm tokens/s is
   then also given as a share of it (``run.warm.share_of_ceiling``);
7. a few steps with ``configs/strategy/fsdp.yaml`` (FSDP on one GPU), its checkpoint exported.

On a GPU each part has a time budget (gpu_plan.py: 8 minutes in all on one GPU, where the
2-rank series is skipped): a part that runs past it is killed, recorded as an error, and the
next part runs. ``--smoke`` runs the same on a CPU with a tiny model, a few steps and a small
corpus it prepares itself, step 3 with two CPU processes, without budgets (about 75 s on 2
cores). On the GPU machine's own image, ``benchmarks/gpu_run.sh`` runs it, and ``make test-slow``
rehearses that on a CPU (tests/test_gpu_rehearsal.py, holding every part to tests/test_gpu_check.py).

    python benchmarks/gpu_check.py [--out gpu_check.json] [--data data/default] [--batch-size 64]
    python benchmarks/gpu_check.py --smoke --out /tmp/gpu_check.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict
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
from gpu_plan import PRESET, PROFILE, SMOKE_DATA, Plan, gpu_plan, smoke_plan

from bytecanary import display, keys
from bytecanary.io import read_json, read_jsonl
from bytecanary.train.throughput import peak_flops

BENCHMARKS = ROOT / "benchmarks"
FSDP = ROOT / "configs" / "strategy" / "fsdp.yaml"
SERIES = 420  # checkpoints of a long series, whose probing cost step 1 estimates
# the default corpus, else one that needs no network (a GPU machine may have none)
DATA_CONFIGS = (ROOT / "configs" / "data" / "default.yaml", ROOT / "configs" / "data" / "synthetic.yaml")


def python(*args: str, ranks: int = 1) -> float:
    """Run ``python ARGS`` (``ranks`` > 1: under torchrun) with benchmarks/ on the path, which
    ``command``'s PYTHONSAFEPATH leaves off (the scripts' shared helpers, the profile callback);
    its wall seconds."""
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]
    path = os.pathsep.join(filter(None, (str(BENCHMARKS), os.environ.get("PYTHONPATH"))))
    return command(["env", f"PYTHONPATH={path}", *(torchrun if ranks > 1 else [sys.executable]), *args])


def bytecanary(*args: str, ranks: int = 1) -> float:
    """Run ``bytecanary ARGS`` as a user would (``ranks`` > 1: under torchrun); its wall seconds."""
    return python("-m", "bytecanary.cli", *args, ranks=ranks)


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
    validation at the end, no progress bar (its per-step read of the loss syncs the GPU), and
    no data budget (200 steps of 64 x 1024 read the small default corpus about 15 times)."""
    config_args = [a for c in (PRESET, *configs) for a in ("--config", str(c))]
    return [
        "train",
        *config_args,
        *(f"--data.data_dir={data}", f"--data.batch_size={plan.batch_size}", "--data.val_tokens=16384"),
        "--data.max_repeats=null",
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
        diff[name] = max((abs(now[k] - then[k]) for k in shared if display.smooth(k)), default=math.nan)
        moved[name] = sum(not close(now[k], then[k]) for k in shared if not display.smooth(k))
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


def level0_vs_generate(plan: Plan, trained: dict[str, Any], work: Path) -> dict[str, Any]:
    """The plan's Level 0 probe and batched ``model.generate`` on the run's last weights file,
    in one process on the device the run trained on (benchmarks/gpu_level0.py)."""
    spec = next(p for p in plan.probes if p["name"] == "level0")
    out = work / "level0_vs_generate.json"
    script, checkpoint = str(BENCHMARKS / "gpu_level0.py"), trained["checkpoint"]
    seconds = python(script, checkpoint, "--probe", json.dumps(spec), "--out", str(out))
    return {"seconds": seconds, **read_json(out)}


def profile(plan: Plan, data: Path, work: Path) -> dict[str, Any]:
    """A few steps of the run's ``bytecanary train`` without probes or validation, with
    benchmarks/gpu_profile.py's callback added on the command line (train/ holds no benchmark
    code); the run compiled the same graph, so torch's compile caches make this compile quick."""
    out, steps = work / "profile.json", PROFILE["after"] + PROFILE["steps"]
    callback = {"class_path": "gpu_profile.StepProfile", "init_args": {"out": str(out), **PROFILE}}
    lean = ["--probes=[]", "--trainer.limit_val_batches=0", f"--trainer.callbacks+={json.dumps(callback)}"]
    seconds = bytecanary(*train_args(plan, data, work / "profile", steps, steps), *lean)
    return {"seconds": seconds, **read_json(out)}


def ceiling(plan: Plan, data: Path, work: Path) -> dict[str, Any]:
    """The lean reference of the plan's shape, batch and the data's vocabulary, in a process of
    its own (benchmarks/gpu_ceiling.py)."""
    out = work / "ceiling.json"
    vocab = read_json(data / "shards" / "index.json")["vocab_size"]
    shape = ["--arch", json.dumps(plan.arch), f"--vocab-size={vocab}", f"--batch-size={plan.batch_size}"]
    seconds = python(str(BENCHMARKS / "gpu_ceiling.py"), *shape, "--out", str(out))
    return {"seconds": seconds, **read_json(out)}


def share_of_ceiling(results: dict[str, Any]) -> None:
    """The run's warm tokens/s over the ceiling's, beside its MFU (the same FLOPs per token)."""
    warm, top = results.get("run", {}).get("warm", {}), results.get("ceiling", {})
    if warm.get("tokens_per_s") and top.get("tokens_per_s"):
        warm["share_of_ceiling"] = round(warm["tokens_per_s"] / top["tokens_per_s"], 3)


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
                compared = lambda: level0_vs_generate(plan, trained, work)  # noqa: E731
                attempt(results, "level0_vs_generate", compared, budgets.get("level0_vs_generate"))
            attempt(results, "profile", lambda: profile(plan, data_dir, work), budgets.get("profile"))
            attempt(results, "ceiling", lambda: ceiling(plan, data_dir, work), budgets.get("ceiling"))
            share_of_ceiling(results)
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
