"""probes.jsonl survives: a kill inside the probe callback, a torn last line, two writers,
an empty eval set; the report reads past a corrupt line."""

import json
import os
import subprocess
from collections import Counter

import pytest

from bytecanary import keys
from bytecanary.cli import main
from bytecanary.io import read_jsonl
from bytecanary.records import read as read_records

from .. import warm
from ..report.runs import assert_one_sync_of_every_offline_run, make_run
from .conftest import QUIET, ROOT, bytecanary, command, micro_config, one_error

PROBES = [
    {"name": "level0", "trial": True, "per_language": 2},
    {"name": "level1", "trial": True, "per_language": 2},
]


def _counts(out) -> Counter:
    return Counter((r.checkpoint, r.probe) for r in read_records(out))


@pytest.mark.slow
@pytest.mark.usefixtures("sigkill_probe")
def test_sigkill_inside_the_probe_callback_then_resume_gives_every_record_once(tmp_path, small_data, capsys):
    marker = tmp_path / "killed"
    probes = [PROBES[0], {"name": "sigkill", "marker": str(marker)}, PROBES[1]]
    config = micro_config(tmp_path / "micro.yaml", small_data, tmp_path / "runs", probes)
    run = tmp_path / "runs" / "k"
    args = ["train", "--config", str(config), "--run.name", "k", "--trainer.max_steps", "12"]
    prelude = "import tests.faults.killer"
    killed = bytecanary(*args, prelude=prelude)
    assert killed.returncode == -9 and marker.exists()  # killed between level0 and level1 at step 8
    assert sorted(_counts(run / "probes.jsonl").values()) == [1, 1, 1, 1]
    capsys.readouterr()
    assert main([*args, "--run.resume", "true"]) == 0 and "Traceback" not in capsys.readouterr().err
    rows = read_records(run / "probes.jsonl")
    assert all(r.status == "ok" for r in rows)
    assert sorted({r.step for r in rows}) == [4, 8, 12]
    counts = _counts(run / "probes.jsonl")
    assert len(counts) == 9 and set(counts.values()) == {1}  # 3 checkpoints x 3 probes, each once
    # step 8 validates too: its probes fire once its validation is logged, so the kill lost none
    val = [r[keys.STEP] for r in read_jsonl(run / "metrics.jsonl") if keys.val_ppl() in r]
    assert val == [4, 8, 12]


def _probe(*args: str) -> int:
    return main(["probe", *args, "--trial=true", "--wandb=false"])


@pytest.fixture
def probes_yaml(tmp_path):
    path = tmp_path / "probes.yaml"
    path.write_text(json.dumps({"probes": PROBES}))
    return path


def test_a_torn_last_line_is_cut_before_a_rerun_appends(trained, tmp_path, probes_yaml, capsys):
    out = tmp_path / "p.jsonl"
    assert _probe(str(trained / "checkpoints"), "--config", str(probes_yaml), "--out", str(out)) == 0
    data = out.read_bytes()
    out.write_bytes(data[:-40])  # the crash tore the last record
    capsys.readouterr()
    assert _probe(str(trained / "checkpoints"), "--config", str(probes_yaml), "--out", str(out)) == 0
    assert capsys.readouterr().err == ""
    lines = out.read_bytes().splitlines()
    assert all(json.loads(line) for line in lines)  # no fragment glued to a record
    assert len(lines) == 4 and set(_counts(out).values()) == {1}
    assert lines[:3] == data.splitlines()[:3]  # the whole records before it are kept


@pytest.mark.slow
def test_two_probe_processes_on_one_out_write_no_duplicates(trained, tmp_path, probes_yaml):
    out = tmp_path / "p.jsonl"
    args = [
        "probe",
        str(trained / "checkpoints"),
        "--config",
        str(probes_yaml),
        "--trial=true",
        "--wandb=false",
    ]
    procs = [
        warm.Popen(
            command(*args, "--out", str(out)),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **QUIET},
        )
        for _ in range(2)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=3000)  # a deadlock fails, not hangs CI
        assert proc.returncode == 0 and "Traceback" not in err, err[-3000:]
    counts = _counts(out)
    assert len(counts) == 4 and set(counts.values()) == {1}  # 2 checkpoints x 2 probes, once each


