"""The sizes of one ``gpu_check.py``: one GPU's (the preset's shape and probes, each part's time
budget) or ``--smoke``'s on a CPU (a tiny model and corpus, no budgets)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import yaml
from gpu_budget import ROOT

PRESET = ROOT / "configs" / "gpt2-355m.yaml"
# seconds per part on a GPU, where the 355M compiles in 45-52 s and steps in about 0.3 s:
# compile, 200 steps, two checkpoints' probes and validation; an export and a probe; the 2-rank
# series (2+ GPUs only); loading and probing one checkpoint; a recompile from torch's caches
# and 8 steps; the lean model's compile and 13 steps; a few FSDP steps. One GPU: 480 in all
BUDGETS = {
    "run": 215,
    "export_and_probe": 50,
    "series_ranks": 60,
    "level0_vs_generate": 30,
    "profile": 50,
    "ceiling": 65,
    "fsdp": 70,
}
# the profile part's steps: torch.profiler over `steps` after `after` warm ones, the top `rows`
PROFILE = {"after": 5, "steps": 3, "rows": 15}
PRESET_CONFIG = yaml.safe_load(PRESET.read_text(encoding="utf-8"))
PROBES = PRESET_CONFIG["probes"]  # the preset's own, cadences included
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
ARCH = {k: PRESET_CONFIG["model"]["arch"][k] for k in SMOKE_MODEL}  # the preset's shape, for the ceiling


@dataclass
class Plan:
    """The sizes of one check: one GPU's, or ``--smoke``'s on a CPU."""

    batch_size: int
    arch: dict[str, int]  # the model's shape, which the ceiling copies
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
    return Plan(batch_size or default, ARCH, 200, 10, 30, PROBES, flags=one, budgets=BUDGETS)


def smoke_plan() -> Plan:
    arch = [f"--model.arch.{k}={v}" for k, v in SMOKE_MODEL.items()]
    cpu = ["--trainer.accelerator=cpu", "--trainer.devices=1", "--model.compile=false"]
    return Plan(4, SMOKE_MODEL, 12, log_every=2, fsdp_steps=0, probes=SMOKE_PROBES, flags=[*arch, *cpu])
