"""benchmarks/gpu_check.py: its parts' budgets, profile ranking and records comparison, and
what its ``--smoke`` JSON holds (every step on a CPU, the 2-rank probe as two CPU processes),
which the rehearsal in the GPU image checks in ``make test-slow``."""

import importlib.util
import math
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def check_smoke(result: dict, plan) -> None:
    """Every part of a ``--smoke`` JSON, run on a CPU with ``plan`` (benchmarks/gpu_plan.py):
    what the rehearsal (tests/test_gpu_rehearsal.py) holds the GPU image's run to."""
    run = result["run"]
    assert run["warm"]["tokens_per_s"] > 0 and run["warm"]["mfu"] is None  # no invented CPU peak
    assert run["with_checkpoint_and_probes"]["tokens_per_s"] > 0
    assert run["tokens_seen"] == 12 * 4 * 64 and run["val_ppl"] > 1
    assert set(run["probe_seconds"]) == {"level0", "level1", "mcqa"}
    assert all(len(s) == 2 for s in run["probe_seconds"].values())  # at both checkpoints
    cost = run["probe_cost"]
    per = cost["seconds_per_checkpoint"]
    assert set(per) == {"level0", "level1", "mcqa"} and all(s > 0 for s in per.values())
    assert cost["series_420_seconds"] == pytest.approx(420 * sum(per.values()), abs=0.1)
    checked = result["export_and_probe"]
    # the exported weights score the same: held on the smooth metrics, where the other process's
    # rounding cannot flip a near tie (greedy metrics are counted, not bounded)
    diff = checked["max_abs_diff_to_training_probes"]
    assert set(diff) == {"level0", "level1", "mcqa"} and all(d < 1e-4 for d in diff.values())
    assert checked["dtype"] == "float32" and set(checked["greedy_metrics_moved"]) == set(diff)
    series = result["series_ranks"]  # two CPU processes under torchrun against one
    assert series["one_process_seconds"] > 0 and series["two_ranks_seconds"] > 0 and series["speed_up"] > 0
    assert series["pairs"] == 2 * 3 and series["same_pairs"] and series["differing_metrics"] == []
    assert series["agree"]
    assert result["fsdp"] == {"skipped": "Lightning's FSDP needs CUDA"}
    ceiling = result["ceiling"]  # the lean model of the run's shape and batch, bf16 autocast, uncompiled
    vocab = ceiling["shape"]["vocab_size"]  # the data's tokenizer
    assert ceiling["shape"] == plan.SMOKE_MODEL | {"vocab_size": vocab} and ceiling["batch_size"] == 4
    assert ceiling["tokens_per_s"] > 0 and ceiling["mfu"] is None and ceiling["peak_memory_gb"] > 0
    assert ceiling["last_loss"] == pytest.approx(math.log(vocab), rel=0.05)  # random tokens: nothing to learn
    warm = run["warm"]
    assert warm["share_of_ceiling"] == pytest.approx(warm["tokens_per_s"] / ceiling["tokens_per_s"], abs=1e-3)
    profile = result["profile"]  # no GPU: the CPU ops of 3 steps after 5, by self time
    assert profile["device"] == "cpu" and (profile["after_steps"], profile["steps"]) == (5, 3)
    top = profile["top"]
    assert 0 < len(top) <= 15 and all(r["calls"] > 0 and r["total_ms"] > 0 and r["share"] > 0 for r in top)
    assert [r["total_ms"] for r in top] == sorted((r["total_ms"] for r in top), reverse=True)
    assert sum(r["share"] for r in top) <= 1 + 1e-3  # of all ops' time, each rounded to 4 places
    assert sum(r["total_ms"] for r in top) <= profile["busy_ms"] + 0.1
    compared = result["level0_vs_generate"]  # the run's last weights file, float32 on the CPU
    assert compared["checkpoint"] == run["checkpoint"] and compared["dtype"] == "float32"
    assert compared["samples"] > 0 and compared["identical"] + compared["different"] == compared["samples"]
    # a near tie may flip between the two batch shapes; a comparison cut wrong makes most differ
    assert compared["identical"] > compared["samples"] / 2
    assert compared["probe_seconds"] > 0 and compared["generate_seconds"] > 0 and compared["speed_up"] > 0
    parts = {k for k, v in result.items() if isinstance(v, dict)} - {"environment", "plan", "data"}
    assert parts == set(plan.BUDGETS)  # every part runs within a budget on a GPU


