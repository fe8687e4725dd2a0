"""The probe tables that ``bytecanary probe`` and ``bytecanary demo`` print: one row per probed
checkpoint, the columns its probe's display declares, then the lines its report sections add
(``bytecanary.report.sections``). Rows come from ``probes.jsonl``: what was recorded, whoever probed.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from bytecanary import display
from bytecanary.io import warn
from bytecanary.records import Record, merge, read
from bytecanary.report import sections


def _records(out: Path) -> list[Record]:
    """The records of ``out``, one per (checkpoint, probe) as ``bytecanary.records.merge`` merges them;
    none yet when nothing was probed."""
    return merge(read(out, warn), warn)


def summary(out: Path) -> str:
    """Per probe, one row per checkpoint: step, tokens, headline metrics, then by language;
    under the table, what its sections add."""
    by_probe: dict[str, dict[str, Record]] = {}
    for r in _records(out):
        by_probe.setdefault(r.probe, {})[r.identity[0]] = r
    blocks = []
    for probe, records in by_probe.items():
        seen = {k for r in records.values() for k in r.metrics}
        title, cols = display.columns(probe, seen)
        lines = [title, f"{'checkpoint':<28}{'step':>8}{'tokens':>12}" + "".join(f"{n:>11}" for n, _ in cols)]
        for r in in_step_order(records):
            m = display.shown(probe, r.metrics)
            lines.append(row_head(r) + cells([m.get(k) for _, k in cols]))
        for section in sections.of_probe(probe):
            lines += section.summary(records) if section.summary is not None else []
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def cells(values: list[float | None]) -> str:
    """``-`` for absent data, ``n/a`` for a statistic the data cannot support (NaN)."""
    return "".join(
        f"{'-' if v is None else 'n/a' if math.isnan(v) else format(v, '.3f'):>11}" for v in values
    )


def in_step_order(records: dict[str, Record]) -> list[Record]:
    return sorted(records.values(), key=lambda r: (r.step is None, r.step or 0))


def short_name(record: Record) -> str:
    """A checkpoint's short name: its file or folder, with its ``@revision`` (a hub series'
    rows differ by that alone)."""
    path, at, revision = record.checkpoint.partition("@")
    return f"{Path(path).name}{at}{revision}"[-28:]


def _tokens(tokens: int | None) -> str:
    """Tokens seen in the column's 11 characters: in billions once the digits would not fit."""
    if tokens is None:
        return "-"
    return f"{tokens:,}" if tokens < 10**9 else f"{tokens / 1e9:,.3f}B"


def row_head(record: Record) -> str:
    """checkpoint, step, tokens seen: the first columns of every row."""
    tokens = _tokens(record.tokens_seen)
    step = record.step if record.step is not None else "-"
    return f"{short_name(record):<28}{step:>8}{tokens:>12}"


def add_series(out: Path, wandb_run: Any) -> None:
    """``bytecanary probe``'s finish hook: each probe's statistics across the checkpoints of
    ``out`` (its sections' ``series``, where it has more than one) into the W&B run's summary."""
    by_probe: dict[str, list[Record]] = {}
    for r in _records(out):
        by_probe.setdefault(r.probe, []).append(r)
    for probe, records in by_probe.items():
        for section in sections.of_probe(probe):
            if section.series is not None and len(records) > 1:
                wandb_run.summary.update(section.series(records, {}))
