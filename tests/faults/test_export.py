"""Export deletes nothing it did not write: a run, a folder of runs, a run's checkpoints, the
working directory, a folder behind a link, or a previous export a user added files to are
refused (with --force too) and stay byte for byte; --force replaces a previous export only."""

import json
import os

import pytest

from bytecanary.cli import main

from .conftest import copy_run, digests, one_error

WEIGHTS = "checkpoints/step0000004.safetensors"


def _export(ckpt, folder, *flags) -> int:
    return main(["export", str(ckpt), str(folder), *flags])


@pytest.mark.parametrize(
    ("target", "needle"),
    [
        ("run", "not a previous export"),
        ("checkpoints", "not a previous export"),
        ("runs", "not a previous export"),
        ("other", "not a previous export"),
        ("cwd", "the working directory is inside it"),
        ("tampered", "files export did not write (notes.txt)"),
    ],
)
def test_export_force_never_deletes_what_it_did_not_write(
    trained, tmp_path, monkeypatch, capsys, target, needle
):
    runs = tmp_path / "runs"
    run = copy_run(trained, runs / "a")
    copy_run(trained, runs / "b")
    ckpt = run / WEIGHTS
    folder = {"run": run, "checkpoints": run / "checkpoints", "runs": runs, "cwd": run}.get(target)
    if target == "other":
        folder = tmp_path / "other"
        folder.mkdir()
        (folder / "notes.txt").write_text("mine")
    if target == "tampered":
        folder = tmp_path / "hf"
        assert _export(ckpt, folder) == 0
        (folder / "notes.txt").write_text("mine")
    if target == "cwd":
        monkeypatch.chdir(run)
    watched = tmp_path  # every run, the export and the notes: all of it must survive
    before = digests(watched)
    assert _export(ckpt, "." if target == "cwd" else folder, "--force=true") == 2
    one_error(capsys.readouterr().err, needle)
    assert digests(watched) == before
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(f".{folder.name}.")]


def test_export_refuses_a_link_and_leaves_no_stale_link(trained, tmp_path, capsys):
    ckpt = trained / WEIGHTS
    real, link = tmp_path / "hf", tmp_path / "link"
    assert _export(ckpt, real) == 0
    link.symlink_to(real)
    before = digests(tmp_path)
    assert _export(ckpt, link, "--force=true") == 2
    one_error(capsys.readouterr().err, str(link), "a symbolic link", str(real))
    assert digests(tmp_path) == before and sorted(p.name for p in tmp_path.iterdir()) == ["hf", "link"]


def test_force_replaces_a_previous_export_and_only_with_force(trained, tmp_path, capsys):
    out = tmp_path / "hf"
    assert _export(trained / "checkpoints" / "step0000004.safetensors", out) == 0
    info = json.loads((out / "bytecanary.json").read_text())
    assert info["step"] == 4 and set(info["files"]) == set(os.listdir(out)) - {"bytecanary.json"}
    assert _export(trained / "checkpoints" / "step0000008.safetensors", out) == 2
    one_error(capsys.readouterr().err, str(out), "holds a previous export; pass --force")
    assert json.loads((out / "bytecanary.json").read_text())["step"] == 4
    assert _export(trained / "checkpoints" / "step0000008.safetensors", out, "--force=true") == 0
    assert json.loads((out / "bytecanary.json").read_text())["step"] == 8
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]  # nothing left beside it
