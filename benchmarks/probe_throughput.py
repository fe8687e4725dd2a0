"""Level 0 probe throughput on a compute-bound model: our engine vs a plain batched
``model.generate``, side by side in one run.

Both sides get the same prompts (Level 0 trial samples of the prepared data), the same
batches and ``max_new_tokens``, greedy. The baseline is what a user would write:
left-padded batches through ``model.generate``. Ours is the probe itself (prefill once per
distinct prompt + gold, the gold remainder scored in the same pass, KV-cache decoding, the
incremental DFA, every metric). Each side runs in its own process, so its peak RSS is its
own. Work is counted as (prompt + generated tokens) x 2 x parameters + attention for both
sides (the gold scoring ours adds is not credited) and set against this machine's fp32
matmul FLOP/s, measured here with a large ``torch.matmul``.

    python benchmarks/probe_throughput.py [--model medium] [--data data/default] [--per-language 32]

``--suite CONFIG`` instead times the whole probe suite of a training config (its
``probes:`` list, cadences included) on the random model, one fire of each entry at a
checkpoint (compute and aggregation; preparing runs once per training and is left out),
and what the cadences make of it over the config's planned checkpoints (``run`` section
and ``trainer.max_steps``): the probe seconds of a whole run and their mean per checkpoint.

    python benchmarks/probe_throughput.py --suite configs/tiny.yaml --model tiny
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from bytecanary.probes.registry import NO_CONTEXT

SHAPES = {  # GPT-2 medium's shape with the 8K vocabulary (configs/gpt2-355m.yaml), and the tiny one
    "medium": {"n_layer": 24, "n_head": 16, "n_embd": 1024, "n_positions": 1024},
    "tiny": {"n_layer": 4, "n_head": 4, "n_embd": 256, "n_positions": 256},
}


def matmul_flops(n: int = 2048, repeat: int = 5, dtype: torch.dtype = torch.float32) -> float:
    """Best FLOP/s of an n x n matmul in ``dtype``: the machine's attainable peak right now."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    torch.matmul(a, b)
    best = min(_timed(lambda: torch.matmul(a, b)) for _ in range(repeat))
    return 2 * n**3 / best


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def work_flops(model, prompt_lens: list[int], gen_lens: list[int]) -> float:
    """(prompt + generated) tokens x 2 x parameters + attention (4 x layers x width per key)."""
    cfg = model.config
    params = sum(p.numel() for p in model.parameters()) - model.transformer.wpe.weight.numel()
    total = 0.0
    for p, g in zip(prompt_lens, gen_lens, strict=True):
        n = p + g
        total += n * 2 * params + 4 * cfg.n_layer * cfg.n_embd * n * (n - 1) / 2
    return total


def random_model(model: str, data: str):
    """The random model of a shape (same seed on every side, the training activation) and
    the data folder's tokenizer."""
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    tokenizer = AutoTokenizer.from_pretrained(f"{data}/tokenizer")
    torch.manual_seed(0)
    cfg = GPT2Config(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        activation_function="gelu_pytorch_tanh",
        **SHAPES[model],
    )
    return GPT2LMHeadModel(cfg).eval(), tokenizer


def build(model: str, data: str, per_language: int, batch: int):
    """The random model, its tokenizer and the Level 0 samples."""
    from bytecanary.probes import get_probe

    net, tokenizer = random_model(model, data)
    probe = get_probe("level0", trial=True, per_language=per_language, batch_size=batch)
    return net, tokenizer, probe, probe.prepare(tokenizer, data)


def run_suite(model: str, data: str, config: str) -> dict:
    """Seconds of one fire of each probe entry of ``config`` (best of two, after a warm-up
    fire), and how many of the config's planned checkpoints its cadence fires at."""
    from bytecanary.config import read_yaml
    from bytecanary.probes.pipeline import Pipeline
    from bytecanary.probes.specs import build_probes
    from bytecanary.train.checkpointing import ScheduledCheckpoint
    from bytecanary.train.cli import RunConfig, probes_in

    doc = read_yaml(config)
    run = RunConfig(
        **{k: v for k, v in doc.get("run", {}).items() if k in ("checkpoint_every", "log_spaced_until")}
    )
    steps = doc.get("trainer", {}).get("max_steps")
    schedule = ScheduledCheckpoint(
        "/nonexistent", run.checkpoint_every, run.log_spaced_until
    ).scheduled_steps(steps)
    net, tokenizer = random_model(model, data)
    rows = []
    probes = build_probes([spec.spec for spec in probes_in(config)], config)
    pipeline = Pipeline(probes, os.devnull, source=config)
    for index, probe in enumerate(probes):
        prepared = pipeline.prepare(index, tokenizer, Path(data))
        times = []
        with torch.inference_mode():
            for _ in range(3):
                start = time.perf_counter()
                probe.aggregate(prepared, [probe.compute(net, tokenizer, prepared)], NO_CONTEXT)
                times.append(time.perf_counter() - start)
        fires = len(schedule) if probe.cadence.always else len(probe.cadence.steps(schedule))
        protocols = [
            p.removeprefix("wrapper_")
            for p in (*getattr(probe, "scored", ()), *getattr(probe, "generated", ()))
        ]
        label = f"{probe.name} ({', '.join(protocols)})" if protocols else probe.name
        rows.append(
            {"probe": label, "cadence": probe.cadence.describe(), "seconds": min(times[1:]), "fires": fires}
        )
    return {"checkpoints": len(schedule), "max_steps": steps, "rows": rows}


