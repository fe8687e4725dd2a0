"""The Level 0 report section: validity by frequency tier, and the paper's tier gap, common minus
rare characters with the 95% CI the probe drew over characters (arXiv:2606.14122 reports 96.21% vs
95.26% structural validity; ``utf8_results.tier_gaps``). Absent keys are absent data."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bytecanary import display, keys, stats
from bytecanary.data.evalsets import TIERS
from bytecanary.data.languages import LANGUAGES
from bytecanary.probes.utf8_keys import LEVEL0, level0, tier_gap
from bytecanary.records import Record
from bytecanary.report import analysis, figures
from bytecanary.report.analysis import Checkpoint
from bytecanary.report.axis import TOKENS_AXIS, Axis
from bytecanary.report.sections import Inputs, Section
from bytecanary.report.summary import cells, short_name
from bytecanary.report.tables import TOKENS, Column, Table, checkpoint_table

GAP_METRICS = {"partial": "V partial", "strict": "V strict", "p_valid": "p_valid"}
GAP_GROUPS = ("all", *LANGUAGES)
TIER_COLORS = dict(zip(TIERS, ("tab:blue", "tab:green", "tab:orange", "tab:red", "tab:purple"), strict=True))


def gap(cp: Checkpoint, lang: str, metric: str = "partial") -> stats.Gap | None:
    """Common minus rare ``metric`` of ``lang`` at ``cp`` with its CI; None where the probe
    recorded none (a language without both tiers, or records from before the gap)."""
    value, lo, hi = (cp.value(tier_gap(lang, metric, bound)) for bound in ("", "_lo", "_hi"))
    return None if value is None or lo is None or hi is None else stats.Gap(value, lo, hi)


def text(g: stats.Gap | None) -> str:
    return "-" if g is None else f"{g.value:+.3f} ({g.lo:+.3f} to {g.hi:+.3f})"


def last_with_gap(cps: Sequence[Checkpoint]) -> Checkpoint | None:
    """The last checkpoint whose records hold a tier gap."""
    return next((c for c in reversed(cps) if gap(c, "all") is not None), None)


def groups(cps: Sequence[Checkpoint]) -> list[str]:
    """``all`` and the languages some checkpoint has a gap for, in the report's order."""
    return [g for g in GAP_GROUPS if any(gap(c, g) is not None for c in cps)]


def at(cp: Checkpoint, axis: Axis = TOKENS_AXIS) -> str:
    return axis.at(cp.tokens_seen) if cp.tokens_seen is not None else cp.key


def summary_line(cps: Sequence[Checkpoint], axis: Axis = TOKENS_AXIS) -> list[str]:
    """The gap of V partial at the last checkpoint that has one, per group, for the terminal."""
    last = last_with_gap(cps)
    if last is None:
        return []
    cells_ = "; ".join(f"{g} {text(gap(last, g))}" for g in groups([last]))
    return [f"tier gap, common - rare V partial at {at(last, axis)} (95% CI over characters): {cells_}"]


def scalars(inputs: Inputs) -> dict[str, float]:
    """The gap of every metric over all languages at the last checkpoint, for W&B's summary."""
    last = last_with_gap(inputs.cps)
    out: dict[str, float] = {}
    for metric in GAP_METRICS:
        g = gap(last, "all", metric) if last else None
        if g is not None:
            out |= {
                f"report/tier_gap_{metric}{end}": v
                for end, v in (("", g.value), ("_lo", g.lo), ("_hi", g.hi))
            }
    return out


def compare_cell(cps: list[Checkpoint], axis: Axis) -> str | None:
    """The gap over all languages at a run's last checkpoint that has one."""
    last = last_with_gap(cps)
    return f"{text(gap(last, 'all'))} at {at(last, axis)}" if last else None


def tier_tables(inputs: Inputs) -> list[Table]:
    """V partial by tier per language, then the tier gaps."""
    tables = []
    for lang in LANGUAGES:
        columns = [(tier, level0(lang, tier)) for tier in TIERS]
        if any(c.value(k) is not None for c in inputs.cps for _, k in columns):
            title = f"Level 0 V partial by tier, {lang}"
            tables.append(checkpoint_table(f"tiers_{lang}", title, inputs.metrics, inputs.cps, columns))
    return tables + _gap_tables(inputs.cps, inputs.axis)


def _gap_tables(cps: list[Checkpoint], axis: Axis) -> list[Table]:
    """Common minus rare characters with the probe's 95% CI over characters: every metric at
    the last checkpoint that has a gap, then V partial at every checkpoint."""
    last = last_with_gap(cps)
    if last is None:
        return []
    found = groups(cps)
    columns = [Column("language", ""), *(Column(label, "") for label in GAP_METRICS.values())]
    rows = [[g, *(text(gap(last, g, m)) for m in GAP_METRICS)] for g in found]
    title = f"Tier gap, common - rare, at {at(last, axis)} (value and 95% CI over characters)"
    curve_columns = [Column(TOKENS, ","), Column("step", ""), *(Column(g, "") for g in found)]
    curve_rows = [
        [c.tokens_seen, c.step, *(text(gap(c, g)) for g in found)] for c in cps if gap(c, "all") is not None
    ]
    return [
        Table("tier_gap", title, columns, rows),
        Table(
            "tier_gap_curve",
            "Tier gap over training, common - rare V partial (95% CI)",
            curve_columns,
            curve_rows,
        ),
    ]