def test_an_empty_eval_set_is_an_error_before_any_record(trained, tmp_path, small_data, capsys):
    """No sample left (a Japanese set, Korean asked for): an error, never an ``ok`` record
    without metrics that a later run with the right set would take as done."""
    config = tmp_path / "probes.yaml"
    ja = str(small_data / "evalsets" / "level0_ja.json")
    config.write_text(json.dumps({"probes": [{"name": "level0", "eval_sets": [ja], "languages": ["ko"]}]}))
    out = tmp_path / "p.jsonl"
    ckpt = str(trained / "checkpoints" / "step0000004.safetensors")
    assert _probe(ckpt, "--config", str(config), "--out", str(out)) == 2
    one_error(capsys.readouterr().err, "level0", "no samples")
    assert read_records(out) == []
    config.write_text(json.dumps({"probes": [PROBES[0]]}))
    assert _probe(ckpt, "--config", str(config), "--out", str(out)) == 0  # the real set: done now
    (row,) = read_records(out)
    assert row.status == "ok" and row.metrics


def test_report_reads_past_a_corrupt_line_and_a_malformed_record(tmp_path, capsys):
    run = make_run(tmp_path)
    lines = (run / "probes.jsonl").read_text().splitlines()
    bad = {**json.loads(lines[5]), "metrics": "oops"}
    lines[3] = lines[3][:50]  # torn in the middle of the file
    lines[5] = json.dumps(bad)
    (run / "probes.jsonl").write_text("\n".join(lines) + "\n")
    before = (run / "probes.jsonl").read_bytes()
    assert main(["report", str(run), "--wandb=false"]) == 0
    warnings = capsys.readouterr().err.strip().splitlines()
    assert len(warnings) == 2 and all(w.startswith("warning: ") for w in warnings)
    assert "probes.jsonl:4: not valid JSON" in warnings[0]
    assert "probes.jsonl:6: 'metrics' is not a mapping of numbers" in warnings[1]
    assert (run / "report" / "report.md").is_file() and (run / "probes.jsonl").read_bytes() == before


@pytest.mark.slow
def test_relogging_a_report_prints_one_sync_of_every_offline_folder(tmp_path, monkeypatch, capsys):
    """The report adds a second offline folder for the run's id: the one printed command uploads
    both (W&B skips folders it already synced), so nothing the run wrote is left behind."""
    import wandb

    monkeypatch.setenv("WANDB_MODE", "offline")
    run = make_run(tmp_path)
    wandb.init(project="bytecanary", id="feedbeef", dir=str(run), mode="offline", settings={"silent": True})
    wandb.finish()
    wandb.teardown()
    assert main(["report", str(run)]) == 0
    assert_one_sync_of_every_offline_run(capsys.readouterr().out, run, 2)
    assert all(f.name.endswith("-feedbeef") for f in (run / "wandb").glob("offline-run-*"))


def test_records_of_schema_2_read_their_params_as_the_fingerprint(tmp_path):
    from types import SimpleNamespace

    from bytecanary.records import Context, Record, append, read

    metrics = {"probe/level0/all/all/partial": 1.0}
    old = {
        "checkpoint": "c",
        "step": 1,
        "tokens_seen": 2,
        "probe": "level0",
        "version": 1,
        "params": "abc123",
    }
    old |= {"status": "ok", "error": None, "seconds": 0.1, "threads": 1, "metrics": metrics, "schema": 2}
    path = tmp_path / "probes.jsonl"
    path.write_text(json.dumps(old) + "\n")
    [record] = read(path)
    assert (record.fingerprint, record.schema) == ("abc123", 2)
    probe = SimpleNamespace(name="level0", version=1)
    again = Record.of(Context("c", 1, 2), probe, "abc123", metrics, seconds=0.1, threads=1)
    assert not append(path, again)  # done: the old record's params is this fingerprint
    other = Record.of(Context("c", 1, 2), probe, "def456", metrics, seconds=0.1, threads=1)
    assert append(path, other)
    line = json.loads(path.read_text().splitlines()[-1])
    assert line["fingerprint"] == "def456" and "params" not in line and line["schema"] == 3
