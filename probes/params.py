"""The parameter groups probe configs are built from, and the range checks their
``__post_init__`` runs: a spec stays flat, a probe's ``Config`` inherits its fields from
these groups.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bytecanary.io import output_problem


def at_least(name: str, value: int, low: int) -> None:
    """A config check: ``ValueError`` naming the field when ``value`` < ``low``."""
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value!r}")


def within(name: str, value: float, low: float, high: float, low_open: bool = False) -> None:
    """A config check: ``ValueError`` naming the field unless ``value`` is a finite number in
    [low, high] ((low, high] with ``low_open``)."""
    ok = math.isfinite(value) and (low < value if low_open else low <= value) and value <= high
    if not ok:
        bracket = "(" if low_open else "["
        raise ValueError(f"{name} must be a number in {bracket}{low:g}, {high:g}], got {value!r}")


@dataclass(frozen=True)
class Checked:
    """Base of the parameter groups: each checks its own fields in ``__post_init__`` and then
    calls the next one's, so a config built from several groups checks every field."""

    def __post_init__(self) -> None:
        """Nothing left to check."""


@dataclass(frozen=True)
class Sizes(Checked):
    """How much of its eval set a probe reads, in which batches, drawn with which seed."""

    trial: bool = False
    """A quick look: a fixed, seeded subset of each eval set; False: all of it (the measurement)."""
    batch_size: int = 256
    """Samples per forward pass; metrics depend on it (sampling draws, float rounding)."""
    seed: int = 0
    """The seed of every random draw: the trial subset, sampled tokens, bootstrap resamples."""

    def __post_init__(self) -> None:
        at_least("batch_size", self.batch_size, 1)
        super().__post_init__()


@dataclass(frozen=True)
class GenerationSettings(Checked):
    """How a probe generates after each prompt."""

    max_new_tokens: int = 5
    """Tokens generated after each prompt (at most)."""
    temperature: float = 0.0
    """Sampling temperature; 0 is greedy."""
    top_k: int = 0
    """Sample among the k likeliest tokens only; 0: all of them."""

    def __post_init__(self) -> None:
        at_least("max_new_tokens", self.max_new_tokens, 1)
        within("temperature", self.temperature, 0, math.inf)
        at_least("top_k", self.top_k, 0)
        super().__post_init__()


@dataclass(frozen=True)
class PerSample(Checked):
    """Where a probe writes one line per sample (not in the fingerprint: it changes no metric)."""

    records: str | None = None
    """Append one JSON line per sample to this file."""

    def __post_init__(self) -> None:
        problem = output_problem(self.records) if self.records is not None else None
        if problem:
            raise ValueError(f"records: {problem}")
        super().__post_init__()
