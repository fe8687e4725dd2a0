"""Report sections a probe declares (``Display.sections``): hooks the report room calls to add
a probe's tables, figure, W&B numbers and terminal lines, in a stable order, naming no probe."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bytecanary import display
from bytecanary.errors import BytecanaryError
from bytecanary.records import Record
from bytecanary.report.analysis import Checkpoint, Curve
from bytecanary.report.axis import Axis


@dataclass(frozen=True)
class Inputs:
    """What a section reads when the report is written: the run's metric rows, its checkpoints,
    the axis, and the cross-checkpoint series of every section (``Section.series``)."""

    metrics: list[dict[str, Any]]
    cps: list[Checkpoint]
    axis: Axis
    series: dict[str, float]


Panel = tuple[str, Callable[[list[Checkpoint]], Curve]]


@dataclass(frozen=True)
class Section:
    """A part of the report a probe owns; every hook is optional."""

    figure: str | None = None
    """The file stem of its figure (``<figure>.png``), drawn by ``draw``."""
    figure_note: str = ""
    """What its figure shows, in ``report.md``'s list of figures."""
    draw: Callable[[Inputs, Path], None] | None = None
    tables: Callable[[Inputs], list[Any]] | None = None
    """Its tables (``bytecanary.report.tables.Table``) in ``report.md`` and W&B."""
    scalars: Callable[[Inputs], dict[str, float]] | None = None
    """Numbers for the W&B run's summary."""
    series: Callable[[list[Record], dict[str, str]], dict[str, float]] | None = None
    """Statistics across checkpoints as flat keys (NaN where the data cannot support one, the
    reason in the notes): in the report, and in ``bytecanary probe``'s W&B summary."""
    summary: Callable[[dict[str, Record]], list[str]] | None = None
    """Lines under its probe's table in the printed summary (its records by checkpoint)."""
    lines: Callable[[list[Checkpoint], Axis], list[str]] | None = None
    """Lines under the ratios in the terminal."""
    compare_column: tuple[str, Callable[[list[Checkpoint], Axis], str | None]] | None = None
    """A column of the comparison of runs: its label and its cell of one run."""
    compare_panel: Callable[[Sequence[list[Checkpoint]]], Panel | None] | None = None
    """A panel of the comparison of runs, given every run's checkpoints (None: no panel)."""


def load(spec: str) -> Section:
    """The section an import string ``module:attribute`` names."""
    module, _, name = spec.partition(":")
    try:
        section = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as err:
        raise BytecanaryError(f"report section {spec!r}: {type(err).__name__}: {err}") from err
    if not isinstance(section, Section):
        raise BytecanaryError(f"report section {spec!r}: not a bytecanary.report.sections.Section")
    return section


def of_probe(probe: str) -> list[Section]:
    """The sections ``probe``'s display declares, in its order."""
    return [load(spec) for spec in display.display_of(probe).sections]


def every() -> list[Section]:
    """Every installed probe's sections, by probe name, each in its display's order."""
    return [s for probe in display.declared() for s in of_probe(probe)]


def figures() -> list[str]:
    """The report's figures: the convergence figure, then each section's."""
    return ["convergence", *(s.figure for s in every() if s.figure)]


def series(records: list[Record], notes: dict[str, str]) -> dict[str, float]:
    """Every section's statistics across checkpoints of ``records``."""
    out: dict[str, float] = {}
    for section in every():
        if section.series is not None:
            out |= section.series(records, notes)
    return out