def print_suite(result: dict, model: str, config: str) -> None:
    n = result["checkpoints"]
    print(f"probe suite of {config} on a random GPT-2 {model}: one fire each (best of 2 after a warm-up),")
    print(f"and over its {n} planned checkpoints in {result['max_steps']:,} steps")
    columns = ("s / fire", "fires", "s / run", "s / ckpt")
    print(f"{'probe entry':<70}{'cadence':<22}" + "".join(f"{c:>10}" for c in columns))
    total_fire = total_run = 0.0
    for row in result["rows"]:
        run = row["seconds"] * row["fires"]
        total_fire, total_run = total_fire + row["seconds"], total_run + run
        cells = (f"{row['seconds']:.2f}", f"{row['fires']}", f"{run:.1f}", f"{run / n:.2f}")
        print(f"{row['probe'][:69]:<70}{row['cadence']:<22}" + "".join(f"{c:>10}" for c in cells))
    cells = (f"{total_fire:.2f}", "", f"{total_run:.1f}", f"{total_run / n:.2f}")
    print(f"{'full suite':<70}{'':<22}" + "".join(f"{c:>10}" for c in cells))


def run_side(side: str, model: str, data: str, per_language: int, batch: int) -> dict:
    from gpu_level0 import generate_batched, probe_generations

    net, tokenizer, probe, prep = build(model, data, per_language, batch)
    prompts = [list(s.prompt_ids) for s in prep.samples]
    max_new = probe.config.max_new_tokens

    def generate_baseline(rows: list[list[int]]) -> list[list[int]]:
        return generate_batched(net, tokenizer, rows, batch, max_new)

    def ours(prepared) -> list[list[int]]:
        return probe_generations(probe, net, tokenizer, prepared)

    with torch.inference_mode():
        if side == "ours":  # a warm-up on 8 samples (thread pools, allocator), each side on its own path
            ours(replace(prep, samples=prep.samples[:8]))
        else:
            generate_baseline(prompts[:8])
        start = time.perf_counter()
        tokens = ours(prep) if side == "ours" else generate_baseline(prompts)
        seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "samples": len(prompts),
        "flops": work_flops(net, [len(p) for p in prompts], [len(t) for t in tokens]),
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "tokens": tokens,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(SHAPES), default="medium")
    parser.add_argument(
        "--data", default="data/default", help="a prepared data folder (tokenizer, eval sets)"
    )
    parser.add_argument("--per-language", type=int, default=32, help="trial M: characters per language")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=2, help="runs per side, alternating; best time")
    parser.add_argument("--threads", type=int, help="torch threads on every side (default: torch's)")
    parser.add_argument("--suite", metavar="CONFIG", help="time a training config's probe suite instead")
    parser.add_argument("--side", choices=["ours", "generate"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        print(json.dumps(run_side(args.side, args.model, args.data, args.per_language, args.batch)))
        return
    if args.threads:  # on a shared machine, fewer threads than free cores keeps barriers from stalling
        torch.set_num_threads(args.threads)
        os.environ["OMP_NUM_THREADS"] = str(args.threads)  # for the sides' processes
    if args.suite:
        load_before = os.getloadavg()[0]
        result = run_suite(args.model, args.data, args.suite)
        print(
            f"torch {torch.__version__}  {platform.machine()}  threads {torch.get_num_threads()}  load "
            f"{load_before:.2f} -> {os.getloadavg()[0]:.2f}"
        )
        print_suite(result, args.model, args.suite)
        return
    compare(args)


def compare(args: argparse.Namespace) -> None:
    """Both sides in their own processes, alternating, best of ``--repeat``; printed side by side."""
    load_before, peak_before = os.getloadavg()[0], matmul_flops()
    runs: dict[str, list[dict]] = {"generate": [], "ours": []}
    for _ in range(args.repeat):
        for side in runs:
            cmd = [sys.executable, __file__, "--side", side, "--model", args.model, "--data", args.data]
            cmd += ["--per-language", str(args.per_language), "--batch", str(args.batch)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            runs[side].append(json.loads(out.strip().splitlines()[-1]))
    peak = max(peak_before, matmul_flops())
    ours, base = (min(runs[side], key=lambda r: r["seconds"]) for side in ("ours", "generate"))
    same = sum(a == b for a, b in zip(ours["tokens"], base["tokens"], strict=True))
    print(
        f"torch {torch.__version__}  {platform.machine()}  threads {torch.get_num_threads()}  load "
        f"{load_before:.2f} -> {os.getloadavg()[0]:.2f}  fp32 matmul {peak / 1e9:.1f} GFLOP/s"
    )
    print(
        f"Level 0 trial, random GPT-2 {args.model} ({args.data}): {ours['samples']:,} samples, batch "
        f"{args.batch}, greedy, best of {args.repeat}; identical generations {same}/{ours['samples']}"
    )
    columns = ("wall s", "samples/s", "GFLOP/s", "of matmul", "peak MB", "speed")
    print(f"{'engine':<36}" + "".join(f"{c:>10}" for c in columns))
    for name, side in (
        ("model.generate, batched (baseline)", "generate"),
        ("ours (level0 probe, all metrics)", "ours"),
    ):
        r = ours if side == "ours" else base
        flops = r["flops"] / r["seconds"]
        peaks = sorted(x["peak_mb"] for x in runs[side])  # allocator noise: the range over runs
        cells = (
            f"{r['seconds']:.2f}",
            f"{r['samples'] / r['seconds']:.1f}",
            f"{flops / 1e9:.1f}",
            f"{flops / peak:.0%}",
            f"{peaks[0]:.0f}-{peaks[-1]:.0f}",
            f"{base['seconds'] / r['seconds']:.2f}x",
        )
        print(f"{name:<36}" + "".join(f"{c:>10}" for c in cells))


if __name__ == "__main__":
    main()
