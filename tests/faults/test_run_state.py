"""Run state you can trust across a resume: a refused resume changes no file of the run, a
resume that changes a training setting says so, a kill between a record and its metrics row
loses no cell, and a sidecar started beside the resume of a finished run watches it on."""

import os
import shutil
import subprocess
from collections import Counter

import pytest

from bytecanary.checkpoints import finished_step
from bytecanary.cli import main
from bytecanary.io import read_jsonl
from bytecanary.records import read as read_records

from .. import warm
from ..conftest import wandb_records
from .conftest import QUIET, ROOT, bytecanary, command, digests, last_error, micro_config

PROBES = [
    {"name": "level0", "trial": True, "per_language": 2},
    {"name": "level1", "trial": True, "per_language": 2},
]
GUARD = 300  # seconds: a guard against a hang, far above CI's pace; no test asserts a speed
ENV = {**os.environ, **QUIET, "OMP_NUM_THREADS": "1"}


def test_a_resume_refused_for_another_tokenizer_leaves_the_run_as_it_was(
    run_copy, small_data, tmp_path, capsys
):
    """The data now has another tokenizer (same vocabulary): refused before ``config.yaml``,
    ``finished.json`` or any other file of the run changes."""
    run, _ = run_copy
    data = shutil.copytree(small_data, tmp_path / "other_data")
    tokenizer = data / "tokenizer" / "tokenizer.json"
    tokenizer.write_bytes(tokenizer.read_bytes() + b"\n")
    config = micro_config(tmp_path / "other.yaml", data, tmp_path / "runs")
    before = digests(run)
    capsys.readouterr()
    args = ["train", "--config", str(config), "--run.name", "copy", "--run.resume", "true"]
    assert main([*args, "--trainer.max_steps", "12"]) == 2
    line = last_error(capsys.readouterr().err)
    why = "this run was trained with another tokenizer"
    assert line == f"error: {run / 'tokenizer'}: differs from {data / 'tokenizer'}: {why}"
    assert digests(run) == before


def test_a_resume_that_changes_training_settings_says_so_once_per_field(run_copy, capsys):
    """lr, batch size, seed and dropout may change mid-run, but not unseen: one ``warning:``
    line each, with the checkpoint's value and the value now (and which one training uses)."""
    run, config = run_copy
    ckpt = run / "checkpoints" / "step0000008.ckpt"
    changes = ["--model.optim.lr", "0.001", "--data.batch_size", "4", "--seed_everything", "7"]
    changes += ["--model.arch.dropout", "0.1"]
    capsys.readouterr()
    args = ["train", "--config", str(config), "--run.name", "copy", "--run.resume", "true"]
    assert main([*args, "--trainer.max_steps", "8", *changes]) == 0  # nothing left to train
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: ")]
    said = "warning: run.resume:"
    assert warnings == [
        f"{said} model.optim.lr is 0.001 here but 0.003 in {ckpt}; the restored state keeps 0.003",
        f"{said} model.arch.dropout is 0.1 here but 0.0 in {ckpt}; training goes on with 0.1",
        f"{said} data.batch_size is 4 here but 8 in {ckpt}; training goes on with 4",
        f"{said} seed_everything is 7 here but 0 in {ckpt}; the restored state keeps 0",
    ]
    capsys.readouterr()
    assert main([*args, "--trainer.max_steps", "8"]) == 0  # the run's own settings: no warning
    assert "warning: " not in capsys.readouterr().err


def _cells_once(run) -> None:
    """Every record of the run is in ``probes.jsonl`` once, and its cells in exactly one row of
    ``metrics.jsonl`` at its step."""
    made = read_records(run / "probes.jsonl")
    assert set(Counter((r.step, r.probe) for r in made).values()) == {1}
    rows = read_jsonl(run / "metrics.jsonl")
    for record in made:
        holding = [
            row
            for row in rows
            if row["step"] == record.step and all(row.get(k) == v for k, v in record.metrics.items())
        ]
        assert len(holding) == 1, (record.step, record.probe, len(holding))


@pytest.mark.slow
@pytest.mark.parametrize("at", [3, 5])  # step 8's first record; the last step's, nothing left to train
def test_a_kill_between_a_record_and_its_metrics_row_loses_no_cell(
    at, tmp_path, small_data, monkeypatch, capsys
):
    """SIGKILL right after the record reached ``probes.jsonl``, before its row reached
    ``metrics.jsonl`` and W&B: the resume logs the record's cells once, as it would have."""
    marker = tmp_path / "killed"
    config = micro_config(tmp_path / "micro.yaml", small_data, tmp_path / "runs", PROBES, wandb=True)
    run = tmp_path / "runs" / "k"
    args = ["train", "--config", config, "--run.name", "k", "--trainer.max_steps", "12"]
    env = {"BYTECANARY_KILL_AT": str(at), "BYTECANARY_KILL_MARKER": str(marker)}
    prelude = "import tests.faults.killer_records"
    killed = bytecanary(*args, prelude=prelude, env=env)
    assert killed.returncode == -9 and marker.exists(), killed.stderr[-3000:]
    lost = read_records(run / "probes.jsonl")[-1]
    assert lost.probe == "level0" and len(read_records(run / "probes.jsonl")) == at
    monkeypatch.setenv("WANDB_MODE", "offline")
    resume = [*map(str, args), "--run.resume", "true"]
    capsys.readouterr()
    assert main(resume) == 0 and "Traceback" not in capsys.readouterr().err
    assert sorted((r.step, r.probe) for r in read_records(run / "probes.jsonl")) == [
        (step, probe) for step in (4, 8, 12) for probe in ("level0", "level1")
    ]
    _cells_once(run)
    assert main(resume) == 0  # nothing left: nothing logged twice
    _cells_once(run)
    run_id = (run / "wandb_id").read_text().strip()
    history = [
        h["item"]
        for f in (run / "wandb").glob(f"offline-run-*-{run_id}")
        for h in wandb_records(f, "history")
    ]
    partial = "probe/level0/all/all/partial"
    assert [h[partial] for h in history if h.get("tokens_seen") == lost.tokens_seen and partial in h] == [
        lost.metrics[partial]
    ]


def test_a_sidecar_started_beside_the_resume_of_a_finished_run_watches_it_on(run_copy, tmp_path):
    """The sidecar's first look finds the finished run's marker before the resume, still
    starting, made it stale: it waits for the resume instead of ending with the old marker, and
    probes the steps the resume trains."""
    run, config = run_copy  # finished at step 8
    assert finished_step(run) == 8
    out = tmp_path / "side.jsonl"
    watch = ["probe", "--watch", run, "--probes", "[level0]", "--trial=true", "--series.interval", "0.2"]
    sidecar = warm.Popen(
        command(*watch, "--wandb=false", "--series.idle_limit", "3600", "--out", out),
        cwd=ROOT, env=ENV, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    seen = []
    for line in sidecar.stdout:  # until it has looked at the marker, or ended
        seen.append(line)
        if line.startswith("waiting: the run finished at step 8 before this watch began"):
            break
    else:
        pytest.fail(f"the sidecar ended on the old marker: {''.join(seen)}")
    resume = ["train", "--config", config, "--run.name", "copy", "--trainer.max_steps", "12"]
    assert main([*map(str, resume), "--run.resume", "true"]) == 0
    stdout, _ = sidecar.communicate(timeout=GUARD)
    assert sidecar.returncode == 0, stdout[-3000:]
    assert "the run finished at step 12: every checkpoint is probed" in stdout
    assert [(r.step, r.status) for r in read_records(out)] == [(4, "ok"), (8, "ok"), (12, "ok")]
