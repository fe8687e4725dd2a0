"""``bytecanary report A B ...``: several runs side by side. ``compare.png`` draws each run's
perplexity, V_partial, p_valid (and MCQA accuracy, where every run has MCQA records) on shared
axes, each curve's convergence ringed; ``compare.md`` gives a row per run with the numbers its
own report states (``writer``), so runs, and a hub series beside a training run, are read at
one glance."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bytecanary import keys, settling
from bytecanary.errors import BytecanaryError
from bytecanary.io import atomic_dir, check_output
from bytecanary.report import analysis, figures, mcqa_trends, tier_gaps
from bytecanary.report.analysis import Checkpoint, Convergence, Curve
from bytecanary.report.axis import STEP_AXIS, STEP_NOTE, TOKENS_AXIS
from bytecanary.report.sources import RunData, load_run
from bytecanary.report.tables import Column, Table
from bytecanary.report.writer import ratio_text

FILES = ("compare.png", "compare.md")
COLORS = (
    "tab:blue",
    "tab:red",
    "tab:green",
    "tab:orange",
    "tab:purple",
    "tab:brown",
    "tab:pink",
    "tab:olive",
)
MCQA_PROTOCOLS = (keys.CLOZE, keys.SEPARATE, keys.MERGED, keys.DASHED)  # the first every run has is drawn
BPB_KEY = keys.heldout(metric="bpb")


@dataclass(frozen=True)
class Run:
    """One run of a comparison: its records, as its own report reads them, and their analysis."""

    name: str
    data: RunData
    conv: Convergence
    cps: list[Checkpoint]


def load_runs(
    paths: Sequence[str | Path], tolerance: settling.Tolerance | None, tokens_per_step: int | None
) -> list[Run]:
    """Every run, refused unless all sit on one axis (a ratio of steps beside one of tokens
    would read alike and mean other things)."""
    runs = [load_run(p, tokens_per_step=tokens_per_step) for p in paths]
    steps = [str(d.source) for d in runs if d.axis == STEP_AXIS]
    if steps and len(steps) < len(runs):
        raise BytecanaryError(
            f"{', '.join(steps)}: records without tokens_seen beside runs with them; give "
            f"--tokens_per_step N to place them at step x N, on one axis with the others"
        )
    names = [d.name for d in runs]
    if len(set(names)) < len(names):  # two records files of one folder
        names = [f"{name}#{i + 1}" for i, name in enumerate(names)]
    return [
        Run(
            name,
            d,
            analysis.convergence(d.metrics, d.probes, tolerance, d.axis),
            analysis.checkpoints(d.probes),
        )
        for name, d in zip(names, runs, strict=True)
    ]


def default_out(runs: Sequence[Run]) -> Path:
    """``<parent of the first run>/compare-<name>-<name>...``."""
    run_dir = runs[0].data.run_dir
    parent = run_dir.parent if run_dir.name not in ("", "..") else run_dir.resolve().parent
    return parent / "-".join(["compare", *(r.data.name for r in runs)])


def check_out(out: Path) -> Path:
    """``out`` if a comparison may take its place: absent, or holding only a comparison's files."""
    check_output(out, folder=True)
    others = sorted(p.name for p in out.iterdir() if p.name not in FILES) if out.is_dir() else []
    if others:
        raise BytecanaryError(
            f"{out}: holds {', '.join(others[:3])}, not only {' and '.join(FILES)}; "
            f"give --out a folder of its own"
        )
    return out


def _mcqa_protocol(runs: Sequence[Run]) -> str | None:
    """The MCQA protocol drawn: the first of ``MCQA_PROTOCOLS`` with accuracy in every run;
    None unless every run has MCQA records."""
    for protocol in MCQA_PROTOCOLS:
        if all(_mcqa_curve(r, protocol).tokens for r in runs):
            return protocol
    return None


def _mcqa_curve(run: Run, protocol: str) -> Curve:
    return mcqa_trends.group_mean_curve(run.cps, mcqa_trends.mcqa_tasks(run.cps), "acc", protocol)


def _bpb_curve(run: Run) -> Curve:
    """The ``ppl`` probe's bits per byte over all languages: unlike perplexity, comparable
    between runs whose tokenizers differ."""
    return analysis.probe_curve(run.cps, BPB_KEY)


def _panels(runs: Sequence[Run]) -> list[tuple[str, Callable[[Run], Curve | None]]]:
    """(title, the curve of a run) per panel."""
    panels: list[tuple[str, Callable[[Run], Curve | None]]] = [
        (" / ".join(dict.fromkeys(r.conv.ppl_name for r in runs)), lambda r: r.conv.ppl),
        ("Level 0 V partial (all)", lambda r: r.conv.headline),
        ("Level 0 p_valid (all)", lambda r: r.conv.curve(analysis.P_VALID_KEY)),
    ]
    if all(_bpb_curve(r).tokens for r in runs):
        panels.insert(1, ("held-out bits per byte (ppl probe)", _bpb_curve))
    protocol = _mcqa_protocol(runs)
    if protocol:
        title = f"MCQA {keys.PROTOCOL_LABELS[protocol]} accuracy, mean over tasks"
        panels.append((title, lambda r: _mcqa_curve(r, protocol)))
    return panels


