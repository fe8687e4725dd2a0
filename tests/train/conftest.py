"""A micro GPT-2 config over the small prepared data; runs as a subprocess like a user."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

MICRO = {
    "model": {
        "arch": {"n_layer": 2, "n_head": 2, "n_embd": 64, "n_positions": 32},
        "optim": {"lr": 3e-3, "warmup_steps": 4},
    },
    "data": {"batch_size": 8, "val_tokens": 512},
    "trainer": {
        "accelerator": "cpu",
        "devices": 1,
        "max_steps": 12,
        "val_check_interval": 4,
        "log_every_n_steps": 2,
        "enable_progress_bar": False,
        "enable_model_summary": False,
    },
    "run": {"checkpoint_every": 4, "log_spaced_until": None, "wandb": False},
}


@pytest.fixture
def micro(tmp_path, small_data) -> Path:
    path = tmp_path / "micro.yaml"
    cfg = {
        **MICRO,
        "data": {**MICRO["data"], "data_dir": str(small_data)},
        "run": {**MICRO["run"], "root": str(tmp_path / "runs")},
    }
    path.write_text(yaml.safe_dump(cfg))
    return path


def train_cmd(config: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "bytecanary.cli", "train", "--config", str(config), *args]


def run_train(config: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        train_cmd(config, *args),
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc
