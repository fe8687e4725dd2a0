"""Several workers on one records file: each (checkpoint, probe) pair is computed by exactly one
of them (records name it), the union is complete, a killed worker's pair is taken over once its
claim runs out, and a torchrun launch equals a single process pair for pair."""

import os
import shutil
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from bytecanary.cli import main
from bytecanary.probes.claims import Claims
from bytecanary.probes.dist import default_worker, is_lead, worker_device
from bytecanary.records import read as read_records

from .. import sharing, warm
from ..conftest import assert_same_measurement
from .conftest import QUIET, ROOT, bytecanary, command, micro_config

PROBES = ["--probes", "[level0, level1]", "--trial=true", "--wandb=false"]
KILLER = "import tests.faults.killer"


@pytest.fixture(scope="module")
def series(tmp_path_factory, small_data):
    """A micro run with a weights file every 2 steps: six checkpoints."""
    from bytecanary.train.cli import main

    def build(root: Path) -> Path:
        config = micro_config(root / "micro.yaml", small_data, root / "runs", checkpoint_every=2)
        assert main(["--config", str(config), "--run.name", "s", "--trainer.max_steps", "12"]) == 0
        return root / "runs" / "s" / "checkpoints"

    folder = sharing.built_once(tmp_path_factory, "series", build)
    assert len(list(folder.glob("step*.safetensors"))) == 6
    return folder


def _once_and_complete(out, checkpoints: int, probes: int) -> list:
    rows = read_records(out)
    counts = Counter((r.checkpoint, r.probe) for r in rows)
    assert len(counts) == checkpoints * probes and set(counts.values()) == {1}, counts
    assert all(r.ok for r in rows)
    return rows


def test_a_claim_holds_expires_and_comes_back_to_its_worker(tmp_path):
    pair = ("sha256:x", "level0", 1, "p")
    a, b = Claims(tmp_path / "p.jsonl", "a", lease=0.5), Claims(tmp_path / "p.jsonl", "b", lease=0.5)
    assert a.claim([pair]) == [True] and b.claim([pair]) == [False]
    assert a.claim([pair]) == [True]  # a worker takes back its own claim at once
    time.sleep(0.6)
    assert b.claim([pair]) == [True] and a.claim([pair]) == [False]  # expired: taken over
    with b.holding([pair]):
        time.sleep(0.8)  # renewed while held
        assert a.claim([pair]) == [False]
    assert a.claim([pair]) == [True]  # released


def test_two_independent_workers_compute_each_pair_once(series, tmp_path):
    out = tmp_path / "p.jsonl"
    env = {**os.environ, **QUIET, "OMP_NUM_THREADS": "1"}
    procs = [
        warm.Popen(command("probe", series, *PROBES, "--out", out, "--workers.name", name), cwd=ROOT, env=env)
        for name in ("a", "b")
    ]
    assert [p.wait() for p in procs] == [0, 0]
    rows = _once_and_complete(out, 6, 2)
    assert {r.worker for r in rows} <= {"a", "b"}


@pytest.mark.usefixtures("sigkill_probe")
def test_a_killed_workers_pair_is_taken_over_once_its_claim_runs_out(series, tmp_path):
    out, marker = tmp_path / "p.jsonl", tmp_path / "killed"
    probes = f"[{{name: level0, trial: true}}, {{name: sigkill, marker: '{marker}'}}]"
    args = ["probe", str(series), "--probes", probes, "--wandb=false", "--out", str(out)]
    args += ["--workers.lease", "2"]
    killed = bytecanary(*args, "--workers.name", "a", prelude=KILLER)
    assert killed.returncode == -9 and marker.exists()  # mid-pair: sigkill at the 2nd checkpoint
    claimed = (out.parent / "p.jsonl.claims").read_text()
    assert '"worker": "a"' in claimed
    assert main([*args, "--workers.name", "b"]) == 0  # waits out a's claim, then takes it
    rows = _once_and_complete(out, 6, 2)
    assert {r.worker for r in rows} == {"a", "b"}
    assert main([*args, "--workers.name", "a"]) == 0  # restarted: nothing left
    assert len(read_records(out)) == len(rows)


@pytest.mark.slow
def test_torchrun_equals_a_single_process_pair_for_pair(series, tmp_path):
    torchrun = shutil.which("torchrun") or str(ROOT / ".venv" / "bin" / "torchrun")
    env = {**os.environ, **QUIET, "OMP_NUM_THREADS": "1"}
    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    assert main(["probe", str(series), *PROBES, "--out", str(one)]) == 0
    launch = [torchrun, "--nproc-per-node", "2", "-m", "bytecanary.cli", "probe", str(series), *PROBES]
    # the interpreter runs torchrun's script, so the agent and its workers are forked (tests/warm.py)
    assert warm.run([sys.executable, *launch, "--out", str(two)], cwd=ROOT, env=env).returncode == 0
    base = {(r.checkpoint, r.probe): r for r in _once_and_complete(one, 6, 2)}
    rows = _once_and_complete(two, 6, 2)
    assert {r.worker.rsplit(":", 1)[1] for r in rows} <= {"rank0", "rank1"}
    for r in rows:
        ref = base[(r.checkpoint, r.probe)]
        assert (r.step, r.fingerprint, r.checkpoint_id) == (ref.step, ref.fingerprint, ref.checkpoint_id)
        assert_same_measurement(r.metrics, ref.metrics)


def test_worker_names_and_the_lead_follow_the_launcher(monkeypatch):
    for variable in ("RANK", "SLURM_ARRAY_TASK_ID", "SLURM_PROCID"):
        monkeypatch.delenv(variable, raising=False)
    assert default_worker().endswith(f":{os.getpid()}") and is_lead()
    monkeypatch.setenv("RANK", "1")
    assert default_worker().endswith(":rank1") and not is_lead()
    monkeypatch.delenv("RANK")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3")
    monkeypatch.setenv("SLURM_PROCID", "0")
    assert default_worker().endswith(":slurm_array_task_id3-slurm_procid0") and is_lead()


def test_each_worker_of_a_node_gets_a_gpu_of_its_own(monkeypatch):
    for variable in ("LOCAL_RANK", "SLURM_LOCALID"):
        monkeypatch.delenv(variable, raising=False)
    assert worker_device(None, 0) == "cpu" and worker_device(None, 2) == "cuda"
    monkeypatch.setenv("LOCAL_RANK", "1")  # torchrun's second worker
    assert worker_device(None, 2) == worker_device("cuda", 2) == "cuda:1"
    assert worker_device("cuda:0", 2) == "cuda:0" and worker_device("cpu", 2) == "cpu"
    assert worker_device(None, 0) == "cpu" and worker_device("cuda", 0) == "cuda"  # an error later, as asked
    monkeypatch.delenv("LOCAL_RANK")
    monkeypatch.setenv("SLURM_LOCALID", "5")  # srun's sixth task on a node of 4 GPUs
    assert worker_device(None, 4) == "cuda:1"