def tier_lines(records: dict[str, Record]) -> list[str]:
    """V_partial by language and frequency tier at the last probed checkpoint: the tiers of our
    eval sets when it has any, then any others a file names (a published file's)."""
    record = max(records.values(), key=lambda r: r.step or 0)
    m = record.metrics
    parsed = [p for k in m if (p := keys.read(k)) is not None and p.probe == LEVEL0 and len(p.fields) == 2]
    found = {p.fields[1] for p in parsed} - {"all"}
    tiers = [*(TIERS if found & set(TIERS) else ()), *sorted(found - set(TIERS))]
    named = f"step {record.step}" if record.step is not None else short_name(record)
    lines = [f"{'partial by tier, ' + named:<28}" + "".join(f"{t:>11}" for t in tiers)]
    lines += [
        f"{lang:<28}" + cells([m.get(level0(lang, t)) for t in tiers])
        for lang in display.languages_in(m, LEVEL0)
    ]
    return lines


def draw_tiers(inputs: Inputs, path: Path) -> None:
    """``tiers_figure`` as a PNG (drawn in the same style: ticks are made at draw time)."""
    import matplotlib

    with matplotlib.rc_context(figures.STYLE):
        figures.save(tiers_figure(inputs.cps, inputs.axis), path)


def tiers_figure(cps: Sequence[Checkpoint], axis: Axis = TOKENS_AXIS) -> Any:
    """V partial by frequency tier over training, one panel per language, and below them the
    gap between common and rare characters with its 95% CI band when the records hold it."""
    import matplotlib

    gap_groups = groups(cps)
    with matplotlib.rc_context(figures.STYLE):
        fig, axes = figures.new_figure(3 if gap_groups else 2, 2, (11, 10.5 if gap_groups else 7.5))
        panels = axes[:2].ravel()
        for ax in panels[1:]:  # shared before drawing, so the limits hold every panel's data
            ax.sharex(panels[0])
            ax.sharey(panels[0])
        any_drawn = False
        for ax, lang in zip(panels, LANGUAGES, strict=True):
            for tier in TIERS:
                curve = analysis.probe_curve(cps, level0(lang, tier))
                any_drawn |= figures.plot_curve(ax, curve, color=TIER_COLORS[tier], label=tier)
            ax.set_title(lang)
            ax.grid(True, alpha=0.3)
            figures.log_x(ax)
        if not any_drawn:
            fig.clear()
            ax = fig.subplots()
            ax.set_axis_off()
            figures.say_empty(ax, "no Level 0 tier metrics (probes.jsonl)")
        else:
            for ax in axes[:2, 0]:
                ax.set_ylabel("V partial (0-1)")
            by_label = {
                label: h for ax in panels for h, label in zip(*ax.get_legend_handles_labels(), strict=True)
            }
            tiers = [t for t in TIERS if t in by_label]  # every tier any language has, in tier order
            fig.legend([by_label[t] for t in tiers], tiers, loc="outside right center", title="tier")
            if gap_groups:
                _gap_panel(fig, axes[2], cps, gap_groups, axis)
            for ax in axes[1, :]:
                ax.set_xlabel(figures.x_label(axis))
        fig.suptitle("Level 0 validity (partial) by character frequency tier")
        return fig


def _gap_panel(fig: Any, row: Sequence[Any], cps: Sequence[Checkpoint], found: list[str], axis: Axis) -> None:
    """One wide panel in place of ``row``: common minus rare V partial per language, each with
    the probe's 95% CI over characters as a band, and the line of no gap."""
    grid = row[0].get_subplotspec().get_gridspec()
    for ax in row:
        ax.remove()
    ax = fig.add_subplot(grid[-1, :])
    for g in found:
        points = [(c.tokens_seen, gp) for c in cps if c.tokens_seen and (gp := gap(c, g)) is not None]
        xs = [x for x, _ in points]
        color = figures.LANG_COLORS[g]
        ax.plot(xs, [gp.value for _, gp in points], marker="o", markersize=3, color=color, label=g)
        lo, hi = [gp.lo for _, gp in points], [gp.hi for _, gp in points]
        ax.fill_between(xs, lo, hi, color=color, alpha=0.12, linewidth=0)
    ax.axhline(0.0, color="gray", linewidth=1)
    ax.set_title("common - rare V partial (band: 95% CI over characters)")
    ax.set_ylabel("gap in V partial")
    ax.set_xlabel(figures.x_label(axis))
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", title="language")
    figures.log_x(ax)


TIERS_SECTION = Section(
    figure="tiers",
    figure_note="validity by frequency tier",
    draw=draw_tiers,
    tables=tier_tables,
    scalars=scalars,
    summary=tier_lines,
    lines=summary_line,
    compare_column=("tier gap all, common - rare V partial (95% CI)", compare_cell),
)
