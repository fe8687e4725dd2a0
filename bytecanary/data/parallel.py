"""How ``bytecanary prepare``'s parallel stages run (a light module: the CLI reads its fields
as flags without importing the engine)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from bytecanary.errors import BytecanaryError


@dataclass
class Parallel:
    """How the corpus and shard stages run: worker processes here, or a SLURM job array.

    Attributes:
        workers: worker processes on this machine (0: one per core)
        slurm_partition: submit those stages to this SLURM partition as job arrays instead; rerun the same
            command when a job has finished
        slurm_time: time limit of each array task
        slurm_cpus: CPUs per array task
        slurm_mem_gb: memory per CPU, GB
    """

    workers: int = 0
    slurm_partition: str | None = None
    slurm_time: str = "4:00:00"
    slurm_cpus: int = 2
    slurm_mem_gb: int = 2

    def processes(self) -> int:
        """Worker processes on this machine."""
        if self.workers < 0:
            raise BytecanaryError(f"--workers: must be >= 0, got {self.workers}")
        return self.workers or os.cpu_count() or 1
