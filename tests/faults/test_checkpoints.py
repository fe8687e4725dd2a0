"""Checkpoints survive: a corrupt newest checkpoint (resume and --watch), temp files of
killed writes, export into a folder that holds something, a moved run folder."""

import os
import shutil
import time
import types

import pytest

import probes.runner
from bytecanary.checkpoints import checkpoint_meta, load_checkpoint
from bytecanary.cli import main
from probes.records import read_records
from train.checkpointing import latest_checkpoint

from .conftest import bytecanary, digests, one_error


def _truncate(path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def test_resume_picks_the_newest_loadable_checkpoint_by_step(trained, tmp_path, capsys):
    folder = shutil.copytree(trained / "checkpoints", tmp_path / "checkpoints")
    assert latest_checkpoint(folder) == folder / "last.ckpt"
    os.utime(folder / "step0000004.ckpt")  # newest by mtime: resuming from it would redo steps
    assert latest_checkpoint(folder) == folder / "last.ckpt" and capsys.readouterr().err == ""
    _truncate(folder / "last.ckpt")
    assert latest_checkpoint(folder) == folder / "step0000008.ckpt"
    (warning,) = capsys.readouterr().err.strip().splitlines()
    assert warning.startswith("warning: ") and "last.ckpt: not a loadable checkpoint" in warning


@pytest.mark.slow
def test_corrupt_newest_checkpoints_and_stale_temps_do_not_stop_a_resume(run_copy):
    run, config = run_copy
    ckpts = run / "checkpoints"
    _truncate(ckpts / "step0000008.ckpt")  # the disk filled during the last save
    _truncate(ckpts / "last.ckpt")
    (ckpts / ".step0000012.ckpt.x1y2.tmp").write_bytes(b"half a checkpoint")
    (run / ".metrics.jsonl.a1b2.tmp").write_text("{")
    kept = digests(ckpts)["step0000004.ckpt"]
    proc = bytecanary("train", "--config", config, "--run.name", "copy", "--trainer.max_steps", "12",
                      "--run.resume", "true")  # fmt: skip
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 2 and "last.ckpt" in warnings[0] and "step0000008.ckpt" in warnings[1]
    assert digests(ckpts)["step0000004.ckpt"] == kept
    for name in ("step0000008.ckpt", "step0000012.ckpt", "last.ckpt"):  # rewritten whole
        assert checkpoint_meta(load_checkpoint(ckpts / name), name)["step"] in (8, 12)
    assert not list(ckpts.glob(".*.tmp")) and not list(run.glob(".*.tmp"))


def test_watch_skips_a_corrupt_checkpoint_and_probes_it_when_whole(trained, tmp_path, monkeypatch, capsys):
    folder = tmp_path / "ckpts"
    folder.mkdir()
    shutil.copy(trained / "checkpoints" / "step0000004.ckpt", folder)
    shutil.copy(trained / "checkpoints" / "step0000008.ckpt", folder)
    _truncate(folder / "step0000008.ckpt")  # still being copied in
    looks = iter(["copy done", "Ctrl-C"])

    def sleep(seconds: float) -> None:
        if next(looks) == "Ctrl-C":
            raise KeyboardInterrupt
        shutil.copy(trained / "checkpoints" / "step0000008.ckpt", folder)

    clock = types.SimpleNamespace(sleep=sleep, perf_counter=time.perf_counter)  # the runner's only
    monkeypatch.setattr(probes.runner, "time", clock)
    out = tmp_path / "p.jsonl"
    specs = [{"name": "level0", "per_language": 2, "trial": True}]
    assert probes.runner.run([], specs, str(out), watch_dir=str(folder), interval=0, device="cpu") == 0
    (warning,) = capsys.readouterr().err.strip().splitlines()
    assert warning.startswith("warning: ") and "step0000008.ckpt: not a loadable checkpoint" in warning
    assert [(r["step"], r["status"]) for r in read_records(out)] == [(4, "ok"), (8, "ok")]


@pytest.mark.parametrize("target", ["other", "run"])
def test_export_never_replaces_what_a_folder_holds(trained, tmp_path, target, capsys):
    ckpt = trained / "checkpoints" / "step0000004.ckpt"
    folder = trained if target == "run" else tmp_path / "other"
    if target == "other":
        folder.mkdir()
        (folder / "notes.txt").write_text("mine")
    before = digests(folder)
    args = ["export", str(ckpt), str(folder)] + (["--force"] if target == "run" else [])
    assert main(args) == 2
    one_error(capsys.readouterr().err, str(folder), "refusing to replace" if target == "run" else "--force")
    assert digests(folder) == before
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(f".{folder.name}.")]


def test_a_moved_run_folder_exports_from_any_working_directory(trained, tmp_path, monkeypatch, capsys):
    """Checkpoints name the run's own tokenizer copy relative to themselves."""
    moved = shutil.copytree(trained, tmp_path / "elsewhere" / "run")
    assert checkpoint_meta(load_checkpoint(moved / "checkpoints" / "last.ckpt"), "x")["tokenizer_path"] == (
        "../tokenizer"
    )
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert main(["export", "run/checkpoints/last.ckpt", "hf"]) == 0
    assert (tmp_path / "elsewhere" / "hf" / "tokenizer.json").is_file() and capsys.readouterr().err == ""
