"""A training that is refused changes nothing: a resume whose flag does not fit the checkpoint,
a second training of a run that trains, an empty run name. One line each, before any write."""

import pytest

from bytecanary.checkpoints import weights_id
from bytecanary.cli import main
from bytecanary.records import read as read_records
from bytecanary.train.checkpointing import hold_run

from .conftest import digests, last_error, micro_config


def _train(config, *args: str) -> int:
    return main(["train", "--config", str(config), "--run.name", "copy", *args])


def test_a_resume_with_another_shape_is_one_line_and_leaves_the_run_as_it_was(run_copy, capsys):
    run, config = run_copy
    assert (run / "finished.json").is_file()  # a sidecar of the finished run must still end
    before = digests(run)
    capsys.readouterr()
    assert (
        _train(config, "--run.resume", "true", "--trainer.max_steps", "12", "--model.arch.n_embd", "32") == 2
    )
    last_error(capsys.readouterr().err, "model.arch.n_embd", "is 32 here but 64 in", "step0000008.ckpt")
    assert digests(run) == before


def test_a_second_training_of_a_run_is_refused_before_it_writes(run_copy, capsys):
    """Two resumes at once: the one that comes second says so, instead of racing the first
    over its temp files and reporting a file the first had just moved."""
    run, config = run_copy
    before = digests(run)
    capsys.readouterr()
    with hold_run(run):  # the first training, as it holds the run
        assert _train(config, "--run.resume", "true", "--trainer.max_steps", "12") == 2
    last_error(capsys.readouterr().err, str(run), "another training of this run is running")
    assert digests(run) == before


@pytest.mark.parametrize("name", ["", " ", "..", "a/b"])
def test_a_run_name_that_is_not_one_folder_is_one_line(name, run_copy, capsys):
    run, config = run_copy
    before = digests(run.parent)
    capsys.readouterr()
    assert main(["train", "--config", str(config), f"--run.name={name}"]) == 2
    last_error(capsys.readouterr().err, "run.name", "must name one folder")
    assert digests(run.parent) == before


def test_a_step_retrained_after_a_kill_keeps_its_identity_and_is_probed_once(tmp_path, small_data, capsys):
    """Killed between step 8's weights file and its full state: the resume from step 4 writes
    step 8 again, bit for bit, under the same ``checkpoint_id``, so it is not probed twice."""
    config = micro_config(tmp_path / "micro.yaml", small_data, tmp_path / "runs")
    args = ["train", "--config", str(config), "--run.name", "k", "--run.keep_state_every", "4"]
    assert main([*args, "--trainer.max_steps", "8"]) == 0
    ckpts = tmp_path / "runs" / "k" / "checkpoints"
    weights = ckpts / "step0000008.safetensors"
    first = weights.read_bytes()
    out = tmp_path / "side.jsonl"  # a sidecar probed the step's first file
    probe = ["probe", str(ckpts), "--probes", "[level0]", "--trial=true", "--wandb=false", "--out", str(out)]
    assert main(probe) == 0
    (ckpts / "step0000008.ckpt").unlink()  # the kill: no full state of step 8
    (ckpts / "last.ckpt").unlink()
    assert main([*args, "--trainer.max_steps", "8", "--run.resume", "true"]) == 0
    assert weights.read_bytes() == first and weights_id(weights) is not None
    capsys.readouterr()
    assert main(probe) == 0
    assert "nothing to do" in capsys.readouterr().out
    assert [r.step for r in read_records(out)] == [4, 8]
