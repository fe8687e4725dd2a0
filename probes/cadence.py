"""When a probe fires during training: its cadence (every checkpoint, ``{every: N}``, ``{log_base: b}``)
over the run's planned checkpoints, decided from the plan alone so a restart, a catch-up and a rerun
pick the same ones; the last checkpoint always fires (docs/training.md, "Cadences").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Cadence:
    """Which of the planned checkpoints a probe fires at."""

    every: int = 1
    """Every this many checkpoints of the schedule, counting from the first (1: all of them)."""
    log_base: float | None = None
    """Instead: the first checkpoint at or past each power of this many steps (1, b, b^2, ...)."""

    def __post_init__(self) -> None:
        if isinstance(self.every, bool) or not isinstance(self.every, int) or self.every < 1:
            raise ValueError(f"every must be an integer >= 1, got {self.every!r}")
        if self.log_base is not None:
            if (
                isinstance(self.log_base, bool)
                or not isinstance(self.log_base, int | float)
                or not math.isfinite(self.log_base)
                or self.log_base <= 1
            ):
                raise ValueError(f"log_base must be a number > 1, got {self.log_base!r}")
            if self.every != 1:
                raise ValueError("choose one of every and log_base")

    @property
    def always(self) -> bool:
        """Fires at every checkpoint (needs no schedule)."""
        return self.every == 1 and self.log_base is None

    def steps(self, schedule: Sequence[int]) -> set[int]:
        """The steps of ``schedule`` (the planned checkpoint steps) this cadence fires at."""
        planned = sorted(set(schedule))
        if not planned:
            return set()
        if self.log_base is None:
            chosen = set(planned[:: self.every])
        else:
            chosen, point, previous = set(), 1.0, 0
            for step in planned:
                while point <= previous:  # the first point past the previous checkpoint
                    point *= self.log_base
                if point <= step:
                    chosen.add(step)
                previous = step
        return chosen | {planned[-1]}

    def describe(self) -> str:
        if self.log_base is not None:
            return f"log-spaced (base {self.log_base:g})"
        return "every checkpoint" if self.every == 1 else f"every {self.every} checkpoints"
