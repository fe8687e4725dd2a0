"""When a probe fires during training: its cadence over the run's planned checkpoints.

Every probe entry may say how often it runs, beside its parameters::

    - {name: level0}                                   # every checkpoint (the default)
    - {name: mcqa, cadence: {every: 4}}                # the 1st, 5th, 9th, ... checkpoint
    - {name: mcqa, cadence: {log_base: 4}}             # log-spaced in tokens: the first checkpoint
                                                       # at or past 1, 4, 16, ... steps' tokens

Cheap probes watch every checkpoint; costly ones (generated MCQA answers) can sample the
curve more thinly, densest early where validity moves fastest. The last checkpoint of the
run always fires, so every curve reaches the end. A cadence is decided from the planned
schedule alone, never from what ran before, so a restart, a catch-up of missed probes and
a second run of the same config pick the same checkpoints. A point of a token schedule is
a step count: tokens per step are fixed within a run, so "the first checkpoint at or past
4**k steps" is the first at or past that many steps' tokens.
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
