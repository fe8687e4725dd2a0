"""Throughput and MFU: the FLOPs formula against counted FLOPs, the peak table, and the
``perf/*`` rows a training run writes (on the tokens_seen axis, no MFU without a peak)."""

import json

import pytest
import torch
from lightning.fabric.utilities.throughput import Throughput
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from bytecanary.train import throughput as train_throughput
from bytecanary.train.loggers import read_metrics
from bytecanary.train.model import ArchConfig, build_model
from bytecanary.train.throughput import dense_peak_flops, flops_per_token, perf_metrics

from ..conftest import wandb_records

PERF = ("perf/tokens_per_s", "perf/samples_per_s")
WALL = "perf/wall_seconds"


def test_flops_formula_matches_counted_flops_of_forward_and_backward():
    """6N + 12LHQT per token against torch's count of every matmul of one training step
    (the math attention kernel, so attention's matmuls are counted too); the formula also
    counts biases and LayerNorm gains as 6 FLOPs each, under 1% here."""
    model = build_model(ArchConfig(n_layer=2, n_head=4, n_embd=128, n_positions=64), vocab_size=512)
    ids = torch.randint(0, 512, (2, 64))
    with FlopCounterMode(display=False) as counter, sdpa_kernel(SDPBackend.MATH):
        model(ids).float().sum().backward()
    assert flops_per_token(model) * ids.numel() == pytest.approx(counter.get_total_flops(), rel=0.01)


@pytest.mark.parametrize(
    ("name", "dtype", "peak"),
    [
        ("NVIDIA H200", torch.bfloat16, 989e12),  # Lightning 2.6 does not know it
        ("NVIDIA H100 80GB HBM3", torch.bfloat16, 989e12),
        ("NVIDIA H100 PCIe", torch.float16, 756e12),
        ("NVIDIA A100-SXM4-80GB", torch.bfloat16, 312e12),
        ("NVIDIA H100 80GB HBM3", torch.float32, None),  # ours is 16-bit only; Lightning's then
        ("Some Future GPU", torch.bfloat16, None),
    ],
)
def test_dense_peak_table(monkeypatch, name, dtype, peak):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    assert dense_peak_flops(torch.device("cuda", 0), dtype) == peak
    assert dense_peak_flops(torch.device("cpu"), dtype) is None


def test_perf_metrics_are_global_rates_and_per_device_mfu():
    throughput = Throughput(available_flops=1e12, world_size=2, window_size=3)
    for i in range(1, 4):  # per device: 4 samples of 32 tokens and 1e11 FLOPs per second
        throughput.update(time=float(i), batches=i, samples=4 * i, lengths=128 * i, flops=int(1e11))
    perf = perf_metrics(throughput.compute(), world_size=2)
    assert perf == pytest.approx({"perf/tokens_per_s": 256, "perf/samples_per_s": 8, "perf/mfu": 0.1})
    throughput.available_flops = None
    assert "perf/mfu" not in perf_metrics(throughput.compute(), world_size=2)


@pytest.mark.slow
def test_run_logs_throughput_on_the_tokens_seen_axis_and_no_mfu_on_cpu(run12):
    run, _ = run12
    rows = read_metrics(run / "metrics.jsonl")
    perf = [r for r in rows if "perf/tokens_per_s" in r]
    train_steps = [r["step"] for r in rows if "train/loss" in r]
    assert [r["step"] for r in perf] == train_steps[1:]  # a rate needs one log interval first
    for row in perf:
        assert set(row) == {"step", "tokens_seen", *PERF, WALL}
        assert row["tokens_seen"] == row["step"] * 8 * 32
        assert row["perf/tokens_per_s"] == pytest.approx(row["perf/samples_per_s"] * 32)
    assert not any("perf/mfu" in r for r in rows)
    (wandb_run,) = (run / "wandb").glob("offline-run-*")
    history = [h["item"] for h in wandb_records(wandb_run, "history")]
    logged = [h for h in history if "perf/tokens_per_s" in h]
    assert [h["tokens_seen"] for h in logged] == [r["tokens_seen"] for r in perf]
    axes = {m["name"]: m.get("step_metric") for m in wandb_records(wandb_run, "metric") if "name" in m}
    assert all(axes[key] == "tokens_seen" for key in PERF)


@pytest.mark.slow
def test_mfu_is_logged_where_the_peak_is_known(micro, small_data, tmp_path, monkeypatch):
    """With a (pretend) peak for this device, perf/mfu = tokens/s x FLOPs per token / peak."""
    from bytecanary.train.cli import main

    monkeypatch.setattr(train_throughput, "dense_peak_flops", lambda device, dtype: 1e9)
    main(["--config", str(micro), "--run.name", "m", "--trainer.max_steps", "6"])
    rows = [r for r in read_metrics(tmp_path / "runs" / "m" / "metrics.jsonl") if "perf/mfu" in r]
    vocab = json.loads((small_data / "shards" / "index.json").read_text())["vocab_size"]
    model = build_model(ArchConfig(n_layer=2, n_head=2, n_embd=64, n_positions=32), vocab_size=vocab)
    assert rows
    for row in rows:
        assert row["perf/mfu"] == pytest.approx(row["perf/tokens_per_s"] * flops_per_token(model) / 1e9)


def _walls(run_dir):
    return [(r["step"], r[WALL]) for r in read_metrics(run_dir / "metrics.jsonl") if WALL in r]


@pytest.mark.slow
def test_wall_seconds_hold_the_probes_and_carry_across_a_resume(micro, tmp_path):
    """perf/wall_seconds grows at every log step, has a last row once the final checkpoint's
    probes ran, holds all the logged probe seconds, and a resumed run goes on from the
    checkpoint's value instead of starting again at 0."""
    from bytecanary.train.cli import main

    probes = ["--probes", "[{name: level0, trial: true, per_language: 4}]"]
    assert main(["--config", str(micro), "--run.name", "w", "--trainer.max_steps", "4", *probes]) == 0
    run_dir = tmp_path / "runs" / "w"
    first = _walls(run_dir)
    assert [step for step, _ in first] == [2, 4, 4]  # log steps, then the end of training
    assert [w for _, w in first] == sorted(w for _, w in first) and first[0][1] > 0
    probe_seconds = sum(v for r in read_metrics(run_dir / "metrics.jsonl") for k, v in r.items()
                        if k.startswith("perf/probe_seconds/"))  # fmt: skip
    assert 0 < probe_seconds < first[-1][1]
    resume = ["--run.name", "w", "--trainer.max_steps", "8", "--run.resume", "true", *probes]
    assert main(["--config", str(micro), *resume]) == 0
    resumed = [(step, w) for step, w in _walls(run_dir) if step > 4]
    assert [step for step, _ in resumed] == [6, 8, 8]
    assert resumed[0][1] > first[1][1]  # the step-4 checkpoint's wall time, plus this process's
