"""The 355M preset on CPU, as far as a CPU can take it: one optimizer step of
``configs/gpt2-355m.yaml`` through ``bytecanary train`` (eager and ``torch.compile``) at the
full 1024-token context with the 8K vocabulary, its checkpoint exported to HF and probed,
peak memory measured. The data path and the attention kernel are checked at that shape too.

The step runs under the preset's ``bf16-mixed`` where the CPU has bf16 matrix instructions,
and in fp32 where it has none: there a bf16 matmul runs some 60x slower than an fp32 one
(0.9 against 54 GFLOP/s on one core of a 2-core EPYC), and the step would take the better
part of an hour. The runs are subprocesses one after another (each needs about 7 GB), with
no time limit: ``make test-slow`` (marker ``big``), not ``make test``. Their 3.7 GB
checkpoints are deleted afterwards."""

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import yaml

from bytecanary.train.checkpointing import ScheduledCheckpoint
from bytecanary.train.datamodule import ShardDataModule
from bytecanary.train.model import ArchConfig, build_model, count_parameters

from ..conftest import SMALL, train_cmd, write_config

ROOT = Path(__file__).resolve().parents[2]
PRESET = ROOT / "configs" / "gpt2-355m.yaml"
SEQ = 1024
MAX_RSS_MB = 12_000  # measured about 6,700 eager (README, "The 355M on CPU and GPU")


def cpu_has_bf16() -> bool:
    """Whether the CPU has bf16 matrix instructions (x86 ``avx512_bf16`` or ``amx_bf16``,
    Arm ``bf16``), by the kernel's list of CPU flags; False where there is none to read."""
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return False
    return bool(flags & {"avx512_bf16", "amx_bf16", "bf16"})


# the preset's precision where the CPU computes bf16 at speed, fp32 where it does not
PRECISION = "bf16-mixed" if cpu_has_bf16() else "32-true"

# Runs a command and prints the peak RSS of its process tree (the largest, in KB on Linux).
PEAK_RSS = (
    "import resource, subprocess, sys; rc = subprocess.run(sys.argv[1:]).returncode; "
    "print('peak_rss_kb', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); "
    "sys.exit(rc)"
)


def preset_model() -> torch.nn.Module:
    """The preset's GPT-2 with the 8K vocabulary, on the meta device (nothing allocated)."""
    with torch.device("meta"):
        return build_model(ArchConfig(**yaml.safe_load(PRESET.read_text())["model"]["arch"]), 8192)


@pytest.fixture(scope="module")
def data_8k(tmp_path_factory) -> Path:
    """The small corpus with the preset's 8K vocabulary (the small fixture has 1.2K)."""
    from bytecanary.data.prepare import prepare

    root = tmp_path_factory.mktemp("small8k")
    tokenizer = {**SMALL["tokenizer"], "vocab_size": 8192}
    return prepare(write_config(root / "small8k.yaml", name="small8k", tokenizer=tokenizer), root / "data")


def train_355m(
    data: Path, root: Path, name: str, compile: bool, precision: str = PRECISION
) -> tuple[Path, float, str]:
    """One optimizer step of the preset on CPU, batch 1 at the full context; (run folder,
    peak RSS MB, stderr)."""
    cmd = train_cmd(
        PRESET,
        *("--data.data_dir", str(data), "--data.batch_size", "1", "--data.val_tokens", "1024"),
        *("--trainer.accelerator", "cpu", "--trainer.devices", "1", "--trainer.max_steps", "1"),
        *("--trainer.limit_val_batches", "0", "--trainer.log_every_n_steps", "1"),
        *("--trainer.enable_progress_bar", "false", "--model.compile", str(compile).lower()),
        *("--trainer.precision", precision),
        *("--run.wandb", "false", "--run.root", str(root), "--run.name", name),
        *("--probes", "[]"),  # the preset's probes on a 312M model take minutes on 2 cores; probed below
    )
    proc = subprocess.run([sys.executable, "-c", PEAK_RSS, *cmd], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    kb = int(proc.stderr.rsplit("peak_rss_kb", 1)[1].split()[0])
    return root / name, kb / 1024, proc.stderr


@pytest.fixture(scope="module")
def run_355m(data_8k, tmp_path_factory):
    """The eager run, shared by the step, export and probe tests; its checkpoints go at the end."""
    run, rss, stderr = train_355m(data_8k, tmp_path_factory.mktemp("runs355"), "eager", compile=False)
    yield run, rss, stderr
    shutil.rmtree(run / "checkpoints")


def assert_one_finite_step(run: Path, rss_mb: float, stderr: str) -> None:
    """Loss finite; every AdamW first moment (0.1 x the clipped gradient) finite, and not all
    zero; the checkpoint is a bf16 weights file and one full state, as the printed plan says."""
    print(f"\n{run.name} ({PRECISION}): peak RSS {rss_mb:,.0f} MB")
    assert rss_mb < MAX_RSS_MB
    folder = run / "checkpoints"
    weights, state = folder / "step0000001.safetensors", folder / "step0000001.ckpt"
    n = count_parameters(preset_model())
    assert abs(weights.stat().st_size - 2 * n) < 1e6 and abs(state.stat().st_size - 12 * n) < 1e7
    assert os.readlink(folder / "last.ckpt") == state.name
    print(f"{run.name}: weights file {weights.stat().st_size:,} B, full state {state.stat().st_size:,} B")
    plan = ScheduledCheckpoint(folder, 1000, 512, "bfloat16", 10_000).disk_plan(preset_model(), 1)
    assert plan in stderr
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["trainer"]["precision"] == PRECISION and config["model"]["arch"]["n_positions"] == SEQ
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    (train,) = [r for r in rows if "train/loss" in r]
    assert train["step"] == 1 and train["tokens_seen"] == SEQ
    assert math.isfinite(train["train/loss"]) and abs(train["train/loss"] - math.log(8192)) < 1.0
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True, mmap=True)
    assert ckpt["bytecanary"]["gpt2_config"]["vocab_size"] == 8192
    moments = [s["exp_avg"] for s in ckpt["optimizer_states"][0]["state"].values()]
    assert len(moments) == len(ckpt["state_dict"]) - 1  # every parameter; lm_head.weight is wte
    assert all(torch.isfinite(m).all() for m in moments)
    assert sum(int(m.count_nonzero()) for m in moments) > 0.9 * sum(m.numel() for m in moments)
    assert all(torch.isfinite(w).all() for w in ckpt["state_dict"].values())


