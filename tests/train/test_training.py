"""Training end to end: loss falls, schedule, metrics, W&B offline, export, bad input."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from bytecanary.checkpoints import load_checkpoint, read_meta
from bytecanary.train.checkpointing import log_spaced_steps
from bytecanary.train.export import export
from bytecanary.train.loggers import read_metrics
from bytecanary.train.model import ArchConfig, build_model, count_parameters

from ..conftest import wandb_records
from .conftest import STEPS

ROOT = Path(__file__).resolve().parents[2]


def test_355m_preset_has_gpt2_medium_shape():
    cfg = yaml.safe_load((ROOT / "configs" / "gpt2-355m.yaml").read_text())
    arch = ArchConfig(**cfg["model"]["arch"])
    with torch.device("meta"):
        model = build_model(arch, vocab_size=8192)
    c = model.config
    assert (c.n_layer, c.n_head, c.n_embd, c.n_positions, c.vocab_size) == (
        24,
        16,
        1024,
        1024,
        8192,
    )
    d, layers = 1024, 24
    per_layer = 12 * d * d + 13 * d  # qkv, proj, mlp weights + biases + 2 LayerNorms
    want = layers * per_layer + 8192 * d + 1024 * d + 2 * d  # wte (tied), wpe, final LN
    assert count_parameters(model) == want
    assert 300e6 < want < 320e6
    assert cfg["trainer"]["precision"] == "bf16-mixed"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tiny.yaml", "gpt2-355m.yaml"])
def test_training_configs_parse(name, small_data, capsys):
    from bytecanary.cli import main

    with pytest.raises(SystemExit) as done:
        main(["train", "--config", str(ROOT / "configs" / name), "--data.data_dir", str(small_data),
              "--print_config"])  # fmt: skip
    assert done.value.code in (0, None)
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["data"]["data_dir"] == str(small_data)
    assert printed["model"]["arch"]["n_positions"] in (256, 1024)  # data.seq_len follows it
    assert set(printed) >= {"model", "data", "trainer", "run"}


@pytest.mark.slow
def test_micro_run_learns_and_writes_the_run_folder(micro, tmp_path):
    from bytecanary.train.cli import main

    args = ["--run.name", "a", "--trainer.max_steps", "24", "--run.log_spaced_until", "4"]
    assert main(["--config", str(micro), *args]) == 0
    run = tmp_path / "runs" / "a"
    saved = sorted(p.name for p in (run / "checkpoints").iterdir())
    weights = {f"step{s:07d}.safetensors" for s in {1, 2, 4, 8, 12, 16, 20, 24}}
    assert saved == sorted(weights | {"step0000024.ckpt", "last.ckpt"})  # one rolling full state
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["trainer"]["max_steps"] == 24 and config["run"]["name"] == "a"
    rows = read_metrics(run / "metrics.jsonl")
    train = [r for r in rows if "train/loss" in r]
    val = [r for r in rows if "val/ppl" in r]
    assert [r["step"] for r in train] == list(range(2, 25, 2))
    assert [r["step"] for r in val] == [4, 8, 12, 16, 20, 24]
    assert all(r["tokens_seen"] == r["step"] * 8 * 32 for r in rows)
    assert val[-1]["val/ppl"] < 0.5 * val[0]["val/ppl"]  # perplexity falls
    assert {f"val/{lang}/ppl" for lang in ("en", "ja", "ko", "zh")} <= set(val[-1])
    for row in val:  # overall ppl is the token-weighted mean of the languages' losses
        assert row["val/ppl"] == pytest.approx(np.exp(row["val/loss"]), rel=1e-5)
    meta = read_meta(run / "checkpoints" / "step0000012.safetensors")
    assert meta["step"] == 12 and meta["tokens_seen"] == 12 * 8 * 32
    assert meta["config"]["trainer"]["max_steps"] == 24
    assert Path(meta["tokenizer_path"]).name == "tokenizer"


def test_log_spaced_schedule():
    assert log_spaced_steps(512) == {1, 2, 4, 8, 16, 32, 64, 128, 256, 512}
    assert log_spaced_steps(None) == set()


@pytest.mark.slow
def test_wandb_offline_run_holds_the_curves(run12):
    run, proc = run12
    runs = list((run / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    synced = [line for line in (proc.stderr + proc.stdout).splitlines() if "wandb sync" in line]
    assert synced == [f"W&B offline run saved; upload it with: wandb sync {runs[0]}"]  # once, this run
    history = _wandb_history(runs[0])
    assert any("val/ppl" in h and "tokens_seen" in h for h in history)
    assert max(h.get("tokens_seen", 0) for h in history) == STEPS * 8 * 32
    axis = _wandb_defined_metrics(runs[0])
    assert axis.get("val/*") == "tokens_seen" and axis.get("train/*") == "tokens_seen"


def _wandb_history(run_dir: Path) -> list[dict]:
    return [h["item"] for h in wandb_records(run_dir, "history")]


def _wandb_defined_metrics(run_dir: Path) -> dict[str, str]:
    metrics = wandb_records(run_dir, "metric")
    return {m["glob_name"]: m.get("step_metric") for m in metrics if "glob_name" in m}


@pytest.mark.slow
def test_export_round_trip(run12, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ckpt = run12[0] / "checkpoints" / "last.ckpt"
    out = export(ckpt, tmp_path / "hf")
    assert (out / "model.safetensors").exists()
    model = AutoModelForCausalLM.from_pretrained(str(out)).eval()
    tok = AutoTokenizer.from_pretrained(str(out))
    ids = torch.tensor([tok.encode("日本語の文章", add_special_tokens=False)])
    state = {k.removeprefix("model."): v for k, v in load_checkpoint(ckpt)["state_dict"].items()}
    ref = type(model)(model.config).eval()
    ref.load_state_dict(state)
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, ref(ids).logits, rtol=0, atol=0)
    assert json.loads((out / "bytecanary.json").read_text())["step"] == STEPS
