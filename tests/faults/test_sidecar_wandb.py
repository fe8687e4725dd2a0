"""A sidecar's probes beside perplexity in W&B (issue 38): ``bytecanary probe --watch RUN``
logs to a run of its own in the training run's project and group, named ``<run>-probes``,
in ``RUN/wandb``; ``bytecanary report RUN`` then logs the records the training run's history
lacks into the training run, once each, and a second report adds none. Read back from the
offline files as W&B wrote them."""

import dataclasses
import json
import subprocess
from pathlib import Path

import pytest
import wandb

from bytecanary import tracking
from bytecanary.cli import main
from bytecanary.errors import BytecanaryError
from bytecanary.probes.runner import training_run
from bytecanary.records import Record, append
from bytecanary.records import read as read_records
from bytecanary.report.writer import wandb_run_id

from .. import warm
from ..conftest import wandb_records
from .conftest import ROOT, command, micro_config
from .test_sidecar import ENV, GUARD

PARTIAL = "probe/level0/all/all/partial"


def _history(run: Path, run_id: str) -> list[dict]:
    """Every history row of the W&B run ``run_id``: all its offline folders in ``run/wandb``."""
    folders = sorted((run / "wandb").glob(f"offline-run-*-{run_id}"))
    return [h["item"] for folder in folders for h in wandb_records(folder, "history")]


def _probe_rows(history: list[dict]) -> list[int]:
    return sorted(h["tokens_seen"] for h in history if PARTIAL in h)


@pytest.mark.slow
def test_a_sidecars_probes_join_the_training_group_and_a_report_logs_them_into_it_once(
    tmp_path, small_data, monkeypatch, capsys
):
    probes = [{"name": "level0", "trial": True, "per_language": 2}]
    config = micro_config(
        tmp_path / "micro.yaml", small_data, tmp_path / "runs", probes, probe_in_loop=False, wandb=True
    )
    run = tmp_path / "runs" / "side"
    out = run / "probes.jsonl"  # where the report reads
    watch = ["probe", "--watch", run, "--config", config, "--series.interval", "0.2", "--out", out]
    sidecar = warm.Popen(command(*watch), cwd=ROOT, env=ENV, stdout=subprocess.PIPE, text=True)
    assert sidecar.stdout.readline().startswith(f"watching {run} ")  # before training starts
    monkeypatch.setenv("WANDB_MODE", "offline")
    train = ["train", "--config", str(config), "--run.name", "side", "--trainer.max_steps", "8"]
    assert main(train) == 0  # the sidecar's process watches this one train
    stdout, _ = sidecar.communicate(timeout=GUARD)
    assert sidecar.returncode == 0, stdout[-2000:]
    assert f"with the run's others (training, reports): wandb sync {run / 'wandb'}" in stdout
    records = read_records(out)
    assert [(r.step, r.status) for r in records] == [(4, "ok"), (8, "ok")] and all(r.worker for r in records)

    # the sidecar's run: the training run's project and group, named after it, in RUN/wandb
    training_id = (run / "wandb_id").read_text().strip()
    (side,) = (run / "wandb").glob(f"offline-run-*{tracking.SIDECAR}")
    (meta,) = wandb_records(side, "run")
    assert (meta["run_group"], meta["display_name"], meta["job_type"]) == ("side", "side-probes", "probe")
    assert meta["project"] == "bytecanary" and meta["config"]["update"]["training_run_id"] == training_id
    assert _probe_rows([h["item"] for h in wandb_records(side, "history")]) == [
        r.tokens_seen for r in records
    ]
    assert wandb_run_id(run) == training_id  # the sidecar's folder is the newest: not the one resumed
    assert _probe_rows(_history(run, training_id)) == []  # training fired no probe

    for report in (1, 2):
        assert main(["report", str(run)]) == 0
        wandb.teardown()  # flushed, as at the end of the command's process
        assert f"wandb sync {run / 'wandb'}" in capsys.readouterr().out
        history = _history(run, training_id)
        # perplexity and every probe row on tokens_seen, each once, whatever the reports
        assert any("val/ppl" in h for h in history)
        assert _probe_rows(history) == [r.tokens_seen for r in records], report
        for record in records:
            (row,) = [h for h in history if PARTIAL in h and h["tokens_seen"] == record.tokens_seen]
            headline = {k for k in record.metrics if tracking.is_headline(k)}
            assert headline <= row.keys() and row["step"] == record.step
            assert row[PARTIAL] == pytest.approx(record.metrics[PARTIAL])
    assert len(list((run / "wandb").glob(f"offline-run-*-{training_id}"))) == 3  # training, two reports
    ledger = json.loads((run / "wandb" / tracking.MERGED).read_text())
    assert ledger["run_id"] == training_id and len(ledger["logged"]) == len(records)


