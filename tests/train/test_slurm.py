"""The SLURM launches the docs show give Lightning the world they ask for: each documented
``sbatch ... --wrap "srun bytecanary train ..."`` line is read out of the docs, its arguments
go through the real training parser, and the trainer is built (not fitted) under the
variables srun gives each task, for a few of its ranks. Without ``--ntasks-per-node`` or
``--trainer.num_nodes`` Lightning refuses, which is why the docs pass both."""

import argparse
import os
import shlex
from pathlib import Path

import pytest
from lightning.fabric.plugins.environments import SLURMEnvironment

from bytecanary.errors import BytecanaryError
from bytecanary.train.cli import make_cli

ROOT = Path(__file__).resolve().parents[2]
DOCS = [
    ROOT / "README.md",
    ROOT / "docs" / "gpus.md",
    ROOT / "docs" / "tutorials" / "train.md",
    ROOT / "configs" / "gpt2-355m.yaml",  # its header
]
# what a CPU test changes in a documented command: the device, a tiny model on the small
# data (150,000 planned steps would exceed its budget), nothing written, no probes
ON_CPU = [
    "--trainer.accelerator=cpu",
    "--model.compile=false",
    "--model.arch.n_layer=1",
    "--model.arch.n_head=1",
    "--model.arch.n_embd=16",
    "--model.arch.n_positions=32",
    "--data.max_repeats=null",
    "--run.wandb=false",
    "--probes=[]",
]
ELASTIC = ("TORCHELASTIC_RUN_ID", "RANK", "LOCAL_RANK", "GROUP_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")


def sbatch_parser() -> argparse.ArgumentParser:
    """The sbatch options the launches use (the others are not Lightning's business)."""
    parser = argparse.ArgumentParser(prog="sbatch")
    parser.add_argument("-N", "--nodes", type=int, default=1)
    parser.add_argument("--ntasks-per-node", type=int)
    parser.add_argument("--wrap", required=True)
    return parser


def documented_launches() -> list[tuple[str, str]]:
    """(file name, line) of every ``sbatch`` line in the docs that trains (in a YAML comment too)."""
    lines = [(path.name, line.lstrip("# ")) for path in DOCS for line in path.read_text("utf-8").splitlines()]
    return [(name, line) for name, line in lines if line.startswith("sbatch ") and "bytecanary train" in line]


LAUNCHES = documented_launches()


def launch(line: str) -> tuple[argparse.Namespace, list[str]]:
    """sbatch's options and the ``bytecanary train`` arguments of a documented line."""
    options, _ = sbatch_parser().parse_known_args(shlex.split(line)[1:])
    srun = shlex.split(options.wrap)
    assert srun[:3] == ["srun", "bytecanary", "train"], line
    return options, srun[3:]


def slurm_env(options: argparse.Namespace, rank: int) -> dict[str, str]:
    """What srun sets for task ``rank`` of the job: ``--ntasks-per-node`` tasks on each node,
    or one per node without it (SLURM_NTASKS_PER_NODE is then unset)."""
    per_node = options.ntasks_per_node or 1
    tasks, hosts = options.nodes * per_node, f"gpu[01-{options.nodes:02d}]"
    env = {
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NAME": "wrap",  # sbatch --wrap's job name
        "SLURM_NODELIST": hosts,
        "SLURM_JOB_NODELIST": hosts,
        "SLURM_NNODES": str(options.nodes),
        "SLURM_JOB_NUM_NODES": str(options.nodes),
        "SLURM_NTASKS": str(tasks),
        "SLURM_NPROCS": str(tasks),
        "SLURM_TASKS_PER_NODE": f"{per_node}(x{options.nodes})",
        "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": str(rank % per_node),
        "SLURM_NODEID": str(rank // per_node),
    }
    if options.ntasks_per_node is not None:
        env["SLURM_NTASKS_PER_NODE"] = str(options.ntasks_per_node)
    return env


@pytest.fixture
def as_task(monkeypatch, small_data, tmp_path):
    """Build the trainer of ``bytecanary train ARGS`` as task ``rank`` of the job; the
    environment and Lightning's process-wide rank are restored afterwards."""
    from lightning.pytorch.utilities import rank_zero
    from lightning_utilities.core import rank_zero as utilities_rank_zero

    monkeypatch.chdir(ROOT)  # the docs' paths are the checkout's
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))  # the launcher sets it
    for name in [*ELASTIC, "MASTER_ADDR", "MASTER_PORT", *(k for k in os.environ if k.startswith("SLURM_"))]:
        monkeypatch.delenv(name, raising=False)
    for holder in (rank_zero.rank_zero_only, utilities_rank_zero.rank_zero_only):
        monkeypatch.setattr(holder, "rank", getattr(holder, "rank", 0), raising=False)

    def build(options: argparse.Namespace, args: list[str], rank: int, *changed: str):
        for name, value in slurm_env(options, rank).items():
            monkeypatch.setenv(name, value)
        on_cpu = [f"--data.data_dir={small_data}", f"--run.root={tmp_path}", *ON_CPU, *changed]
        return make_cli([*args, *on_cpu]).trainer

    return build


def test_the_docs_show_slurm_launches():
    assert {name for name, _ in LAUNCHES} == {path.name for path in DOCS}


@pytest.mark.parametrize(
    "line", [line for _, line in LAUNCHES], ids=[f"{n}-{i}" for i, (n, _) in enumerate(LAUNCHES)]
)
@pytest.mark.parametrize("rank", [0, 7, 8, 15])
def test_a_documented_launch_gives_lightning_the_world_it_asks_for(as_task, line, rank):
    options, args = launch(line)
    assert (options.nodes, options.ntasks_per_node) == (2, 8)
    trainer = as_task(options, args, rank)
    assert isinstance(trainer.strategy.cluster_environment, SLURMEnvironment)
    assert (trainer.num_nodes, trainer.num_devices, trainer.world_size) == (2, 8, 16)
    assert (trainer.global_rank, trainer.local_rank, trainer.node_rank) == (rank, rank % 8, rank // 8)
    assert trainer.is_global_zero == (rank == 0)
    # what fit runs first: Lightning's check of the SLURM job against devices and num_nodes
    assert trainer.strategy.launcher.launch(lambda: "checked") == "checked"


def test_each_task_counts_the_data_budget_over_the_whole_world(as_task):
    options, args = launch(LAUNCHES[0][1])
    with pytest.raises(BytecanaryError, match=r"\(150,000 steps x 32 x 32 x 16 devices\)"):
        as_task(options, args, 11, "--data.max_repeats=10")


def test_without_ntasks_per_node_srun_starts_a_task_per_node_and_lightning_refuses(as_task):
    options, args = launch(LAUNCHES[0][1])
    options.ntasks_per_node = None
    with pytest.raises(RuntimeError, match="Use `--ntasks-per-node=2` instead"):
        as_task(options, args, rank=1)


def test_without_num_nodes_lightning_refuses_at_the_start_of_training(as_task):
    """The trainer builds, its world size read from SLURM_NTASKS, but it counts one node of 8
    devices: the launcher stops fit before a process group would wait for ranks that never come."""
    options, args = launch(LAUNCHES[0][1])
    kept = [arg for arg in args if not arg.startswith("--trainer.num_nodes")]
    assert len(kept) == len(args) - 1
    trainer = as_task(options, kept, rank=9)
    assert (trainer.num_nodes, trainer.world_size, trainer.global_rank) == (1, 16, 9)
    with pytest.raises(ValueError, match=r"num_nodes=1.*--nodes=2"):
        trainer.strategy.launcher.launch(lambda: "checked")
