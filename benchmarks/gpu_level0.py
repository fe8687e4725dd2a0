"""The Level 0 probe against batched HF ``model.generate`` on one checkpoint, on the device a
run trains on: the same samples, batch size and ``max_new_tokens``, greedy; how many
generations are identical, and the seconds of each side. ``gpu_check.py``'s
``level0_vs_generate`` part; ``benchmarks/probe_throughput.py`` is the same comparison on a
random model on a CPU, one process per side.

Greedy argmax near a tie flips with the batch shape and kernels (bf16 on a GPU above all), so
the generations that differ are counted, not held to zero.

    python benchmarks/gpu_level0.py RUN/checkpoints/step200.safetensors \\
        --probe '{"name": "level0", "trial": true, "per_language": 64}' --out level0.json
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from gpu_ceiling import sync

from bytecanary.probes import get_probe
from bytecanary.probes.engine import left_pad
from bytecanary.probes.models import pad_id
from bytecanary.probes.registry import NO_CONTEXT
from bytecanary.probes.targets import Loader, Target

WARMUP = 8  # samples each side runs first (kernels, allocator), untimed
Ids = list[list[int]]  # token ids, one row per sample


def generate_batched(model: Any, tokenizer: Any, prompts: Ids, batch: int, max_new: int) -> Ids:
    """What a user would write: left-padded batches through ``model.generate``, greedy, each
    row cut after its end of text."""
    eos, pad = tokenizer.eos_token_id, pad_id(tokenizer)
    out = []
    for lo in range(0, len(prompts), batch):
        ids, mask = left_pad(prompts[lo : lo + batch], pad, model.device)
        gen = model.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=False,
            max_new_tokens=max_new,
            eos_token_id=eos,
            pad_token_id=pad,
        )
        out += [until_eos(row[ids.shape[1] :].tolist(), eos) for row in gen]
    return out


def until_eos(row: list[int], eos: int) -> list[int]:
    return row[: row.index(eos) + 1] if eos in row else row


def probe_generations(probe: Any, model: Any, tokenizer: Any, prepared: Any) -> Ids:
    """The probe as it runs at a checkpoint (every metric computed); its generated ids."""
    result = probe.compute(model, tokenizer, prepared)
    probe.aggregate(prepared, [result], NO_CONTEXT)
    return [row[:n].tolist() for row, n in zip(result["tokens"], result["lengths"], strict=True)]


def timed(device: torch.device, run: Callable[..., Ids], *args: Any) -> tuple[Ids, float]:
    """``run(*args)`` and its seconds, the device synchronized at both ends."""
    sync(device)
    start = time.perf_counter()
    out = run(*args)
    sync(device)
    return out, time.perf_counter() - start


def compare(checkpoint: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Both sides on the checkpoint, in bfloat16 on CUDA and float32 on a CPU, each after a
    warm-up on its first WARMUP samples."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    loaded = Loader(device, dtype).load(Target.file(checkpoint))
    model, tokenizer = loaded.model.eval(), loaded.tokenizer
    probe = get_probe(**spec)
    prepared = probe.prepare(tokenizer, loaded.data_dir)
    prompts = [list(s.prompt_ids) for s in prepared.samples]
    batch, max_new = probe.config.batch_size, probe.config.max_new_tokens
    few = replace(prepared, samples=prepared.samples[:WARMUP])
    with torch.inference_mode():
        probe_generations(probe, model, tokenizer, few)
        generate_batched(model, tokenizer, prompts[:WARMUP], batch, max_new)
        ours, probe_s = timed(device, probe_generations, probe, model, tokenizer, prepared)
        theirs, generate_s = timed(device, generate_batched, model, tokenizer, prompts, batch, max_new)
    identical = sum(a == b for a, b in zip(ours, theirs, strict=True))
    return {
        "checkpoint": checkpoint,
        "device": device.type,
        "dtype": str(dtype).removeprefix("torch."),
        "probe": spec,
        "batch_size": batch,
        "max_new_tokens": max_new,
        "samples": len(prompts),
        "identical": identical,
        "different": len(prompts) - identical,
        "probe_seconds": round(probe_s, 3),
        "generate_seconds": round(generate_s, 3),
        "speed_up": round(generate_s / probe_s, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", help="a weights file (step<N>.safetensors) of a run")
    parser.add_argument(
        "--probe", type=json.loads, required=True, help="the level0 probe's spec, as in a config"
    )
    parser.add_argument("--out", required=True, help="the JSON to write")
    args = parser.parse_args()
    result = compare(args.checkpoint, args.probe)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    same, seconds = f"{result['identical']}/{result['samples']}", result["probe_seconds"]
    print(f"gpu_level0: {same} identical; probe {seconds} s, generate {result['generate_seconds']} s")


if __name__ == "__main__":
    main()