def compare_figure(runs: Sequence[Run]) -> Any:
    """One row of panels on shared x axes, a line per run, each curve's convergence ringed."""
    import matplotlib
    from matplotlib.lines import Line2D

    panels = _panels(runs)
    with matplotlib.rc_context(figures.STYLE):
        fig, axes = figures.new_figure(1, len(panels), (4.8 * len(panels), 4.6), sharex=True)
        for i, (ax, (title, curve_of)) in enumerate(zip(axes[0], panels, strict=True)):
            for run, color in zip(runs, itertools.cycle(COLORS)):
                curve = curve_of(run)
                if curve is not None:
                    figures.plot_curve(ax, curve, mark=True, color=color, label=run.name)
            if not ax.lines:
                figures.say_empty(ax, "no records")
            elif i == 0:
                figures.log_y(ax)
            ax.set_title(title)
            ax.set_xlabel(figures.x_label(runs[0].data.axis))
            ax.grid(True, which="major", alpha=0.3)
            figures.log_x(ax)
        handles = [Line2D([], [], color=c, label=r.name) for r, c in zip(runs, itertools.cycle(COLORS))]
        ring = Line2D([], [], color="gray", marker="o", mfc="none", mew=2, linestyle="", label="converges")
        fig.legend(handles=[*handles, ring], loc="outside right center")
        fig.suptitle(f"bytecanary: {', '.join(r.name for r in runs)}")
    return fig


def plot_compare(runs: Sequence[Run], path: Path) -> None:
    """``compare_figure`` as a PNG (drawn in the same style: ticks are made at draw time)."""
    import matplotlib

    with matplotlib.rc_context(figures.STYLE):
        figures.save(compare_figure(runs), path)


def _converged(curve: Curve | None) -> str:
    if curve is None:
        return "no records"
    return f"{curve.converged_at:,.0f}" if curve.converged_at is not None else curve.state


def _final(curve: Curve | None) -> float | None:
    return curve.values[-1] if curve is not None and curve.values else None


def _row(run: Run) -> list[Any]:
    conv = run.conv
    ratios = [
        ratio_text(r) if (r := conv.ratios[key]) else f"n/a: {conv.why_no_ratio(key)}"
        for key in analysis.RATIO_CURVES
    ]
    last = tier_gaps.last_with_gap(run.cps)
    gap = f"{tier_gaps.text(tier_gaps.gap(last, 'all'))} at {tier_gaps.at(last, conv.axis)}" if last else None
    curves = (conv.ppl, conv.headline, conv.curve(analysis.P_VALID_KEY))
    return [
        run.name,
        conv.axis.label,
        conv.ppl.key,
        *(_converged(c) for c in curves),
        *ratios,
        gap,
        *(_final(c) for c in curves),
        _final(_bpb_curve(run)),
    ]


def compare_table(runs: Sequence[Run]) -> Table:
    """A row per run: its axis, where each curve converged, the two ratios to perplexity with
    their CI, the tier gap at its last checkpoint, and the curves' last values."""
    columns = [
        Column("run", ""),
        Column("axis", ""),
        Column("perplexity", ""),
        Column("perplexity converges at", ""),
        Column("V partial converges at", ""),
        Column("p_valid converges at", ""),
        Column("validity/perplexity", ""),
        Column("p_valid/perplexity", ""),
        Column("tier gap all, common - rare V partial (95% CI)", ""),
        Column("final perplexity", ",.1f", keys.val_ppl()),
        Column("final V partial", ".3f", analysis.HEADLINE_KEY),
        Column("final p_valid", ".3f", analysis.P_VALID_KEY),
        Column("final held-out bpb", ".3f", BPB_KEY),
    ]
    return Table("compare", "Convergence of each run", columns, [_row(r) for r in runs])


def render(runs: Sequence[Run], table: Table, out: Path) -> str:
    """``compare.md``: which runs, the axis where it is the step, the table, how to redo it."""
    sources = "".join(f"- {r.name}: `{r.data.source}`\n" for r in runs)
    step = [f"{STEP_NOTE}.\n"] if runs[0].data.axis != TOKENS_AXIS else []
    n = runs[0].data.tokens_per_step
    per_step = f" --tokens_per_step {n}" if n else ""
    each = "".join(f"bytecanary report {r.data.source}{per_step}\n" for r in runs)
    again = f"bytecanary report {' '.join(str(r.data.source) for r in runs)}{per_step} --out {out}\n"
    parts = [
        f"# bytecanary comparison: {', '.join(r.name for r in runs)}\n",
        sources,
        *step,
        "`compare.png`: each run's curves on shared axes, a ring where a curve converges (one detector, "
        "`stats.detect_convergence`, as in each run's own report).\n",
        table.markdown(),
        f"This comparison, and each run's own report:\n\n```bash\n{again}{each}```\n",
    ]
    return "\n".join(parts)


def write_compare(
    paths: Sequence[str | Path],
    out: str | Path | None = None,
    tolerance: settling.Tolerance | None = None,
    tokens_per_step: int | None = None,
    wandb: bool | None = None,
) -> str:
    """Write ``compare.png`` and ``compare.md`` whole into ``out`` (default ``default_out``) and
    return what the terminal shows: the table and where it went."""
    runs = load_runs(paths, tolerance, tokens_per_step)
    folder = check_out(Path(out) if out is not None else default_out(runs))
    table = compare_table(runs)
    with atomic_dir(folder) as tmp:
        plot_compare(runs, tmp / FILES[0])
        (tmp / FILES[1]).write_text(render(runs, table, folder), encoding="utf-8")
    step = [STEP_NOTE] if runs[0].data.axis != TOKENS_AXIS else []
    lines = [*step, table.markdown(), f"comparison: {folder / FILES[1]} (+ {FILES[0]})"]
    if wandb:
        lines.append("W&B: nothing logged: a comparison has no W&B run of its own")
    return "\n".join(lines)
