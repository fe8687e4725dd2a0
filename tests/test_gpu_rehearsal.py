"""benchmarks/gpu_run.sh --smoke in a virtualenv of the GPU machine's image (torch 2.11.0+cu130,
lightning 2.6.6, transformers 5.17.0, tokenizers 0.23.2: benchmarks/gpu_image.txt) with only
the carried wheels added, so the GPU path is proven before any GPU time is spent. `make
test-slow` builds .venv-gpu and gpu_carry/ first."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from .test_gpu_check import check_smoke

ROOT = Path(__file__).resolve().parents[1]
GPU_VENV = ROOT / os.environ.get("GPU_VENV", ".venv-gpu")
GPU_CARRY = ROOT / os.environ.get("GPU_CARRY", "gpu_carry")
IMAGE = {"torch": "2.11.0", "lightning": "2.6.6", "transformers": "5.17.0", "tokenizers": "0.23.2"}


@pytest.mark.rehearsal
def test_the_gpu_run_passes_in_the_gpu_image_with_the_carried_wheels_alone(tmp_path, monkeypatch):
    python = GPU_VENV / "bin" / "python"
    assert python.exists() and (GPU_CARRY / "wheels").is_dir(), "build them with `make test-slow`"
    lacks = subprocess.run([python, "-c", "import jsonargparse"], capture_output=True)
    assert lacks.returncode != 0  # the image lacks it: the run must install the carried wheel
    env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH"}}
    env |= {"PYTHON": str(python), "GPU_CARRY": str(GPU_CARRY), "PATH": "/usr/local/bin:/usr/bin:/bin"}
    out = tmp_path / "out"
    proc = subprocess.run(
        ["bash", ROOT / "benchmarks" / "gpu_run.sh", out, "--smoke"], env=env, capture_output=True, text=True
    )
    log = (out / "gpu_run.log").read_text()
    assert proc.returncode == 0, log[-4000:]
    lines = log.splitlines()
    assert any(line.startswith("gpu_run: installed 3 carried wheel(s): ") for line in lines)
    versions = next(line for line in lines if line.startswith("versions: "))
    assert all(f"{name} {version}" in versions for name, version in IMAGE.items())
    assert "not needed by the check: datasets, datatrove, wandb, wordfreq" in versions
    assert any(line.startswith("gpu_run: W&B off: wandb is not in the image") for line in lines)
    assert any(" passed" in line and "failed" not in line for line in lines)  # the shim tests
    result = json.loads((out / "gpu_check.json").read_text())
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import gpu_plan as plan

    env_seen = result["environment"]
    assert env_seen["torch"] == "2.11.0+cu130" and env_seen["device"].startswith("cpu")
    assert {k: env_seen[k] for k in ("lightning", "transformers", "tokenizers")} == {
        k: IMAGE[k] for k in ("lightning", "transformers", "tokenizers")
    }
    assert result["data"]["dir"].startswith(str(GPU_CARRY / "data"))  # carried, not prepared there
    assert [k for k, v in result.items() if isinstance(v, dict) and "error" in v] == []
    check_smoke(result, plan)  # every part, on the image's torch (its profiler, its fused AdamW)
