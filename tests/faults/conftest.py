"""The fault-injection battery's tools: the command line as a user runs it (in a subprocess
where the fault is a process's death or a resource limit, in-process otherwise), the
one-line error contract, and a trained micro run to break copies of."""

import functools
import hashlib
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from .. import sharing, warm
from ..conftest import MICRO

ROOT = Path(__file__).resolve().parents[2]
QUIET = {"TQDM_DISABLE": "1", "WANDB_MODE": "offline"}


def command(*args: str, prelude: str = "") -> list[str]:
    """``bytecanary ARGS``; ``prelude`` runs first (e.g. imports a test probe)."""
    code = f"import sys\n{prelude}\nfrom bytecanary.cli import main\nsys.exit(main())"
    return [sys.executable, "-c", code, *map(str, args)]


def bytecanary(*args: str, prelude: str = "", env: dict | None = None) -> subprocess.CompletedProcess:
    """``bytecanary ARGS`` in a process of its own (``env``: variables added to ours)."""
    return warm.run(
        command(*args, prelude=prelude),
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, **QUIET, **(env or {})},
    )


def one_error(stderr: str, *needles: str) -> str:
    """The whole of stderr is one ``error:`` line holding every needle."""
    lines = stderr.strip().splitlines()
    assert "Traceback" not in stderr and len(lines) == 1, stderr[-3000:]
    assert lines[0].startswith("error: ") and all(n in lines[0] for n in needles), lines[0]
    return lines[0]


def last_error(stderr: str, *needles: str) -> str:
    """Training's stderr: Lightning's info lines, then exactly one ``error:`` line, the last."""
    lines = stderr.strip().splitlines()
    assert "Traceback" not in stderr and lines, stderr[-3000:]
    assert [line for line in lines if line.startswith("error: ")] == lines[-1:], stderr[-3000:]
    assert all(n in lines[-1] for n in needles), lines[-1]
    return lines[-1]


def digests(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (relative path -> sha256): what must survive a fault."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def micro_config(path: Path, data_dir: Path, root: Path, probes: list | None = None, **run) -> Path:
    """The micro GPT-2 over ``data_dir``, runs under ``root``, checkpoints every 4 steps."""
    cfg = {
        **MICRO,
        "data": {**MICRO["data"], "data_dir": str(data_dir)},
        "run": {**MICRO["run"], "root": str(root), **run},
        "probes": probes or [],
    }
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture(autouse=True)
def no_progress_bars(monkeypatch):
    """In-process commands: no progress bar on stderr, which must hold only the error line
    (``TQDM_DISABLE`` is read when tqdm is imported)."""
    from bytecanary.probes import runner

    monkeypatch.setattr(runner, "tqdm", functools.partial(runner.tqdm, disable=True))


class _Stderr(logging.StreamHandler):
    """Writes each line to ``sys.stderr`` as it is then: capsys swaps it between test phases."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


@pytest.fixture
def lightning_info() -> Iterator[None]:
    """Lightning's info lines (``rank_zero_info``) on the stderr ``capsys`` reads, as in a user's
    process; under pytest lightning leaves them to pytest's log capture instead."""
    logger = logging.getLogger("lightning.pytorch")
    handler = _Stderr()
    logger.addHandler(handler)
    yield
    logger.removeHandler(handler)


@pytest.fixture(scope="session")
def trained(tmp_path_factory, small_data) -> Path:
    """A micro run of 8 steps: the weights files step0000004.safetensors and
    step0000008.safetensors, the full state step0000008.ckpt and last.ckpt linking to it.
    Copy it before breaking anything."""
    return _train(tmp_path_factory, small_data, "base")


@pytest.fixture(scope="session")
def trained_kept(tmp_path_factory, small_data) -> Path:
    """The same run keeping every full state (``keep_state_every: 4``): step0000004.ckpt too."""
    return _train(tmp_path_factory, small_data, "kept", "--run.keep_state_every", "4")


def _train(tmp_path_factory, small_data, name: str, *args: str) -> Path:
    from bytecanary.train.cli import main

    def build(root: Path) -> Path:
        config = micro_config(root / "micro.yaml", small_data, root / "runs")
        assert main(["--config", str(config), "--run.name", name, "--trainer.max_steps", "8", *args]) == 0
        return root / "runs" / name

    return sharing.built_once(tmp_path_factory, f"faults_{name}", build)


def copy_run(run: Path, to: Path) -> Path:
    """A copy of a run folder; ``last.ckpt`` stays a link."""
    return shutil.copytree(run, to, symlinks=True)


@pytest.fixture
def run_copy(trained, tmp_path, small_data) -> tuple[Path, Path]:
    """(copy of the trained run as ``tmp_path/runs/copy``, a config whose runs live beside it)."""
    run = copy_run(trained, tmp_path / "runs" / "copy")
    return run, micro_config(tmp_path / "micro.yaml", small_data, tmp_path / "runs")


@pytest.fixture
def sigkill_probe(monkeypatch) -> None:
    """The ``sigkill`` probe (killer.py) registered in this process for one test, to finish in
    process what a killed subprocess began; its marker must exist, or it kills pytest."""
    from bytecanary.probes.registry import PROBES

    from .killer import SigkillProbe  # its first import registers it for good: taken back below

    PROBES.pop("sigkill", None)
    monkeypatch.setitem(PROBES, "sigkill", SigkillProbe)
