"""Checkpoints sized for 420 of them: a weights file at every scheduled step, one rolling
full training state (plus the kept ones), ``last.ckpt`` a link; the files round-trip,
export and probe, and the disk estimate fits the real files, at the end and at the peak
(a new full state beside the one it replaces)."""

import json
import os
from pathlib import Path

import pytest
import torch
import yaml
from safetensors import safe_open

from bytecanary.checkpoints import (
    gpt2_state,
    load_checkpoint,
    load_gpt2,
    probe_checkpoints,
    training_states,
)
from bytecanary.train.checkpointing import (
    AtomicCheckpointIO,
    ScheduledCheckpoint,
    checkpoint_bytes,
    human_bytes,
    latest_checkpoint,
)
from bytecanary.train.export import export
from bytecanary.train.model import ArchConfig, build_model, count_parameters

from .conftest import micro_config

ROOT = Path(__file__).resolve().parents[2]


def test_scheduled_steps_and_kept_states(tmp_path):
    ckpt = ScheduledCheckpoint(tmp_path, every_n_steps=4, log_spaced_until=2, keep_state_every=8)
    assert ckpt.scheduled_steps(12) == [1, 2, 4, 8, 12] and ckpt.scheduled_steps(0) == []
    assert [s for s in ckpt.scheduled_steps(20) if ckpt.keeps_state(s)] == [8, 16]
    assert not ScheduledCheckpoint(tmp_path, 4, None).keeps_state(8)


@pytest.mark.slow
def test_layout_after_a_run(run12):
    run, proc = run12
    ckpts = run / "checkpoints"
    weights = [f"step{s:07d}.safetensors" for s in (1, 2, 4, 8, 12)]
    states = ["step0000008.ckpt", "step0000012.ckpt"]  # kept (a multiple of 8), newest
    assert sorted(p.name for p in ckpts.iterdir()) == sorted([*weights, *states, "last.ckpt"])
    assert (ckpts / "last.ckpt").is_symlink() and os.readlink(ckpts / "last.ckpt") == "step0000012.ckpt"
    assert latest_checkpoint(ckpts) == ckpts / "step0000012.ckpt"
    assert [p.name for p in probe_checkpoints(ckpts)] == weights
    assert [p.name for p in training_states(ckpts)] == states
    # Lightning's records name only files that exist
    (mc,) = [s for s in load_checkpoint(ckpts / "last.ckpt")["callbacks"].values() if "best_model_path" in s]
    assert (
        Path(mc["best_model_path"]).name == "step0000012.ckpt"
        and Path(mc["last_model_path"]).name == "last.ckpt"
    )
    _, model = load_gpt2(ckpts / "step0000012.safetensors")
    plan = ScheduledCheckpoint(ckpts, 4, 2, "bfloat16", 8).disk_plan(model, 12)
    assert plan.startswith("checkpoints: 5 x ") and " + 2 x " in plan and plan in proc.stderr


@pytest.mark.slow
def test_weights_file_round_trip(run12):
    ckpts = run12[0] / "checkpoints"
    meta, model = load_gpt2(ckpts / "step0000012.safetensors")
    assert meta["step"] == 12 and meta["tokens_seen"] == 12 * 8 * 32 and "rng" not in meta
    assert meta["tokenizer_path"] == "../tokenizer" and meta["config"]["run"]["keep_state_every"] == 8
    assert not model.training and {p.dtype for p in model.parameters()} == {torch.float32}
    full = gpt2_state(load_checkpoint(ckpts / "step0000012.ckpt")["state_dict"])
    for key, value in model.state_dict().items():
        assert torch.equal(value, full[key].to(torch.bfloat16).float()), key
    assert model.lm_head.weight is model.transformer.wte.weight  # still tied
    with safe_open(str(ckpts / "step0000012.safetensors"), framework="pt") as f:
        assert (
            "lm_head.weight" not in f.keys()  # noqa: SIM118 (not a dict)
            and f.get_tensor("transformer.wte.weight").dtype == torch.bfloat16
        )
        assert json.loads(f.metadata()["bytecanary"]) == meta


def _bytes_held(folder: Path) -> int:
    """Bytes of the files in ``folder`` (``last.ckpt`` is a link: nothing)."""
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file() and not p.is_symlink())


