"""bfloat16 against float32 for the probes, on this machine's CPU: how fast Level 0 runs in
each on GPT-2 medium's shape, and how far bf16 moves each headline metric (strict, partial,
gold win; cloze accuracy) on the tiny and medium shapes, random (as ``probe_throughput.py``
builds them) or a trained ``--checkpoint``. ``bytecanary probe --dtype`` picks bf16 on CUDA
and fp32 on a CPU; this says what the choice costs and gains where it is run.

    python benchmarks/probe_dtypes.py [--data data/default] [--per-language 16] [--checkpoint F]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import torch
from probe_throughput import matmul_flops, random_model, work_flops
from transformers import AutoTokenizer

from bytecanary.checkpoints import load_gpt2
from bytecanary.probes import utf8_keys
from bytecanary.probes.registry import NO_CONTEXT
from bytecanary.probes.specs import get_probe

# the metrics that are shares of samples or items: strict, partial, gold win, cloze accuracy...
SHARES = {"strict", "partial", "soft", "gold_win_rate", "term_match", "acc", "acc_norm"}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
HEADLINE = [
    utf8_keys.level0("all", "all", "strict"),
    utf8_keys.level0("all", "all", "partial"),
    utf8_keys.level0("all", "all", "gold_win_rate"),
    utf8_keys.level1("all", "strict"),
    utf8_keys.level1("all", "partial"),
    utf8_keys.level1("all", "gold_win_rate"),
]


def cpu_name() -> str:
    """The CPU's model name and its bf16 flags, as /proc/cpuinfo gives them."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    lines = info.splitlines()
    name = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), "")
    flags = next((ln.split(":", 1)[1].split() for ln in lines if ln.startswith("flags")), [])
    bf16 = [f for f in flags if "bf16" in f]
    return f"{name or platform.processor()} ({', '.join(bf16) or 'no bf16 flags'}), {os.cpu_count()} cores"


def probes(per_language: int) -> list:
    mcqa = {"embedded_per_language": 32, "nonsense_per_language": 0, "protocols": ["cloze"]}
    return [
        get_probe("level0", trial=True, per_language=per_language, batch_size=64),
        get_probe("level1", trial=True, per_language=per_language, batch_size=64),
        get_probe("mcqa", trial=True, **mcqa),
    ]


def measure(model, tokenizer, data: str, per_language: int) -> tuple[dict[str, float], float, float]:
    """(every metric of the probes, Level 0 seconds, Level 0 FLOPs) for ``model`` as it is."""
    metrics: dict[str, float] = {}
    level0_seconds = level0_flops = 0.0
    for probe in probes(per_language):
        prepared = probe.prepare(tokenizer, Path(data))
        start = time.perf_counter()
        with torch.inference_mode():
            payload = probe.compute(model, tokenizer, prepared)
        if probe.name == "level0":
            level0_seconds = time.perf_counter() - start
            lengths = [len(s.prompt_ids) for s in prepared.samples]
            level0_flops = work_flops(model, lengths, list(payload["lengths"]))
        metrics |= probe.aggregate(prepared, [payload], NO_CONTEXT)
    return metrics, level0_seconds, level0_flops


def compare(name: str, model, tokenizer, args: argparse.Namespace) -> None:
    """Both dtypes on one model (fp32 first, then its bf16 copy, then fp32 again for the
    time), the headline deltas and the largest over every metric."""
    runs = {}
    for dtype in ("float32", "bfloat16", "float32"):
        metrics, seconds, flops = measure(model.to(DTYPES[dtype]), tokenizer, args.data, args.per_language)
        best = min(seconds, runs[dtype][1]) if dtype in runs else seconds
        runs[dtype] = (metrics, best, flops)
    (m32, s32, flops), (m16, s16, _) = runs["float32"], runs["bfloat16"]
    cloze = sorted(k for k in m32 if k.endswith(("/cloze/acc", "/cloze/acc_norm")) and "/all/" not in k)
    print(f"\n{name}: Level 0 {s32:.2f} s fp32, {s16:.2f} s bf16 ({s32 / s16:.2f}x), {flops / 1e9:.1f} GFLOP")
    print(f"{'metric':<48}{'float32':>10}{'bfloat16':>10}{'delta':>10}")
    for key in [k for k in HEADLINE if k in m32] + cloze:
        print(f"{key:<48}{m32[key]:>10.4f}{m16[key]:>10.4f}{m16[key] - m32[key]:>+10.4f}")
    shared = [k for k in m32 if k in m16 and k.rsplit("/", 1)[-1] in SHARES]
    worst = max(shared, key=lambda k: abs(m16[k] - m32[k]))
    delta = m16[worst] - m32[worst]
    print(f"largest |delta| over {len(shared)} keys (every language, tier, k): {worst} {delta:+.4f}")
    flips = sum(m16[k] != m32[k] for k in shared)
    print(f"keys that moved at all: {flips} of {len(shared)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data", default="data/default", help="a prepared data folder (tokenizer, eval sets)"
    )
    parser.add_argument("--per-language", type=int, default=16, help="trial M: characters per language")
    parser.add_argument("--shapes", default="tiny,medium", help="random shapes to compare")
    parser.add_argument("--checkpoint", action="append", default=[], help="a trained weights file, too")
    args = parser.parse_args()
    rates = {d: matmul_flops(1024, dtype=t) / 1e9 for d, t in DTYPES.items()}
    print(f"torch {torch.__version__}  threads {torch.get_num_threads()}  CPU: {cpu_name()}")
    print(f"1024^2 matmul: float32 {rates['float32']:.1f} GFLOP/s, bfloat16 {rates['bfloat16']:.1f} GFLOP/s")
    for shape in [s for s in args.shapes.split(",") if s]:
        model, tokenizer = random_model(shape, args.data)
        compare(f"random GPT-2 {shape}", model, tokenizer, args)
    for path in args.checkpoint:
        _, model = load_gpt2(path)
        compare(f"trained {path}", model, AutoTokenizer.from_pretrained(f"{args.data}/tokenizer"), args)


if __name__ == "__main__":
    main()
