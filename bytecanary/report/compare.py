"""``bytecanary report A B ...``: several runs side by side. ``compare.png`` draws each run's
perplexity, the curves the probes judge against it and their sections' panels on shared axes;
``compare.md`` gives a row per run with the numbers its own report states (``writer``)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bytecanary import keys, settling
from bytecanary.errors import BytecanaryError
from bytecanary.io import atomic_dir, check_output
from bytecanary.report import analysis, figures, sections
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


def _bpb_key() -> str | None:
    """The bits per byte of the first perplexity a probe records that has one."""
    return next((p.bpb for p in analysis.perplexities() if p.bpb), None)


def _bpb_curve(run: Run) -> Curve | None:
    """A probe's bits per byte over all languages: unlike perplexity, comparable between runs
    whose tokenizers differ."""
    key = _bpb_key()
    return analysis.probe_curve(run.cps, key) if key else None


def _panels(runs: Sequence[Run]) -> list[tuple[str, Callable[[Run], Curve | None]]]:
    """(title, the curve of a run) per panel."""
    named = runs[0].conv.named
    panels: list[tuple[str, Callable[[Run], Curve | None]]] = [
        (" / ".join(dict.fromkeys(r.conv.ppl_name for r in runs)), lambda r: r.conv.ppl),
        *((n.panel or n.what, lambda r, key=key: r.conv.curve(key)) for key, n in named.items()),
    ]
    if all((c := _bpb_curve(r)) is not None and c.tokens for r in runs):
        panels.insert(1, ("held-out bits per byte (ppl probe)", _bpb_curve))
    for section in sections.every():
        panel = section.compare_panel([r.cps for r in runs]) if section.compare_panel else None
        if panel is not None:
            title, curve_of = panel
            panels.append((title, lambda r, curve_of=curve_of: curve_of(r.cps)))
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


def _row(run: Run, columns: list[tuple[str, Callable[..., str | None]]]) -> list[Any]:
    conv = run.conv
    ratios = [
        ratio_text(r) if (r := conv.ratios[key]) else f"n/a: {conv.why_no_ratio(key)}" for key in conv.named
    ]
    curves = (conv.ppl, *(conv.curve(key) for key in conv.named))
    return [
        run.name,
        conv.axis.label,
        conv.ppl.key,
        *(_converged(c) for c in curves),
        *ratios,
        *(cell(run.cps, conv.axis) for _, cell in columns),
        *(_final(c) for c in curves),
        _final(_bpb_curve(run)),
    ]


def compare_table(runs: Sequence[Run]) -> Table:
    """A row per run: its axis, where each curve converged, the ratios to perplexity with
    their CI, the columns the probes' sections add (the tier gap at its last checkpoint), and
    the curves' last values."""
    named = runs[0].conv.named
    columns = [s.compare_column for s in sections.every() if s.compare_column is not None]
    table_columns = [
        Column("run", ""),
        Column("axis", ""),
        Column("perplexity", ""),
        Column("perplexity converges at", ""),
        *(Column(f"{n.label or n.name} converges at", "") for n in named.values()),
        *(Column(f"{n.name}/perplexity", "") for n in named.values()),
        *(Column(label, "") for label, _ in columns),
        Column("final perplexity", ",.1f", keys.val_ppl()),
        *(Column(f"final {n.label or n.name}", ".3f", key) for key, n in named.items()),
        Column("final held-out bpb", ".3f", _bpb_key()),
    ]
    return Table("compare", "Convergence of each run", table_columns, [_row(r, columns) for r in runs])


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