@pytest.mark.slow
def test_the_estimate_fits_the_real_files(run12):
    """Each figure is a little over the real file (headers included), never under."""
    ckpts = run12[0] / "checkpoints"
    _, model = load_gpt2(ckpts / "step0000012.safetensors")
    weights, state = checkpoint_bytes(model, "bfloat16")
    for estimate, name in ((weights, "step0000012.safetensors"), (state, "step0000012.ckpt")):
        real = (ckpts / name).stat().st_size
        assert real <= estimate <= 1.05 * real, (name, real, estimate)
    _, end, _ = ScheduledCheckpoint(ckpts, 4, 2, "bfloat16", 8).disk_use(model, 12)
    assert _bytes_held(ckpts) <= end <= 1.05 * _bytes_held(ckpts)


@pytest.mark.slow
def test_the_plan_peak_holds_the_real_peak(tmp_path, small_data, monkeypatch):
    """Steps 1, 2, 4, 8 keeping only the newest state: step 8's state is written while step 4's
    still exists, so the disk holds two states at once, more than the end. The plan's peak
    is at least the most a run really held."""
    from bytecanary.train.cli import main

    held: list[int] = []
    save = AtomicCheckpointIO.save_checkpoint

    def measured(self, checkpoint, path, storage_options=None) -> None:
        save(self, checkpoint, path, storage_options)
        held.append(_bytes_held(Path(path).parent))  # the new state in place, the old not yet deleted

    monkeypatch.setattr(AtomicCheckpointIO, "save_checkpoint", measured)
    config = micro_config(tmp_path / "micro.yaml", small_data, tmp_path / "runs")
    assert main(["--config", str(config), "--run.name", "p", "--trainer.max_steps", "8",
                 "--run.log_spaced_until", "2"]) == 0  # fmt: skip
    ckpts = tmp_path / "runs" / "p" / "checkpoints"
    assert len(held) == 4 and [p.name for p in training_states(ckpts)] == ["step0000008.ckpt"]
    _, model = load_gpt2(ckpts / "step0000008.safetensors")
    states, end, peak = ScheduledCheckpoint(ckpts, 4, 2).disk_use(model, 8)
    assert states == 1 and _bytes_held(ckpts) <= end < max(held)  # the end alone would not fit the peak
    assert max(held) <= peak <= 1.05 * max(held)


def test_bytes_per_checkpoint_of_the_355m(capsys):
    """The 355M preset's shape on the meta device: nothing allocated, the figures printed."""
    cfg = yaml.safe_load((ROOT / "configs" / "gpt2-355m.yaml").read_text())
    with torch.device("meta"):
        model = build_model(ArchConfig(**cfg["model"]["arch"]), vocab_size=8192)
    run = cfg["run"]
    ckpt = ScheduledCheckpoint(
        "x", run["checkpoint_every"], run["log_spaced_until"], "bfloat16", run["keep_state_every"]
    )
    weights, state = checkpoint_bytes(model, "bfloat16")
    n = count_parameters(model)
    # over the files measured on the 355M (docs/performance.md), by headers alone
    assert 623_530_928 <= weights < 2 * n + 100_000 and 3_741_341_445 <= state < 12 * n + 1_000_000
    steps = len(ckpt.scheduled_steps(cfg["trainer"]["max_steps"]))
    plan = ckpt.disk_plan(model, cfg["trainer"]["max_steps"])
    assert plan == (
        "checkpoints: 160 x 623.6 MB weights (bfloat16) + 15 x 3.7 GB training state = 155.9 GB projected, "
        "159.6 GB at peak while a training state is replaced"
    )
    states, end, peak = ckpt.disk_use(model, cfg["trainer"]["max_steps"])
    assert states == 15 and peak == end + state  # step 150,000's state beside step 149,000's
    with capsys.disabled():
        print(f"\n355M per checkpoint: before {human_bytes(2 * state)} (full state + last.ckpt copy), "
              f"after {human_bytes(weights)} weights + one rolling {human_bytes(state)} state")  # fmt: skip
        print(f"355M, {steps} checkpoints: before {human_bytes(steps * state + state)}; after: {plan}")


@pytest.mark.slow
def test_export_from_a_weights_file(run12, tmp_path):
    from transformers import AutoModelForCausalLM

    path = run12[0] / "checkpoints" / "step0000008.safetensors"
    out = export(path, tmp_path / "hf")
    hf = AutoModelForCausalLM.from_pretrained(str(out)).eval()
    _, model = load_gpt2(path)
    ids = torch.arange(20).view(1, -1)
    with torch.no_grad():
        torch.testing.assert_close(hf(ids).logits, model(ids).logits, rtol=0, atol=0)
    info = json.loads((out / "bytecanary.json").read_text())
    assert info["step"] == 8 and info["checkpoint"] == str(path) and (out / "tokenizer.json").is_file()
