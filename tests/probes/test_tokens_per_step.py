"""A series trained elsewhere (hub revisions, HF Trainer's ``checkpoint-N``) knows its steps,
not its tokens_seen: ``--tokens_per_step`` places it, a tokens_seen a checkpoint knows is kept,
and without the flag its W&B run charts against ``step`` rather than show nothing.
``--wandb_group`` groups a launch's W&B run; an offline run prints one ``wandb sync`` line.
Read back from the offline W&B files as W&B wrote them."""

import json
from pathlib import Path

import pytest

from bytecanary import keys
from bytecanary.cli import main
from bytecanary.probes.targets import Target
from bytecanary.records import read as read_records

from ..conftest import wandb_records

PYTHIA = 2_097_152  # 1024 x 2048
PARTIAL = "probe/level0/all/all/partial"


@pytest.fixture
def series(tmp_path, random_model, byte_fallback_tokenizer) -> Path:
    """HF Trainer's output layout, without bytecanary.json: steps 2 and 4, nothing else known."""
    folder = tmp_path / "trainer-out"
    for step in (2, 4):
        random_model.save_pretrained(folder / f"checkpoint-{step}")
        byte_fallback_tokenizer.save_pretrained(folder / f"checkpoint-{step}")
    return folder


@pytest.fixture
def known(tmp_path, random_model, byte_fallback_tokenizer) -> Path:
    """An export that knows its step and tokens_seen (bytecanary.json)."""
    folder = tmp_path / "export"
    random_model.save_pretrained(folder)
    byte_fallback_tokenizer.save_pretrained(folder)
    (folder / "bytecanary.json").write_text(json.dumps({"step": 5, "tokens_seen": 1234}))
    return folder


def _probe(eval_dir, out: Path, *args: str) -> int:
    level0 = str(eval_dir / "evalsets" / "level0_ja.json")
    flags = ["--probes", "[level0]", "--trial=true", "--eval_sets.level0", level0, "--threads", "1"]
    return main(["probe", *args, *flags, "--out", str(out)])


def _offline_run(out: Path) -> Path:
    (run,) = (out.parent / "wandb").glob("offline-run-*")
    return run


def _sync_lines(printed: str) -> list[str]:
    return [line for line in printed.splitlines() if "wandb sync" in line]


def test_context_places_an_unknown_tokens_seen_and_keeps_a_known_one():
    target = Target("m@step3", "m", "hf", "step3", tokens_per_step=PYTHIA)
    assert target.context(3, None).tokens_seen == 3 * PYTHIA
    assert target.context(3, 777).tokens_seen == 777
    assert target.context(None, None).tokens_seen is None
    assert Target("m@step3", "m", "hf", "step3").context(3, None).tokens_seen is None


def test_tokens_per_step_places_the_series_in_records_and_wandb(
    series, known, eval_dir, tmp_path, monkeypatch, capfd
):
    monkeypatch.setenv("WANDB_MODE", "offline")
    out = tmp_path / "probes" / "probes.jsonl"
    args = ["--tokens_per_step", str(PYTHIA), "--wandb_group", "pythia-vs-ours"]
    assert _probe(eval_dir, out, str(series), str(known), *args) == 0
    rows = read_records(out)
    assert [(r.step, r.tokens_seen, r.status) for r in rows] == [
        (2, 2 * PYTHIA, "ok"),
        (4, 4 * PYTHIA, "ok"),
        (5, 1234, "ok"),  # known: kept
    ]
    printed = capfd.readouterr().out
    run = _offline_run(out)
    assert _sync_lines(printed) == [f"W&B offline run saved; upload it: wandb sync {run}"]

    (meta,) = wandb_records(run, "run")
    assert meta["run_group"] == "pythia-vs-ours" and meta["job_type"] == "probe"
    bound = {m.get("name") or m.get("glob_name"): m.get("step_metric") for m in wandb_records(run, "metric")}
    assert bound[PARTIAL] == keys.TOKENS_SEEN and bound["probe/*"] == keys.TOKENS_SEEN
    history = [h["item"] for h in wandb_records(run, "history")]
    logged = [(h[keys.STEP], h[keys.TOKENS_SEEN], h[PARTIAL]) for h in history if PARTIAL in h]
    assert logged == [(r.step, r.tokens_seen, pytest.approx(r.metrics[PARTIAL])) for r in rows]

    # the flag is no part of what a pair is: a rerun without it probes nothing again
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert _probe(eval_dir, out, str(series)) == 0
    assert "nothing to do" in capfd.readouterr().out and len(read_records(out)) == 3


def test_without_tokens_per_step_wandb_charts_the_series_against_step(
    series, eval_dir, tmp_path, monkeypatch, capfd
):
    monkeypatch.setenv("WANDB_MODE", "offline")
    out = tmp_path / "probes.jsonl"
    assert _probe(eval_dir, out, str(series)) == 0
    rows = read_records(out)
    assert [(r.step, r.tokens_seen) for r in rows] == [(2, None), (4, None)]
    run = _offline_run(out)
    assert len(_sync_lines(capfd.readouterr().out)) == 1

    (meta,) = wandb_records(run, "run")
    assert not meta.get("run_group")  # a standalone launch has no group unless given one
    metrics = wandb_records(run, "metric")
    bound = {m.get("name") or m.get("glob_name"): m.get("step_metric") for m in metrics}
    assert bound[PARTIAL] == keys.STEP and bound["probe/*"] == keys.STEP
    assert keys.TOKENS_SEEN not in {m.get("step_metric") for m in metrics}
    history = [h["item"] for h in wandb_records(run, "history")]
    logged = [(h[keys.STEP], h[PARTIAL]) for h in history if PARTIAL in h]
    assert logged == [(r.step, pytest.approx(r.metrics[PARTIAL])) for r in rows]
    assert not any(keys.TOKENS_SEEN in h for h in history)


@pytest.mark.parametrize("value", ["0", "-2048"])
def test_tokens_per_step_must_be_positive(series, eval_dir, tmp_path, capsys, value):
    out = tmp_path / "p.jsonl"
    assert _probe(eval_dir, out, str(series), "--tokens_per_step", value, "--wandb=false") == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == f"error: probe: --tokens_per_step must be more than 0, got {value}"
    assert not out.exists()
