"""Where a probe runs among processes: torch.distributed ranks (each computes whole batches, rank 0
aggregates), the launch's workers that share a series of checkpoints, and each one's device.
"""

from __future__ import annotations

import os
import socket
from typing import Any

import numpy as np
import torch


def _dist() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def rank0() -> bool:
    return not _dist() or torch.distributed.get_rank() == 0


def rank_and_world() -> tuple[int, int]:
    return (torch.distributed.get_rank(), torch.distributed.get_world_size()) if _dist() else (0, 1)


def gather(payload: Any) -> list[Any]:
    """Every rank's payload, on every rank."""
    if not _dist():
        return [payload]
    gathered: list[Any] = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(gathered, payload)
    return gathered


def broadcast(value: Any) -> Any:
    """Rank 0's ``value``, on every rank."""
    if not _dist():
        return value
    box = [value]
    torch.distributed.broadcast_object_list(box, src=0)
    return box[0]


def default_worker() -> str:
    """This process's name among the workers: its host and launcher ranks where it has them
    (``torchrun``'s ``RANK``, SLURM's array task and process ids), else its host and pid."""
    ranks = [
        f"{v.lower()}{os.environ[v]}"
        for v in ("RANK", "SLURM_ARRAY_TASK_ID", "SLURM_PROCID")
        if os.environ.get(v)
    ]
    return f"{socket.gethostname()}:{'-'.join(ranks) or os.getpid()}"


def is_lead() -> bool:
    """The first process of a launch (torchrun's rank 0, srun's task 0, or a lone process):
    the one that keeps the launch's W&B run."""
    return os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")) == "0"


def worker_device(device: str | None, cuda: int) -> str:
    """The device of this worker given ``--device`` and the node's ``cuda`` GPU count: a
    worker launched by torchrun (``LOCAL_RANK``) or srun (``SLURM_LOCALID``) gets a GPU of its
    own, ``cuda:<local rank>``, not the first GPU beside its siblings; cpu without GPUs."""
    if device not in (None, "cuda"):
        return device
    if not cuda:
        return device or "cpu"
    local = os.environ.get("LOCAL_RANK", os.environ.get("SLURM_LOCALID"))
    return f"cuda:{int(local) % cuda}" if local else "cuda"


def shard_indices(n: int, batch_size: int, rank: int, world: int) -> np.ndarray:
    """Indices of the samples in this rank's batches: whole batches dealt round-robin,
    so every batch is the same in a DDP run as in a single process."""
    starts = range(rank * batch_size, n, world * batch_size)
    return np.array([i for s in starts for i in range(s, min(s + batch_size, n))], dtype=np.int64)


def merge_shards(payloads: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Every rank's per-sample arrays (rows keyed by ``index``), back in sample order."""
    merged = {k: np.concatenate([p[k] for p in payloads]) for k in payloads[0]}
    order = np.argsort(merged["index"], kind="stable")
    return {k: v[order] for k, v in merged.items()}
