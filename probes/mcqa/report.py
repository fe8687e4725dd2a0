"""The MCQA report section: accuracy of each protocol and FSI/PSI over training, per task group
(``mcqa.png``, tables), the cross-checkpoint statistics (``trends_report``), the benchmark rows
of the printed summary, and the MCQA panel of a comparison of runs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bytecanary.keys import probe_of
from bytecanary.probes.mcqa import keys
from bytecanary.probes.mcqa import trends_report as trends
from bytecanary.probes.mcqa.keys import CLOZE, DASHED, MERGED, SEPARATE
from bytecanary.records import Record
from bytecanary.report import figures
from bytecanary.report.analysis import Checkpoint, Curve
from bytecanary.report.sections import Inputs, Panel, Section
from bytecanary.report.summary import cells, in_step_order, row_head
from bytecanary.report.tables import TOKENS, Column, Table

PROTOCOL_STYLES = {  # protocols drawn per task group -> (color, line style)
    SEPARATE: ("tab:blue", "-"),
    MERGED: ("tab:blue", "--"),
    CLOZE: ("tab:green", "-"),
    DASHED: ("tab:purple", "-"),
}
NONSENSE_CHANCE = 0.25
_TASK_COLUMNS = [  # (column, protocol or None for the task's own metric, metric, format)
    ("letter sep acc", SEPARATE, "acc", ".3f"),
    ("letter merged acc", MERGED, "acc", ".3f"),
    ("cloze acc", CLOZE, "acc", ".3f"),
    ("cloze acc_norm", CLOZE, "acc_norm", ".3f"),
    ("M&D acc", DASHED, "acc", ".3f"),
    ("McNemar p", None, "mcnemar_p", ".3g"),
    *((name, None, name, ".3f") for name in ("fsi", "fsi_lo", "fsi_hi", "psi", "psi_lo", "psi_hi", "nfsi")),
    ("n", None, "n", ",.0f"),
]
# a benchmark task's row in the printed summary: (column, protocol or None for the task's own, metric)
BENCHMARK_COLUMNS = [
    ("sep", SEPARATE, "acc"),
    ("mrg", MERGED, "acc"),
    ("cloze", CLOZE, "acc"),
    ("cloze norm", CLOZE, "acc_norm"),
    ("M&D", DASHED, "acc"),
    ("FSI", None, "fsi"),
]
COMPARED = (CLOZE, SEPARATE, MERGED, DASHED)  # in a comparison, the first every run has is drawn


def _group_table(
    name: str,
    title: str,
    cps: list[Checkpoint],
    groups: dict[str, list[str]],
    metrics: list[tuple[str, str, str | None]],
) -> Table:
    """Per checkpoint, the mean over each task group of each (label, metric, protocol) in
    ``metrics``, as plotted; columns no group has are left out."""
    columns, curves = [], []
    for group, tasks in groups.items():
        for label, metric, protocol in metrics:
            curve = trends.group_mean_curve(cps, tasks, metric, protocol)
            columns.append(Column(f"{group} {label}", ".3f", curve.key))
            curves.append(curve)
    tokens = sorted({x for c in curves for x in c.tokens})
    steps = {c.tokens_seen: c.step for c in cps}
    rows = [[int(x), steps.get(int(x)), *(_value_at(c, x) for c in curves)] for x in tokens]
    table = Table(name, title, [Column(TOKENS, ","), Column("step", ""), *columns], rows)
    return table.without_empty_columns(keep=2)


def _value_at(curve: Curve, x: float) -> float | None:
    return curve.values[curve.tokens.index(x)] if x in curve.tokens else None


def tables(inputs: Inputs) -> list[Table]:
    """Accuracy and FSI/PSI per task group, every task at the last checkpoint, the series."""
    cps, axis = inputs.cps, inputs.axis
    groups = trends.task_groups(cps)
    if not groups:
        return []
    accuracy = [(keys.PROTOCOL_LABELS[p], "acc", p) for p in PROTOCOL_STYLES]
    sensitivity = [("FSI", "fsi", None), ("PSI", "psi", None)]
    last = next(c for c in reversed(cps) if any(probe_of(k) == keys.MCQA for k in c.metrics))
    task_rows = [
        [t, *(last.value(trends.mcqa_key(t, metric, protocol)) for _, protocol, metric, _ in _TASK_COLUMNS)]
        for t in trends.mcqa_tasks([last])
    ]
    task_columns = [
        Column(label, fmt, trends.mcqa_key("<task>", metric, protocol))
        for label, protocol, metric, fmt in _TASK_COLUMNS
    ]
    at = axis.at(last.tokens_seen) if last.tokens_seen is not None else last.key
    by_group = [
        _group_table("mcqa_accuracy", "MCQA accuracy, mean over each task group", cps, groups, accuracy),
        _group_table("mcqa_sensitivity", "FSI and PSI, mean over each task group", cps, groups, sensitivity),
    ]
    mine = {k: v for k, v in inputs.series.items() if probe_of(k) == keys.MCQA}
    return [
        *(t for t in by_group if len(t.columns) > 2),
        Table(
            "mcqa_tasks",
            f"MCQA by task at the last probed checkpoint ({at})",
            [Column("task", ""), *task_columns],
            task_rows,
        ).without_empty_columns(keep=1),
        Table(
            "mcqa_series",
            "MCQA across checkpoints",
            [Column("statistic", ""), Column("value", ".4g")],
            [[k, v] for k, v in mine.items()],
        ),
    ]


def _accuracy_panel(ax: Any, cps: Sequence[Checkpoint], group: str, tasks: list[str]) -> None:
    for protocol, (color, style) in PROTOCOL_STYLES.items():
        curve = trends.group_mean_curve(cps, tasks, "acc", protocol)
        figures.plot_curve(ax, curve, color=color, linestyle=style, label=keys.PROTOCOL_LABELS[protocol])
    if group == "nonsenseqa":
        ax.axhline(NONSENSE_CHANCE, color="gray", linewidth=1, label="chance (0.25)")
    title = keys.TASK_GROUPS.get(group, group)
    langs = ", ".join(t.removeprefix(f"{group}_") for t in tasks)
    ax.set_title(f"{title}\nmean of {langs}" if len(tasks) > 1 else title)
    ax.set_ylabel("accuracy (0-1)")
    ax.set_ylim(-0.02, 1.02)


def _sensitivity_panel(ax: Any, cps: Sequence[Checkpoint], groups: dict[str, list[str]]) -> None:
    colors = iter(("tab:blue", "tab:red", "tab:green", "tab:purple", "tab:brown", "tab:pink"))
    for group, tasks in groups.items():
        color = next(colors, None)
        for metric, style in (("fsi", "-"), ("psi", "--")):
            curve = trends.group_mean_curve(cps, tasks, metric)
            figures.plot_curve(ax, curve, color=color, linestyle=style, label=f"{metric.upper()} {group}")
    if ax.lines:
        ax.set_ylim(bottom=0)
    else:
        figures.say_empty(ax, "no FSI/PSI (wrapper protocols)")
    ax.set_title("format (FSI) and parsability (PSI) sensitivity")
    ax.set_ylabel("max - min over wrappers")


def draw(inputs: Inputs, path: Path) -> None:
    """Accuracy of each protocol over training per task group (NonsenseQA with its chance
    line), and FSI/PSI."""
    import matplotlib

    cps = inputs.cps
    groups = trends.task_groups(cps)
    with matplotlib.rc_context(figures.STYLE):
        if not groups:
            fig, axes = figures.new_figure(1, 1, (8, 4))
            axes[0, 0].set_axis_off()
            figures.say_empty(axes[0, 0], "no MCQA probe records (probes.jsonl)")
            figures.save(fig, path)
            return
        n = len(groups) + 1
        ncols = min(n, 3)
        nrows = -(-n // ncols)
        fig, axes = figures.new_figure(nrows, ncols, (5.2 * ncols, 4.3 * nrows), sharex=True)
        panels = list(axes.ravel())
        for ax, (group, tasks) in zip(panels, groups.items(), strict=False):
            _accuracy_panel(ax, cps, group, tasks)
        _sensitivity_panel(panels[len(groups)], cps, groups)
        for ax in panels[n:]:
            ax.set_visible(False)
        for ax in panels[:n]:
            figures.log_x(ax)
            if ax.lines:
                ax.legend(loc="best")
            ax.grid(True, alpha=0.3)
            ax.set_xlabel(figures.x_label(inputs.axis))
        fig.suptitle("MCQA over training")
        figures.save(fig, path)


def summary_lines(records: dict[str, Record]) -> list[str]:
    """Under the MCQA table: the cross-checkpoint statistics (more than one checkpoint), then
    one row per checkpoint and benchmark task (a ``datasets`` task, which no task group
    averages): its accuracy under each protocol, and its FSI."""
    lines = [_series_line(list(records.values()))] if len(records) > 1 else []
    rows = []
    for r in in_step_order(records):
        for task in keys.tasks(r.metrics):
            if keys.task_group(task) == task:
                values = [r.metrics.get(trends.mcqa_key(task, m, p)) for _, p, m in BENCHMARK_COLUMNS]
                rows.append(row_head(r) + f"{task[-16:]:>17}" + cells(values))
    if not rows:
        return lines
    head = f"{'checkpoint':<28}{'step':>8}{'tokens':>12}{'task':>17}" + "".join(
        f"{n:>11}" for n, _, _ in BENCHMARK_COLUMNS
    )
    return [*lines, "", "MCQA benchmark tasks (accuracy; cloze norm: per character)", head, *rows]


def _series_line(records: list[Record]) -> str:
    """Kendall tau of the checkpoints' rankings under the two space strategies, and how
    much of wrapper accuracy parsability explains (Pearson r, fixed-effects beta); ``n/a``
    with the reason where the data cannot support a statistic."""
    notes: dict[str, str] = {}
    s = trends.mcqa_series(records, notes)
    taus = {t: k for t in keys.tasks(s) if (k := keys.mcqa_task(t, "kendall_tau_sep_merged")) in s}
    tau = "  ".join(f"{t} {s[k]:+.2f}" for t, k in taus.items() if k not in notes)
    r, beta, se = (keys.mcqa_task("all", k) for k in trends.PARSABILITY_KEYS)
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


def _accuracy(cps: list[Checkpoint], protocol: str) -> Curve:
    return trends.group_mean_curve(cps, trends.mcqa_tasks(cps), "acc", protocol)


def compare_panel(runs: Sequence[list[Checkpoint]]) -> Panel | None:
    """Accuracy, mean over tasks, of the first protocol of ``COMPARED`` every run has."""
    for protocol in COMPARED:
        if all(_accuracy(cps, protocol).tokens for cps in runs):
            title = f"MCQA {keys.PROTOCOL_LABELS[protocol]} accuracy, mean over tasks"
            return title, lambda cps, protocol=protocol: _accuracy(cps, protocol)
    return None


MCQA_SECTION = Section(
    figure="mcqa",
    figure_note="MCQA protocols, FSI/PSI",
    draw=draw,
    tables=tables,
    series=trends.series,
    summary=summary_lines,
    compare_panel=compare_panel,
)
