"""The probe tables that ``bytecanary probe`` and ``bytecanary demo`` print.

One row per probed checkpoint: step, tokens seen, then the columns of the table the probe
declares (``bytecanary.display``: greedy validity beside ``p_valid``, the expected validity
that does not flip with the argmax, then one column per language; MCQA's means over each task
group), or its aggregate keys. Under the table, Level 0 adds V_partial by frequency tier at
the last checkpoint; MCQA shows each benchmark task (a ``datasets`` task) on rows of its own,
and the cross-checkpoint statistics, which ``add_mcqa_series`` also puts into the W&B run's
summary. Rows come from ``probes.jsonl``, so the tables show what was recorded, whoever probed.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from bytecanary import display, keys
from bytecanary.data.evalsets import TIERS
from bytecanary.io import warn
from bytecanary.records import Record, merge, read
from bytecanary.report import mcqa_trends
from bytecanary.report.mcqa_trends import CLOZE, DASHED, MERGED, SEPARATE

# a benchmark task's row: (column, protocol or None for the task's own, metric)
BENCHMARK_COLUMNS = [
    ("sep", SEPARATE, "acc"),
    ("mrg", MERGED, "acc"),
    ("cloze", CLOZE, "acc"),
    ("cloze norm", CLOZE, "acc_norm"),
    ("M&D", DASHED, "acc"),
    ("FSI", None, "fsi"),
]


def _records(out: Path) -> list[Record]:
    """The records of ``out``, one per (checkpoint, probe) as ``bytecanary.records.merge`` merges them;
    none yet when nothing was probed."""
    return merge(read(out, warn), warn)


def summary(out: Path) -> str:
    """Per probe, one row per checkpoint: step, tokens, headline metrics, then by language;
    for MCQA, the cross-checkpoint statistics under the table."""
    by_probe: dict[str, dict[str, Record]] = {}
    for r in _records(out):
        by_probe.setdefault(r.probe, {})[r.identity[0]] = r
    blocks = []
    for probe, records in by_probe.items():
        seen = {k for r in records.values() for k in r.metrics}
        title, cols = display.columns(probe, seen)
        lines = [title, f"{'checkpoint':<28}{'step':>8}{'tokens':>12}" + "".join(f"{n:>11}" for n, _ in cols)]
        for r in _in_step_order(records):
            m = display.shown(probe, r.metrics)
            lines.append(_row_head(r) + _cells([m.get(k) for _, k in cols]))
        if probe == "mcqa" and len(records) > 1:
            lines.append(_mcqa_series_line(list(records.values())))
        if probe == "mcqa":
            lines += _benchmark_lines(records)
        if probe == "level0":
            lines += _tier_lines(max(records.values(), key=lambda r: r.step or 0))
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _cells(values: list[float | None]) -> str:
    """``-`` for absent data, ``n/a`` for a statistic the data cannot support (NaN)."""
    return "".join(
        f"{'-' if v is None else 'n/a' if math.isnan(v) else format(v, '.3f'):>11}" for v in values
    )


def _in_step_order(records: dict[str, Record]) -> list[Record]:
    return sorted(records.values(), key=lambda r: (r.step is None, r.step or 0))


def _name(record: Record) -> str:
    """A checkpoint's short name: its file or folder, with its ``@revision`` (a hub series'
    rows differ by that alone)."""
    path, at, revision = record.checkpoint.partition("@")
    return f"{Path(path).name}{at}{revision}"[-28:]


def _tokens(tokens: int | None) -> str:
    """Tokens seen in the column's 11 characters: in billions once the digits would not fit."""
    if tokens is None:
        return "-"
    return f"{tokens:,}" if tokens < 10**9 else f"{tokens / 1e9:,.3f}B"


def _row_head(record: Record) -> str:
    """checkpoint, step, tokens seen: the first columns of every row."""
    tokens = _tokens(record.tokens_seen)
    step = record.step if record.step is not None else "-"
    return f"{_name(record):<28}{step:>8}{tokens:>12}"