@pytest.mark.slow
@pytest.mark.big  # make test-slow
def test_355m_step_on_cpu(run_355m):
    assert_one_finite_step(*run_355m)


@pytest.mark.slow
@pytest.mark.big
@pytest.mark.compile  # make test-slow
def test_355m_step_on_cpu_compiled(data_8k, tmp_path):
    run, rss, stderr = train_355m(data_8k, tmp_path, "compiled", compile=True)
    try:
        assert_one_finite_step(run, rss, stderr)
    finally:
        shutil.rmtree(run / "checkpoints")


@pytest.mark.slow
@pytest.mark.big  # make test-slow
def test_355m_export_round_trip(run_355m, tmp_path):
    from transformers import AutoModelForCausalLM, GPT2LMHeadModel

    ckpt = run_355m[0] / "checkpoints" / "last.ckpt"
    out = tmp_path / "hf"
    cmd = [sys.executable, "-m", "bytecanary.cli", "export", str(ckpt), str(out)]
    subprocess.run(cmd, check=True, capture_output=True)
    model = AutoModelForCausalLM.from_pretrained(str(out)).eval()
    assert model.config.n_layer == 24 and model.config.vocab_size == 8192
    state = torch.load(ckpt, map_location="cpu", weights_only=True, mmap=True)["state_dict"]
    ref = GPT2LMHeadModel(model.config).eval()
    ref.load_state_dict({k.removeprefix("model."): v for k, v in state.items()})
    ids = torch.randint(0, 8192, (1, 64), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, ref(ids).logits, rtol=0, atol=0)


@pytest.mark.slow
@pytest.mark.big  # make test-slow
def test_355m_level0_probe(run_355m, tmp_path):
    probes = tmp_path / "probes.yaml"
    probes.write_text(yaml.safe_dump({"probes": [{"name": "level0", "trial": True, "per_language": 2}]}))
    out = tmp_path / "probes.jsonl"
    ckpt = run_355m[0] / "checkpoints" / "last.ckpt"
    cmd = [sys.executable, "-m", "bytecanary.cli", "probe", str(ckpt), "--probes", "[level0]", "--trial=true"]
    cmd += ["--wandb=false", "--config", str(probes), "--out", str(out), "--device", "cpu"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["status"] == "ok" and record["step"] == 1
    assert 0.0 <= record["metrics"]["probe/level0/all/all/partial"] <= 1.0


def test_data_streams_windows_of_1024_tokens(small_data):
    """Training batches are contiguous shard windows of 1024 + 1 tokens (1024 inputs, 1024
    targets); validation windows too."""
    dm = ShardDataModule(str(small_data), batch_size=2, seq_len=SEQ)
    loader = dm.train_dataloader()
    batch = next(iter(loader))
    assert batch["input_ids"].shape == (2, SEQ + 1) and batch["input_ids"].dtype == torch.int64
    shards = dm._open("train")
    for row, lang in zip(batch["input_ids"].numpy(), batch["lang"].tolist(), strict=True):
        shard = np.asarray(shards[lang])
        starts = np.flatnonzero(shard[: len(shard) - SEQ] == row[0])
        assert any(np.array_equal(shard[s : s + SEQ + 1], row) for s in starts)
    val = next(iter(dm.val_dataloader()))
    assert val["input_ids"].shape[1] == SEQ + 1


@pytest.mark.parametrize(("device", "pinned"), [("cpu", False), ("cuda", True)])
def test_batches_are_pinned_only_for_cuda(small_data, device, pinned):
    dm = ShardDataModule(str(small_data), batch_size=2, seq_len=32)
    dm.trainer = SimpleNamespace(
        global_step=0,
        accumulate_grad_batches=1,
        global_rank=0,
        world_size=1,
        strategy=SimpleNamespace(root_device=torch.device(device)),
    )
    assert dm.train_dataloader().pin_memory is pinned


def test_training_attention_is_flash_eligible(monkeypatch):
    """Training calls SDPA with no mask and ``is_causal``: what CUDA's flash kernel needs
    (a mask would force the slower kernels). The CPU build runs the same call, at the 355M
    preset's head size (64) on two heads."""
    sdpa = torch.nn.functional.scaled_dot_product_attention
    calls = []

    def spy(*args, **kwargs):
        calls.append((args[0].shape[-1], kwargs.get("attn_mask"), kwargs.get("is_causal")))
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    arch = ArchConfig(**yaml.safe_load(PRESET.read_text())["model"]["arch"])
    head = arch.n_embd // arch.n_head
    model = build_model(ArchConfig(n_layer=2, n_head=2, n_embd=2 * head, n_positions=128), vocab_size=256)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(torch.randint(0, 256, (2, 128))).float().mean().backward()
    assert calls == [(head, None, True)] * 2
