"""A fabricated run reported once through the command line, shared by the writer and figure tests."""

import contextlib
import io
from pathlib import Path

import pytest

from bytecanary.cli import main

from .runs import make_run


@pytest.fixture(scope="module")
def reported(tmp_path_factory) -> tuple[Path, str]:
    """(run dir, stdout) of ``bytecanary report RUN --wandb=false`` on a fabricated run."""
    run = make_run(tmp_path_factory.mktemp("reported"))
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        assert main(["report", str(run), "--wandb=false"]) == 0
    return run, stdout.getvalue()