@pytest.fixture
def gpu_plan(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import gpu_plan

    return gpu_plan


def test_the_budgets_fit_one_device_command(gpu_plan):
    one_gpu = sum(s for part, s in gpu_plan.BUDGETS.items() if part != "series_ranks")  # 2+ GPUs only
    assert one_gpu <= 8 * 60  # the whole check fits one 10-minute device command with gpu_run.sh's setup
    assert sum(gpu_plan.BUDGETS.values()) <= 9 * 60


def test_the_profile_ranks_cuda_kernels_by_total_time_as_shares_of_all_kernel_time(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from gpu_profile import top
    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import FunctionEvent

    def kernel(name: str, start: float, end: float, device=DeviceType.CUDA) -> FunctionEvent:
        return FunctionEvent(0, name, 0, start, end, device_type=device)

    events = [
        kernel("gemm", 0, 30),
        kernel("softmax", 30, 40),
        kernel("gemm", 40, 70),
        kernel("aten::mm", 0, 99, DeviceType.CPU),
    ]
    assert top(events, "cuda", rows=1) == {
        "what": "CUDA kernels by total time",
        "busy_ms": 0.07,  # both kernels; the CPU op launching them is not GPU time
        "top": [{"name": "gemm", "calls": 2, "total_ms": 0.06, "share": 0.8571}],
    }


@pytest.fixture
def gpu_check(monkeypatch):
    """benchmarks/gpu_check.py as a module, with its folder on the path as when run as a script."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_part_past_its_budget_is_killed_with_its_children_and_the_next_part_runs(gpu_check, tmp_path):
    pid_file = tmp_path / "child.pid"
    slow = ["bash", "-c", f"sleep 600 & echo $! > {pid_file}; wait"]
    results: dict = {}
    assert gpu_check.attempt(results, "slow", lambda: {"s": gpu_check.command(slow)}, budget=1) is None
    assert results["slow"]["error"].endswith("ran past the part's budget of 1 s: killed")
    child = Path(f"/proc/{int(pid_file.read_text())}/stat")
    assert not child.exists() or child.read_text().split(")")[1].split()[0] == "Z"  # gone, or only a zombie
    fine = gpu_check.attempt(results, "next", lambda: {"s": gpu_check.command(["true"])})
    assert fine == results["next"] and fine["s"] >= 0


def test_records_agree_pair_for_pair_on_smooth_metrics_within_1e_4(gpu_check):
    compare = gpu_check.compare_records

    def record(step: int, p: float, partial: float = 0.5, **more: float) -> dict:
        where = {"checkpoint": f"step{step}.safetensors", "step": step}
        metrics = {"probe/level0/all/all/p_valid": p, "probe/level0/all/all/partial": partial, **more}
        return where | {"probe": "level0", "fingerprint": "p", "status": "ok", "metrics": metrics}

    nan = float("nan")
    one = [record(1, 1.0, n=nan), record(2, 0.0)]
    assert compare(one, [record(2, 0.0), record(1, 1.00005, n=nan)])["agree"]  # any order, NaN = NaN
    off = compare(one, [record(1, 1.0002, n=nan), record(2, 0.0)])
    assert not off["agree"] and off["differing_metrics"] == [
        "level0 at step1.safetensors: probe/level0/all/all/p_valid"
    ]
    flipped = compare(one, [record(1, 1.0, partial=0.75, n=nan), record(2, 0.0)])  # a greedy metric moved
    assert flipped["agree"] and flipped["greedy_metrics_moved"] == 1 and flipped["differing_metrics"] == []
    assert not compare(one, [record(1, 1.0, n=nan)])["same_pairs"]  # a pair missing
    assert not compare(one, [*one, one[0]])["same_pairs"]  # a pair twice
    assert not compare(one, [record(1, 1.0), record(2, 0.0)])["agree"]  # a metric missing


@pytest.fixture
def gpu_env(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import gpu_env

    return gpu_env


def test_gpu_env_installs_only_the_carried_wheels_this_python_lacks(gpu_env, capsys):
    wheels = ["w/numpy-2.5.2-cp312-cp312-manylinux_2_28_x86_64.whl", "w/no_such_dist-1.0-py3-none-any.whl"]
    assert gpu_env.missing(wheels) == ["w/no_such_dist-1.0-py3-none-any.whl"]
    assert gpu_env.main(["missing", wheels[0]]) == 0
    assert capsys.readouterr().out == ""  # none: not even an empty line, which pip would refuse


def test_gpu_env_names_the_version_that_blocks_in_one_line(gpu_env, monkeypatch, capsys):
    assert gpu_env.main(["versions"]) == 0  # this venv passes
    assert capsys.readouterr().out.startswith("versions: torch ")
    real = gpu_env.metadata.version
    monkeypatch.setattr(gpu_env.metadata, "version", lambda n: "5.30.0" if n == "transformers" else real(n))
    assert gpu_env.main(["versions"]) == 1
    out = capsys.readouterr().out
    assert out == "versions: transformers 5.30.0 is outside transformers<5.25,>=5.0 (pyproject.toml)\n"


def test_gpu_env_writes_the_entry_points_an_install_would(gpu_env, tmp_path):
    """The GPU run puts the checkout on the path without installing it; the dist-info it writes
    beside it registers the built-in probes as the installed package does."""
    assert gpu_env.main(["metadata", str(tmp_path)]) == 0
    [found] = metadata.distributions(path=[str(tmp_path)])
    ours = metadata.distribution("bytecanary")
    assert found.metadata["Name"] == "bytecanary" and found.version == ours.version
    probes = found.entry_points.select(group="bytecanary.probes")
    assert sorted(probes) == sorted(ours.entry_points.select(group="bytecanary.probes"))
    assert {"level0", "level1", "mcqa", "ppl"} <= set(probes.names)
