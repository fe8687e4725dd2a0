"""Checkpoints survive: a corrupt newest checkpoint (resume and --watch), temp files of
killed writes, a crash between a full state and its link, a truncated or foreign weights
file, a moved run folder, a bad checkpoint or logging flag."""

import os
import shutil

import pytest
import torch
from safetensors.torch import load_file

from bytecanary.checkpoints import checkpoint_meta, load_checkpoint, read_meta
from bytecanary.cli import main
from bytecanary.probe_options import ProbeOptions, ProbeSeries
from bytecanary.probes import runner, targets
from bytecanary.records import read as read_records
from bytecanary.train.checkpointing import latest_checkpoint

from .conftest import bytecanary, copy_run, digests, micro_config, one_error


def _truncate(path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def test_resume_picks_the_newest_loadable_full_state_by_step(trained_kept, tmp_path, capsys):
    folder = copy_run(trained_kept / "checkpoints", tmp_path / "checkpoints")
    assert latest_checkpoint(folder) == folder / "step0000008.ckpt"
    os.utime(folder / "step0000004.ckpt")  # newest by mtime: resuming from it would redo steps
    (folder / "last.ckpt").unlink()
    (folder / "last.ckpt").symlink_to("step0000004.ckpt")  # killed before the link moved on
    assert latest_checkpoint(folder) == folder / "step0000008.ckpt" and capsys.readouterr().err == ""
    _truncate(folder / "step0000008.ckpt")
    assert latest_checkpoint(folder) == folder / "step0000004.ckpt"
    (warning,) = capsys.readouterr().err.strip().splitlines()
    assert warning.startswith("warning: ") and "step0000008.ckpt: not a loadable checkpoint" in warning


@pytest.mark.slow
def test_corrupt_newest_state_and_stale_temps_do_not_stop_a_resume(trained_kept, tmp_path, small_data):
    run = copy_run(trained_kept, tmp_path / "runs" / "kept")
    config = micro_config(tmp_path / "micro.yaml", small_data, tmp_path / "runs")
    ckpts = run / "checkpoints"
    _truncate(ckpts / "step0000008.ckpt")  # bit rot under last.ckpt
    (ckpts / ".step0000008.ckpt.x1y2.tmp").write_bytes(b"half a checkpoint")
    (ckpts / ".step0000008.safetensors.x1y2.tmp").write_bytes(b"half a weights file")
    (run / ".metrics.jsonl.a1b2.tmp").write_text("{")
    before = digests(ckpts)
    weights_8 = shutil.copy(ckpts / "step0000008.safetensors", tmp_path / "step8.safetensors")
    proc = bytecanary("train", "--config", config, "--run.name", "kept", "--trainer.max_steps", "8",
                      "--run.resume", "true", "--run.keep_state_every", "4")  # fmt: skip
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1 and "step0000008.ckpt" in warnings[0]
    after = digests(ckpts)
    for name in ("step0000004.ckpt", "step0000004.safetensors"):
        assert after[name] == before[name]
    assert after["step0000008.safetensors"] != before["step0000008.safetensors"]  # its config says resume
    rewritten, original = load_file(ckpts / "step0000008.safetensors"), load_file(weights_8)
    assert rewritten.keys() == original.keys()
    assert all(torch.equal(rewritten[k], original[k]) for k in original)  # bit for bit
    for name in ("step0000008.ckpt", "last.ckpt"):  # rewritten whole
        assert checkpoint_meta(load_checkpoint(ckpts / name), name)["step"] == 8
    assert os.readlink(ckpts / "last.ckpt") == "step0000008.ckpt"
    assert not list(ckpts.glob(".*.tmp")) and not list(run.glob(".*.tmp"))


@pytest.mark.parametrize("damage", ["truncated", "foreign"])
def test_a_bad_weights_file_is_one_line_for_probe_and_export(trained, tmp_path, damage, capsys):
    bad = tmp_path / "step0000008.safetensors"
    if damage == "truncated":
        shutil.copy(trained / "checkpoints" / "step0000008.safetensors", bad)
        _truncate(bad)
        reason = "not a loadable weights file (truncated or corrupt?)"
    else:  # an HF model's weights: safetensors, but not ours
        hf = tmp_path / "hf"
        assert main(["export", str(trained / "checkpoints" / "step0000008.safetensors"), str(hf)]) == 0
        shutil.copy(hf / "model.safetensors", bad)
        reason = "not a bytecanary weights file"
    capsys.readouterr()
    assert main(["probe", str(bad), "--wandb=false", "--out", str(tmp_path / "p.jsonl")]) == 2
    one_error(capsys.readouterr().err, str(bad), reason)
    assert main(["export", str(bad), str(tmp_path / "out")]) == 2
    one_error(capsys.readouterr().err, str(bad), reason)
    assert not (tmp_path / "out").exists() and not (tmp_path / "p.jsonl").exists()


def test_watch_skips_a_corrupt_checkpoint_and_probes_it_when_whole(trained, tmp_path, monkeypatch, capsys):
    folder = tmp_path / "ckpts"
    folder.mkdir()
    shutil.copy(trained / "checkpoints" / "step0000004.safetensors", folder)
    shutil.copy(trained / "checkpoints" / "step0000008.safetensors", folder)
    _truncate(folder / "step0000008.safetensors")  # still being copied in
    looks = iter(["copy done", "Ctrl-C"])

    def sleep(seconds: float) -> None:
        if next(looks) == "Ctrl-C":
            raise KeyboardInterrupt
        shutil.copy(trained / "checkpoints" / "step0000008.safetensors", folder)

    monkeypatch.setattr(targets.time, "sleep", sleep)  # the watch loop's pause
    out = tmp_path / "p.jsonl"
    specs = [{"name": "level0", "per_language": 2, "trial": True}]
    options = ProbeOptions(
        out=str(out), watch=str(folder), series=ProbeSeries(interval=0.01), device="cpu", wandb=False
    )
    assert runner.run([], specs, options) == 0
    (warning,) = capsys.readouterr().err.strip().splitlines()
    assert (
        warning.startswith("warning: ") and "step0000008.safetensors: not a loadable weights file" in warning
    )
    assert [(r.step, r.status) for r in read_records(out)] == [(4, "ok"), (8, "ok")]


def test_a_moved_run_folder_exports_from_any_working_directory(trained, tmp_path, monkeypatch, capsys):
    """Checkpoints name the run's own tokenizer copy relative to themselves; last.ckpt is a
    relative link, so it moves with the folder."""
    moved = copy_run(trained, tmp_path / "elsewhere" / "run")
    for name in ("last.ckpt", "step0000008.safetensors"):
        assert read_meta(moved / "checkpoints" / name)["tokenizer_path"] == "../tokenizer"
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert main(["export", "run/checkpoints/last.ckpt", "hf"]) == 0
    assert main(["export", "run/checkpoints/step0000004.safetensors", "hf4"]) == 0
    assert (tmp_path / "elsewhere" / "hf" / "tokenizer.json").is_file() and capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("flag", "needles"),
    [
        ("--run.keep_state_every=-1", ("run.keep_state_every", "-1")),
        ("--run.wandb_detail=bogus", ("run.wandb_detail", "'bogus'", "'tables', 'scalars'")),
    ],
)
def test_a_bad_checkpoint_or_logging_flag_is_one_line_without_usage(tmp_path, small_data, flag, needles):
    config = micro_config(tmp_path / "micro.yaml", small_data, tmp_path / "runs")
    proc = bytecanary("train", "--config", config, "--run.name", "bad", flag)
    assert proc.returncode == 2 and "usage:" not in proc.stderr
    one_error(proc.stderr, *needles)
    assert not (tmp_path / "runs").exists()
