"""A run killed before its first full training state: the weights file of the first
checkpoint is written, its ``step<N>.ckpt`` is not (a temp file is left half written).
``--run.resume=true`` starts it again from step 0 and rewrites the same files bit for bit;
starting it without resume is one line that says to pass ``--run.resume=true``."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from bytecanary.cli import main
from bytecanary.errors import BytecanaryError
from bytecanary.train.cli import RunConfig, resume_from

from .conftest import bytecanary, digests, last_error, micro_config


def _weights(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
    return load_file(path), meta


def assert_same_weights(path: Path, reference: Path) -> None:
    """Tensors, header metadata and bytes: the file ``reference`` is, bit for bit."""
    (tensors, meta), (want, want_meta) = _weights(path), _weights(reference)
    assert tensors.keys() == want.keys() and all(torch.equal(tensors[k], want[k]) for k in want), path
    assert meta == want_meta, (json.loads(meta["bytecanary"]), json.loads(want_meta["bytecanary"]))
    assert path.read_bytes() == reference.read_bytes(), path


def _train_rows(run: Path) -> list[tuple[int, float]]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["train/loss"]) for r in rows if "train/loss" in r]


@pytest.mark.slow
@pytest.mark.usefixtures("lightning_info")
def test_a_kill_before_the_first_training_state_resumes_from_step_0(tmp_path, small_data, capsys):
    config = micro_config(tmp_path / "micro.yaml", small_data, tmp_path / "runs")
    run = tmp_path / "runs" / "k"
    args = ["train", "--config", str(config), "--run.name", "k", "--trainer.max_steps", "8"]
    assert main(args) == 0  # the uninterrupted run, at the same path, then moved aside
    reference = shutil.move(run, tmp_path / "reference")
    threads = {"OMP_NUM_THREADS": str(torch.get_num_threads())}  # as the reference's

    killed = bytecanary(*args, prelude="import tests.faults.killer_state", env=threads)
    assert killed.returncode == -9, killed.stderr[-3000:]
    ckpts = run / "checkpoints"
    (temp,) = ckpts.glob(".step0000004.ckpt.*.tmp")  # the full state, half written
    assert sorted(p.name for p in ckpts.iterdir()) == sorted([temp.name, "step0000004.safetensors"])
    first = shutil.copy(ckpts / "step0000004.safetensors", tmp_path / "first.safetensors")

    before = digests(run)
    capsys.readouterr()
    assert main(args) == 2  # without resume: the run folder is not started over silently
    last_error(capsys.readouterr().err, str(run), "already holds checkpoints", "pass --run.resume=true")
    assert digests(run) == before

    assert main([*args, "--run.resume", "true"]) == 0  # in this process: the reference's threads
    resumed = capsys.readouterr().err
    assert "Traceback" not in resumed, resumed[-3000:]
    assert "starting again from step 0" in resumed and "removed 1 temp files" in resumed
    assert not [p for p in run.rglob(".*.tmp")]
    names = sorted(p.name for p in ckpts.iterdir())
    assert names == sorted(p.name for p in (reference / "checkpoints").iterdir())
    assert names == ["last.ckpt", "step0000004.safetensors", "step0000008.ckpt", "step0000008.safetensors"]
    assert_same_weights(ckpts / "step0000004.safetensors", first)  # rewritten as it was
    for name in ("step0000004.safetensors", "step0000008.safetensors"):
        assert_same_weights(ckpts / name, reference / "checkpoints" / name)
    assert (run / "config.yaml").read_bytes() == (reference / "config.yaml").read_bytes()  # resume: false
    assert _train_rows(run) == _train_rows(reference)  # from step 0, each step once


def test_resume_starts_from_step_0_only_where_no_state_was_written(tmp_path):
    run = RunConfig(name="r", root=str(tmp_path / "runs"), resume=True)
    with pytest.raises(BytecanaryError, match=r"run.resume: no run to resume in .*start it without"):
        resume_from(run)  # a wrong --run.name: nothing to resume, nothing started
    ckpts = run.dir / "checkpoints"
    ckpts.mkdir(parents=True)
    (run.dir / "wandb-id").write_text("x")  # the logger's, before config.yaml: not a started run
    with pytest.raises(BytecanaryError, match=r"run.resume: no run to resume"):
        resume_from(run)
    (run.dir / "config.yaml").write_text("run: {}")  # written first at every start
    assert resume_from(run) is None  # killed before the first checkpoint
    (ckpts / "step0000004.safetensors").write_bytes(b"weights")
    (ckpts / ".step0000004.ckpt.ab12.tmp").write_bytes(b"half a state")
    assert resume_from(run) is None  # killed before the first full state
    with pytest.raises(BytecanaryError, match=r"already holds checkpoints: pass --run\.resume=true"):
        resume_from(RunConfig(name="r", root=str(tmp_path / "runs")))
    (ckpts / "step0000004.ckpt").write_bytes(b"not a checkpoint")  # written, and lost: no restart
    with pytest.raises(BytecanaryError, match=r"run.resume: no loadable training state"):
        resume_from(run)