def _record(tokens: int, worker: str | None, where: str = "/r", **metrics: float) -> Record:
    return Record(
        checkpoint=f"{where}/step{tokens}.safetensors", step=tokens // 10, tokens_seen=tokens, probe="level0",
        version=1, fingerprint="p", status="ok", error=None, seconds=1.0, threads=1,
        metrics={PARTIAL: 0.5, **metrics}, worker=worker,
    )  # fmt: skip


def test_a_report_merges_only_what_the_training_history_lacks_and_each_once(tmp_path):
    run = tmp_path / "run"
    (run / "wandb").mkdir(parents=True)
    for record in (
        _record(10, None),  # the callback's: logged live
        _record(10, "w0", "/copy"),  # the same point probed again (a copy): in the history
        _record(20, "w0"),
        _record(30, "w1"),
        dataclasses.replace(_record(40, "w1"), status="failed"),
    ):
        append(run / "probes.jsonl", record)
    rows, ids = tracking.records_to_merge(run, "abc")
    assert [r.tokens_seen for r in rows] == [20, 30] and len(ids) == 3
    tracking.mark_merged(run, "abc", ids)
    assert tracking.records_to_merge(run, "abc") == ([], [])  # a second report: nothing
    assert [r.tokens_seen for r in tracking.records_to_merge(run, "other")[0]] == [20, 30]  # another run
    append(run / "probes.jsonl", _record(50, "w0"))
    rows, ids = tracking.records_to_merge(run, "abc")
    assert [r.tokens_seen for r in rows] == [50] and len(ids) == 1
    (run / "wandb" / tracking.MERGED).write_text("[1]")
    with pytest.raises(BytecanaryError, match=r"merged_records\.json"):
        tracking.records_to_merge(run, "abc")


def test_the_training_run_is_the_one_every_path_and_watch_name(tmp_path):
    run = tmp_path / "runs" / "a"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text("run: {name: a, experiment: sweep, wandb_project: proj}\n")
    (other := tmp_path / "runs" / "b").mkdir()
    (other / "config.yaml").write_text("run: {name: b}\n")
    later = tmp_path / "runs" / "c"  # a sidecar started before its training: no folder yet
    assert training_run([str(run)], None, None) == run
    assert training_run([str(run / "checkpoints")], str(run), None) == run
    assert training_run([], str(later / "checkpoints"), None) == later
    for paths, watch in (([str(run), str(other)], None), ([str(run)], str(other)), ([str(tmp_path)], None)):
        assert training_run(paths, watch, None) is None
    assert training_run([str(run / "checkpoints" / "step0000004.safetensors")], None, None) is None
    assert training_run([str(run)], None, ["step1"]) is None
    home = tracking.RunWandb.of(run)
    assert (home.project, home.group, home.name, home.run_id) == ("proj", "sweep", "a", None)
    sidecar = home.sidecar()
    assert (sidecar["group"], sidecar["name"], sidecar["dir"]) == ("sweep", "a-probes", str(run))
    assert sidecar["id"].endswith(tracking.SIDECAR) and sidecar["id"] != home.sidecar()["id"]


def test_a_report_resumes_the_training_run_never_a_sidecars(tmp_path):
    run = tmp_path / "run"
    for name in ("offline-run-20260101_000000-aaaa", "offline-run-20260102_000000-bbbb-probes"):
        (run / "wandb" / name).mkdir(parents=True)
    assert wandb_run_id(run) == "aaaa"  # no wandb_id (a run from before it): never the sidecar's
    (run / "wandb_id").write_text("cccc\n")
    assert wandb_run_id(run) == "cccc"
