"""benchmarks/gpu_check.py --smoke: the GPU check's every step on a CPU, so it never rots
between the runs on a GPU."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_gpu_check_smoke_writes_its_json(tmp_path):
    out = tmp_path / "gpu_check.json"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--smoke", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    env = result["environment"]
    assert result["mode"] == "smoke" and env["device"].startswith("cpu")
    assert env["peak_bf16_flops"] is None and {"torch", "lightning", "transformers"} <= set(env)
    run = result["run"]
    assert run["warm"]["tokens_per_s"] > 0 and run["warm"]["mfu"] is None  # no invented CPU peak
    assert run["with_checkpoint_and_probes"]["tokens_per_s"] > 0
    assert run["tokens_seen"] == 12 * 4 * 64 and run["val_ppl"] > 1
    assert set(run["probe_seconds"]) == {"level0", "level1", "mcqa"}
    assert all(len(s) == 2 for s in run["probe_seconds"].values())  # at both checkpoints
    checked = result["export_and_probe"]
    diff = checked["max_abs_diff_to_training_probes"]  # the exported weights score the same
    assert set(diff) == {"level0", "level1", "mcqa"} and max(diff.values()) < 1e-6
    assert result["fsdp"] == {"skipped": "Lightning's FSDP needs CUDA"}
