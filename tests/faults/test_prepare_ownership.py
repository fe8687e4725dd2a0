"""``bytecanary prepare`` replaces only what it made, one run per out folder: a stage-named
folder without its ``stage.json``, a file a user added to a stage, an empty ``--out``, a data
config name that is not one folder, a second prepare of a folder being prepared and a source
row that is not UTF-8 are each one line naming the path and field, exit 2, every byte kept."""

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from bytecanary.cli import main

from .. import warm
from ..conftest import SMALL, write_config
from .conftest import QUIET, ROOT, command, digests, one_error

START_PATIENCE = 300.0  # seconds a prepare in a subprocess may take to start its first stage


def _paths(folder: Path) -> list[str]:
    """Every file and folder below ``folder``: what a refused prepare must not add or remove."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _prepare(config: Path, *args: str) -> int:
    return main(["prepare", "--config", str(config), *args])


def test_a_stage_named_folder_prepare_did_not_make_is_refused_and_kept(tmp_path, capsys):
    out = tmp_path / "data"
    (out / "tokenizer").mkdir(parents=True)
    (out / "tokenizer" / "NOTES.txt").write_text("which tokenizer we meant to try next\n")
    before, paths = digests(out), _paths(out)
    assert _prepare(write_config(tmp_path / "small.yaml"), "--out", str(out)) == 2
    one_error(capsys.readouterr().err, str(out / "tokenizer"), "stage.json")
    assert digests(out) == before and _paths(out) == paths


def test_a_file_added_to_a_prepared_stage_is_never_deleted_with_it(small_data, tmp_path, capsys):
    """Another tokenizer size rebuilds the tokenizer stage: its folder holds a user's file."""
    data = shutil.copytree(small_data, tmp_path / "data")
    (data / "tokenizer" / "NOTES.txt").write_text("vocab 1200 was too small for ko\n")
    config = write_config(tmp_path / "small.yaml", tokenizer={**SMALL["tokenizer"], "vocab_size": 1100})
    before, paths = digests(data), _paths(data)
    assert _prepare(config, "--out", str(data)) == 2
    one_error(capsys.readouterr().err, str(data / "tokenizer" / "NOTES.txt"), "not written by")
    assert digests(data) == before and _paths(data) == paths


@pytest.mark.parametrize(
    ("name", "args", "field"),
    [("small", ["--out", ""], "--out"), ("..", [], "name"), ("../../x", [], "name"), ("", [], "name")],
)
def test_out_and_the_data_name_must_name_one_folder(name, args, field, tmp_path, monkeypatch, capsys):
    """The default out folder is ``data/<name>``: ``..`` would prepare into the working directory."""
    config = write_config(tmp_path / "c.yaml", name=name)
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    paths = _paths(tmp_path)
    assert _prepare(config, *args) == 2
    one_error(capsys.readouterr().err, field, "one folder" if field == "name" else "empty")
    assert _paths(tmp_path) == paths


def test_a_second_prepare_of_a_folder_being_prepared_names_the_first(tmp_path, capsys):
    """The first is frozen mid-stage, so the folder holds still while the second tries."""
    config = write_config(tmp_path / "small.yaml")
    out = tmp_path / "data"
    args = ("prepare", "--config", str(config), "--out", str(out), "--workers", "1")
    first = warm.Popen(
        command(*args),
        cwd=ROOT,
        env={**os.environ, **QUIET},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + START_PATIENCE
        while not list(out.glob(".*.tasks")):  # a stage is under way
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        os.killpg(first.pid, signal.SIGSTOP)
        before, paths = digests(out), _paths(out)
        assert main(list(args)) == 2
        one_error(capsys.readouterr().err, str(out), f"pid {first.pid} on {socket.gethostname()}")
        assert digests(out) == before and _paths(out) == paths
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()


@pytest.mark.parametrize("kind", ["files", "dataset"])
def test_a_row_that_is_not_utf8_is_named_by_its_line(kind, tmp_path, capsys):
    folder = tmp_path / "ja"
    folder.mkdir()
    bad = folder / "rows.jsonl"
    bad.write_bytes('{"text": "日本語の文です。"}\n'.encode() + '{"text": "café"}\n'.encode("latin-1"))
    read = {
        "files": {"path": str(folder), "pattern": "*.jsonl"},
        "dataset": {"path": "json", "data_files": [str(bad)]},
    }
    config = write_config(
        tmp_path / "ja.yaml", mixture={"ja": 1.0}, sources=[{"language": "ja", kind: read[kind]}]
    )
    before = digests(folder)
    assert _prepare(config, "--out", str(tmp_path / "data"), "--workers", "1") == 2
    one_error(capsys.readouterr().err, str(bad), "not UTF-8", "line 2")
    assert digests(folder) == before and not (tmp_path / "data" / "corpus").exists()
