"""One micro training run that the checkpoint, export, W&B and throughput tests read: trained
once per session as a user's ``bytecanary train`` process, never changed by a test."""

import subprocess
from pathlib import Path

import pytest
import yaml

from .. import warm
from ..conftest import MICRO, SESSION_ENVIRONMENT, train_cmd

STEPS = MICRO["trainer"]["max_steps"]  # 12
# scheduled: 1, 2 (log-spaced), 4, 8, 12 (every 4); full states kept: multiples of 8, and the newest
ARGS = ("--run.log_spaced_until", "2", "--run.keep_state_every", "8", "--run.wandb", "true")


def micro_config(path: Path, data: Path, root: Path) -> Path:
    """The micro GPT-2 over ``data``, its runs under ``root``."""
    cfg = {
        **MICRO,
        "data": {**MICRO["data"], "data_dir": str(data)},
        "run": {**MICRO["run"], "root": str(root)},
    }
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture(scope="session")
def run12(tmp_path_factory, small_data) -> tuple[Path, subprocess.CompletedProcess]:
    """(run folder, its finished training process) of a 12-step micro run logging to W&B;
    neither ``WANDB_MODE`` nor a key is set, so the run's own setting makes it offline; in the
    session's environment, as a session fixture runs before ``session_environment``."""
    root = tmp_path_factory.mktemp("run12")
    config = micro_config(root / "micro.yaml", small_data, root / "runs")
    env = {k: v for k, v in SESSION_ENVIRONMENT.items() if k not in ("WANDB_API_KEY", "WANDB_MODE")}
    proc = warm.run(train_cmd(config, "--run.name", "r", *ARGS), capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root / "runs" / "r", proc
