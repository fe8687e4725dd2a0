"""Claims: which worker computes which (checkpoint, probe) pair, so no pair is computed twice.

Several workers may probe one series into one records file: the ranks of a ``torchrun`` or
``srun`` launch, SLURM array jobs, a second launch while the first runs, machines on a shared
filesystem. Before computing a pair a worker claims it in ``<records>.claims`` (JSON lines
appended under ``flock``, as the records are); a claim holds for a lease that the worker
renews while it computes. A pair another worker holds is skipped; a claim whose lease ran out
(its worker was killed) is taken over; a worker may take back its own claims at once, so a
killed worker restarted under the same name goes on where it stopped.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bytecanary.errors import BytecanaryError
from bytecanary.io import named
from bytecanary.records import Identity

DEFAULT_LEASE = 120.0  # seconds a claim holds without renewal


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


class Claims:
    """The claims file beside the records ``out``, as seen by ``worker``."""

    def __init__(self, out: str | Path, worker: str, lease: float = DEFAULT_LEASE) -> None:
        if not lease > 0:
            raise BytecanaryError(f"lease: must be a positive number of seconds, got {lease!r}")
        self.path = Path(f"{out}.claims")
        self.worker, self.lease = worker, lease

    def _update(self, pairs: list[Identity], take: bool) -> list[bool]:
        """Under the lock: with ``take``, claim each pair unless another worker holds it now;
        else release them (an expiry of 0). Returns, per pair, whether this worker holds it."""
        keys = [json.dumps(list(pair)) for pair in pairs]
        try:
            with open(self.path, "a+b") as f:
                fcntl.flock(f, fcntl.LOCK_EX)
                f.seek(0)
                holders = self._holders(f.read())
                now, held, lines = time.time(), [], []
                for key in keys:
                    worker, until = holders.get(key, (self.worker, 0.0))
                    mine = take and (worker == self.worker or until <= now)
                    held.append(mine)
                    if mine or (not take and worker == self.worker):
                        expiry = now + self.lease if take else 0.0
                        lines.append(json.dumps({"pair": key, "worker": self.worker, "until": expiry}) + "\n")
                f.write("".join(lines).encode())
                f.flush()
        except OSError as err:
            raise named(err, self.path) from err
        return held

    @staticmethod
    def _holders(data: bytes) -> dict[str, tuple[str, float]]:
        """(worker, expiry) of each pair's newest claim line; torn lines are skipped."""
        holders = {}
        for line in data.splitlines():
            try:
                row = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
            if isinstance(row, dict) and isinstance(row.get("pair"), str):
                holders[row["pair"]] = (str(row.get("worker")), float(row.get("until", 0.0)))
        return holders

    def claim(self, pairs: list[Identity]) -> list[bool]:
        """Claim each pair; False where another worker holds it."""
        return self._update(pairs, take=True)

    @contextmanager
    def holding(self, pairs: list[Identity]) -> Iterator[None]:
        """Renew the claims on ``pairs`` every third of a lease while the body runs, and
        release them after (the records then say what happened)."""
        stop = threading.Event()

        def renew() -> None:
            while not stop.wait(self.lease / 3):
                self._update(pairs, take=True)

        beat = threading.Thread(target=renew, daemon=True)
        beat.start()
        try:
            yield
        finally:
            stop.set()
            beat.join()
            self._update(pairs, take=False)
