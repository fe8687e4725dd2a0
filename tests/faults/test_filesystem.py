"""Filesystem faults are one line naming the path and the cause, exit 2, and nothing that
existed before is lost: a full disk (RLIMIT_FSIZE -> EFBIG), an output path under a regular
file or that is one, a truncated stage.json or model.safetensors."""

import json
import shutil

import pytest

from bytecanary.cli import main
from bytecanary.train.export import export

from ..conftest import write_config
from .conftest import bytecanary, copy_run, digests, last_error, one_error


def _file_size_limit(limit: int) -> str:
    """A prelude: files may grow to ``limit`` bytes; a larger write fails with EFBIG (Python
    ignores SIGXFSZ, so it is an OSError, not a killed process)."""
    return f"import resource\nresource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))"


@pytest.mark.slow
@pytest.mark.parametrize("fails", [".safetensors", ".ckpt"])
def test_a_full_disk_during_training_is_one_line_and_keeps_every_checkpoint(run_copy, fails):
    """The weights file is written first, then the full state: whichever the disk refuses is
    named, and nothing that was there is replaced."""
    run, config = run_copy
    before = digests(run / "checkpoints")
    metrics = (run / "metrics.jsonl").read_bytes()
    size = (run / "checkpoints" / f"step0000008{fails}").stat().st_size
    proc = bytecanary("train", "--config", config, "--run.name", "copy", "--trainer.max_steps", "12",
                      "--run.resume", "true", prelude=_file_size_limit(size // 2))  # fmt: skip
    assert proc.returncode == 2
    last_error(proc.stderr, str(run / "checkpoints" / f"step0000012{fails}"), "File too large")
    after = digests(run / "checkpoints")
    if fails == ".ckpt":  # the weights of step 12 made it; the resumed run rewrites them
        assert after.pop("step0000012.safetensors")
    assert after == before  # no temp file left, nothing replaced
    assert (run / "metrics.jsonl").read_bytes().startswith(metrics)


def test_an_output_path_under_a_regular_file_fails_before_any_work(trained, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("a file, not a folder")
    ckpt = str(trained / "checkpoints" / "step0000004.safetensors")
    commands = [
        ["probe", ckpt, "--out", str(blocker / "p.jsonl"), "--wandb=false"],
        ["export", ckpt, str(blocker / "hf")],
        ["prepare", "--config", str(write_config(tmp_path / "small.yaml")), "--out", str(blocker / "data")],
        ["train", "--config", str(trained.parent.parent / "micro.yaml"), "--run.root", str(blocker)],
    ]
    for args in commands:
        assert main(args) == 2, args
        one_error(capsys.readouterr().err, f"{blocker} is a file, not a folder")
    assert blocker.read_text() == "a file, not a folder"


def test_an_output_path_of_the_wrong_kind_is_refused(trained, tmp_path, capsys):
    ckpt = str(trained / "checkpoints" / "step0000004.safetensors")
    a_file, a_folder = tmp_path / "data", tmp_path / "p.jsonl"
    a_file.write_text("mine")
    a_folder.mkdir()
    assert main(["prepare", "--config", str(write_config(tmp_path / "s.yaml")), "--out", str(a_file)]) == 2
    one_error(capsys.readouterr().err, str(a_file), "exists and is not a folder")
    assert main(["probe", ckpt, "--out", str(a_folder), "--wandb=false"]) == 2
    one_error(capsys.readouterr().err, str(a_folder), "exists and is not a file")
    run = copy_run(trained, tmp_path / "run")
    (run / "report").write_text("my notes")
    assert main(["report", str(run), "--wandb=false"]) == 2
    one_error(capsys.readouterr().err, str(run / "report"), "exists and is not a folder")
    assert a_file.read_text() == "mine" and (run / "report").read_text() == "my notes"


def test_a_truncated_stage_json_rebuilds_that_stage(small_data, tmp_path, capsys):
    data = shutil.copytree(small_data, tmp_path / "data")
    stage = data / "evalsets" / "stage.json"
    stage.write_text(stage.read_text()[:20])
    config = write_config(tmp_path / "small.yaml")
    assert main(["prepare", "--config", str(config), "--out", str(data)]) == 0
    (warning,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: ")]
    assert str(stage) in warning and "rebuilding the evalsets stage" in warning
    rebuilt, original = digests(data / "evalsets"), digests(small_data / "evalsets")
    del rebuilt["stage.json"], original["stage.json"]
    assert rebuilt == original  # the same sets
    assert (
        json.loads(stage.read_text())["hash"]
        == json.loads((small_data / "evalsets" / "stage.json").read_text())["hash"]
    )


def test_a_truncated_or_tokenizerless_model_folder_is_one_line(trained, tmp_path, capsys):
    hf = export(trained / "checkpoints" / "step0000004.safetensors", tmp_path / "hf")
    weights = hf / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    assert main(["probe", str(hf), "--wandb=false", "--out", str(tmp_path / "p.jsonl")]) == 2
    one_error(capsys.readouterr().err, str(hf), "cannot load the model")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (hf / name).unlink()
    assert main(["probe", str(hf), "--wandb=false", "--out", str(tmp_path / "p.jsonl")]) == 2
    one_error(capsys.readouterr().err, str(hf), "no tokenizer")


def test_debug_shows_the_traceback(tmp_path, monkeypatch):
    monkeypatch.setenv("BYTECANARY_DEBUG", "1")
    (tmp_path / "file").write_text("x")
    with pytest.raises(Exception, match="file"):
        main(["prepare", "--config", str(write_config(tmp_path / "s.yaml")), "--out", str(tmp_path / "file")])
