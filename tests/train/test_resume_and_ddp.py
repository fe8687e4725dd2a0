"""SIGKILL mid-run + resume equals an uninterrupted run bit for bit, its old full states
deleted behind it; 2-process CPU DDP."""

import os
import signal
import subprocess
import time

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from bytecanary.checkpoints import load_checkpoint
from bytecanary.train.cli import main
from bytecanary.train.datamodule import ShardBatches
from bytecanary.train.loggers import read_metrics

from .. import warm
from ..conftest import DDP_2_CPU, run_train, train_cmd

STEPS = 60


def _weights(run) -> dict[str, torch.Tensor]:
    return load_checkpoint(run / "checkpoints" / "last.ckpt")["state_dict"]


def _timeless(rows: list[dict]) -> list[dict]:
    """Rows without the perf/ ones: wall-clock throughput differs between any two runs."""
    return [r for r in rows if not any(k.startswith("perf/") for k in r)]


@pytest.mark.slow
def test_killed_run_resumes_exactly(micro, tmp_path):
    args = [
        "--trainer.max_steps",
        str(STEPS),
        "--run.checkpoint_every",
        "10",
        "--trainer.val_check_interval",
        "20",
        "--run.keep_state_every",
        "20",
    ]
    assert main(["--config", str(micro), "--run.name", "whole", *args]) == 0  # the reference
    threads = {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads())}  # as the reference's

    killed = tmp_path / "runs" / "killed"
    proc = warm.Popen(
        train_cmd(micro, "--run.name", "killed", *args),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=threads,
    )
    while not (killed / "checkpoints" / "step0000010.ckpt").exists() and proc.poll() is None:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (killed / "checkpoints" / f"step{STEPS:07d}.ckpt").exists(), "killed too late to test"
    run_train(micro, "--run.name", "killed", *args, "--run.resume", "true", env=threads)

    whole, resumed = _weights(tmp_path / "runs" / "whole"), _weights(killed)
    assert whole.keys() == resumed.keys()
    for key in whole:
        assert torch.equal(whole[key], resumed[key]), key
    layout = sorted(p.name for p in (killed / "checkpoints").iterdir())
    assert layout == sorted(p.name for p in (tmp_path / "runs" / "whole" / "checkpoints").iterdir())
    weights = [f"step{s:07d}.safetensors" for s in range(10, STEPS + 1, 10)]
    assert layout == sorted(
        [*weights, "step0000020.ckpt", "step0000040.ckpt", "step0000060.ckpt", "last.ckpt"]
    )
    for name in weights:  # every probe checkpoint, also those written before the kill
        a, b = (load_file(run / "checkpoints" / name) for run in (tmp_path / "runs" / "whole", killed))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
    rows_whole = _timeless(read_metrics(tmp_path / "runs" / "whole" / "metrics.jsonl"))
    rows_resumed = _timeless(read_metrics(killed / "metrics.jsonl"))
    train_steps = [r["step"] for r in rows_resumed if "train/loss" in r]
    assert train_steps == list(range(2, STEPS + 1, 2))  # none missing, none twice
    assert rows_resumed == rows_whole  # same losses, same tokens_seen, same order


def test_ranks_read_disjoint_samples_that_tile_a_single_process_run():
    rng = np.random.default_rng(0)
    shards = [rng.integers(0, 1000, 5000).astype(np.uint16) for _ in range(3)]
    weights = [0.2, 0.3, 0.5]
    single = ShardBatches(shards, weights, seq_len=16, batch_size=8, seed=7)
    rank0 = ShardBatches(shards, weights, seq_len=16, batch_size=4, seed=7, share=(0, 2))
    rank1 = ShardBatches(shards, weights, seq_len=16, batch_size=4, seed=7, share=(1, 2))
    for k in range(5):
        both = torch.cat([rank0.batch(k)["input_ids"], rank1.batch(k)["input_ids"]])
        assert torch.equal(both, single.batch(k)["input_ids"])
    resumed = ShardBatches(shards, weights, seq_len=16, batch_size=8, seed=7, start=3)
    assert torch.equal(next(iter(resumed))["input_ids"], single.batch(3)["input_ids"])
    langs = np.concatenate([single.batch(k)["lang"].numpy() for k in range(400)])
    assert np.allclose(np.bincount(langs, minlength=3) / len(langs), weights, atol=0.02)


@pytest.mark.slow
def test_two_process_cpu_ddp_counts_tokens_of_both_ranks(micro, tmp_path):
    run_train(micro, "--run.name", "ddp", "--trainer.max_steps", "6", *DDP_2_CPU)
    rows = read_metrics(tmp_path / "runs" / "ddp" / "metrics.jsonl")
    last = [r for r in rows if "train/loss" in r][-1]
    assert last["step"] == 6
    assert last["tokens_seen"] == 6 * 8 * 32 * 2  # steps x batch x seq_len x ranks
    val = [r for r in rows if "val/ppl" in r]
    assert val and val[-1]["tokens_seen"] == 4 * 8 * 32 * 2
