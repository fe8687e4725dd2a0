"""Hostile command lines, each one line and exit 2 before any file changes: a config that is
not UTF-8, a value of the wrong type, an empty probe name, an abbreviated flag; and a report
of an unfinished run says so."""

import dataclasses
import os
import socket
import time
from pathlib import Path

import pytest

from bytecanary.checkpoints import FINISHED, HEARTBEAT, Heartbeat
from bytecanary.cli import main
from bytecanary.io import write_json

from ..report.runs import make_run
from .conftest import digests, last_error, one_error

NOT_UTF8 = {"latin-1": "run:\n  name: café\n".encode("latin-1"), "random bytes": bytes(range(256))[::-1]}


@pytest.mark.parametrize("kind", NOT_UTF8)
def test_a_config_that_is_not_utf8_is_the_same_one_line_for_every_command(kind, tmp_path, capsys):
    config = tmp_path / "x.yaml"
    config.write_bytes(NOT_UTF8[kind])
    before = digests(tmp_path)
    lines = []
    for args in (["train"], ["probe", str(tmp_path)], ["prepare"]):
        capsys.readouterr()
        assert main([*args, "--config", str(config)]) == 2
        lines.append(one_error(capsys.readouterr().err, str(config), "not UTF-8"))
    assert lines[0] == lines[1] == lines[2]
    assert digests(tmp_path) == before


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("2023", "2023 (an int)"),
        ("1.5", "1.5 (a float)"),
        ("true", "True (a bool)"),
        ("[a]", "['a'] (a list)"),
    ],
)
def test_a_value_of_another_type_names_its_type(value, said, tmp_path, micro, capsys):
    """``got '2023'`` looks like a string already: the type is named."""
    override = tmp_path / "name.yaml"
    override.write_text(f"run: {{name: {value}}}\n")
    capsys.readouterr()
    assert main(["train", "--config", str(micro), "--config", str(override)]) == 2
    assert last_error(capsys.readouterr().err) == f"error: run.name: expected str, got {said}"
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("value", ["[]", "[level0, null]", "[{trial: true}]"])
def test_an_empty_or_nameless_probe_list_is_refused(value, trained, tmp_path, capsys):
    """Not a silent run of the default probes."""
    out = tmp_path / "p.jsonl"
    assert main(["probe", str(trained / "checkpoints"), "--probes", value, "--out", str(out)]) == 2
    line = one_error(capsys.readouterr().err)
    assert line.startswith("error: ") and ("--probes" in line or "probes" in line)
    assert not out.exists()


@pytest.mark.parametrize(
    ("command", "flags", "meant"),
    [
        ("train", ["--trainer.max_step=3"], "--trainer.max_steps"),
        ("train", ["--run.nam", "x"], "--run.name"),
        ("probe", ["--prob", "level0"], "--probes"),
        ("probe", ["--wand=false"], "--wandb"),
    ],
)
def test_an_abbreviated_flag_is_refused_with_the_flag_meant(command, flags, meant, micro, tmp_path, capsys):
    """argparse's prefix matching would take ``--trainer.max_step=3`` for ``max_steps``."""
    where = ["--config", str(micro)] if command == "train" else [str(micro)]
    before = digests(tmp_path)
    capsys.readouterr()
    assert main([command, *where, *flags]) == 2
    line = one_error(capsys.readouterr().err)
    assert line == f"error: unrecognized arguments: {' '.join(flags)} (did you mean {meant}?)"
    assert digests(tmp_path) == before


@pytest.mark.parametrize("state", ["exited", "running", "no heartbeat"])
def test_a_report_of_an_unfinished_run_says_so_in_one_line(state, tmp_path, capsys):
    run = make_run(tmp_path)
    (run / FINISHED).unlink()
    now = time.time()
    beat = Heartbeat(
        os.getpid(), socket.gethostname(), "a1", 5.0, now, now, now if state == "exited" else None
    )
    if state != "no heartbeat":
        write_json(run / HEARTBEAT, dataclasses.asdict(beat))
    before = digests(run)
    assert main(["report", str(run), "--wandb=false"]) == 0
    why = {
        "exited": f"its training (pid {beat.pid} on {beat.host}) exited before its last step",
        "running": f"its training (pid {beat.pid} on {beat.host}) is still running",
        "no heartbeat": "its training has not reached its last step (no finished.json)",
    }[state]
    note = f"{run} is unfinished: {why}; this report covers it up to step 97"
    stdout = capsys.readouterr().out.splitlines()
    assert stdout[0] == f"note: {note}" and sum("is unfinished" in line for line in stdout) == 1
    assert f"**{note}.**" in (run / "report" / "report.md").read_text(encoding="utf-8")
    after = digests(run)
    assert {k: v for k, v in after.items() if not k.startswith("report/")} == before


def test_a_report_of_a_finished_run_has_no_such_note(tmp_path, capsys):
    run = make_run(tmp_path)
    assert main(["report", str(run), "--wandb=false"]) == 0
    assert "is unfinished" not in capsys.readouterr().out
    assert "is unfinished" not in (run / "report" / "report.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("command", ["train", "probe"])
def test_a_malformed_probes_entry_names_its_file_and_field(command, tmp_path, capsys):
    """A ``probes:`` entry without a name, in a config file, whether ``train`` reads it or
    ``probe --config`` reads it through train's parser."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("probes:\n- {trial: true}\n")
    tiny = str(Path(__file__).resolve().parents[2] / "configs" / "tiny.yaml")
    argv = {
        "train": ["train", "--config", tiny, "--config", str(bad), "--print_config"],
        "probe": ["probe", str(tmp_path / "model"), "--config", str(bad)],
    }[command]
    assert main(argv) == 2
    line = one_error(capsys.readouterr().err)
    want = "expected a probe name or a {name: ..., <parameters>} mapping, got {'trial': True}"
    assert line == f"error: {bad}: probes: {want}"
