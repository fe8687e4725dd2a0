"""A training that is refused changes nothing: a resume whose flag does not fit the checkpoint,
a second training of a run that trains, an empty run name. One line each, before any write."""

import pytest

from bytecanary.cli import main
from bytecanary.train.checkpointing import hold_run

from .conftest import digests, last_error


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