def _tier_lines(record: Record) -> list[str]:
    """V_partial by language and frequency tier at one checkpoint (the last probed): the
    tiers of our eval sets when it has any, then any others a file names (a published file's)."""
    m = record.metrics
    parsed = [p for k in m if (p := keys.read(k)) is not None and p.probe == "level0" and len(p.fields) == 2]
    found = {p.fields[1] for p in parsed} - {"all"}
    tiers = [*(TIERS if found & set(TIERS) else ()), *sorted(found - set(TIERS))]
    at = f"step {record.step}" if record.step is not None else _name(record)
    lines = [f"{'partial by tier, ' + at:<28}" + "".join(f"{t:>11}" for t in tiers)]
    lines += [
        f"{lang:<28}" + _cells([m.get(keys.level0(lang, t)) for t in tiers])
        for lang in display.languages_in(m, "level0")
    ]
    return lines


def _benchmark_lines(records: dict[str, Record]) -> list[str]:
    """One row per checkpoint and benchmark task (a ``datasets`` task, which no task group
    averages): its accuracy under each protocol, and its FSI."""
    rows = []
    for r in _in_step_order(records):
        for task in keys.mcqa_tasks(r.metrics):
            if keys.task_group(task) == task:
                cells = [r.metrics.get(mcqa_trends.mcqa_key(task, m, p)) for _, p, m in BENCHMARK_COLUMNS]
                rows.append(_row_head(r) + f"{task[-16:]:>17}" + _cells(cells))
    if not rows:
        return []
    head = f"{'checkpoint':<28}{'step':>8}{'tokens':>12}{'task':>17}" + "".join(
        f"{n:>11}" for n, _, _ in BENCHMARK_COLUMNS
    )
    return ["", "MCQA benchmark tasks (accuracy; cloze norm: per character)", head, *rows]


def _mcqa_series_line(records: list[Record]) -> str:
    """Kendall tau of the checkpoints' rankings under the two space strategies, and how
    much of wrapper accuracy parsability explains (Pearson r, fixed-effects beta); ``n/a``
    with the reason where the data cannot support a statistic."""
    notes: dict[str, str] = {}
    s = mcqa_trends.mcqa_series(records, notes)
    taus = {t: k for t in keys.mcqa_tasks(s) if (k := keys.mcqa_task(t, "kendall_tau_sep_merged")) in s}
    tau = "  ".join(f"{t} {s[k]:+.2f}" for t, k in taus.items() if k not in notes)
    r, beta, se = (keys.mcqa_task("all", k) for k in mcqa_trends.PARSABILITY_KEYS)
    if r in notes and notes[r] == notes.get(beta):
        fit = f"n/a: {notes[r]}"
    else:
        pearson = f"n/a ({notes[r]})" if r in notes else f"{s[r]:.3f}"
        slope = f"n/a ({notes[beta]})" if beta in notes else f"{s[beta]:.3f} +- {s[se]:.3f}"
        fit = f"Pearson r {pearson}, beta {slope}"
    return (
        f"across checkpoints: Kendall tau (separate vs merged ranking) {tau or _none(taus, notes)}\n"
        f"accuracy vs parsability over wrapper cells: {fit}"
    )


def _none(taus: dict[str, str], notes: dict[str, str]) -> str:
    """``n/a`` and why, each reason once with the tasks it holds for."""
    tasks_by_reason: dict[str, list[str]] = {}
    for task, key in taus.items():
        tasks_by_reason.setdefault(notes[key], []).append(task)
    reasons = "; ".join(f"{why} ({', '.join(tasks)})" for why, tasks in tasks_by_reason.items())
    return f"n/a: {reasons}" if reasons else "n/a: no task has letter accuracies"


def add_mcqa_series(out: Path, wandb_run: Any) -> None:
    """``bytecanary probe``'s finish hook: the cross-checkpoint MCQA statistics of ``out``
    into the W&B run's summary, beside the per-checkpoint curves."""
    mcqa = [r for r in _records(out) if r.probe == "mcqa"]
    if len(mcqa) > 1:
        wandb_run.summary.update(mcqa_trends.mcqa_series(mcqa))
