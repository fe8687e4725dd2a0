"""The report's convergence figure, and the drawing tools the probes' report sections share.
Figures draw on matplotlib ``Figure`` objects with the Agg canvas, never pyplot's global backend,
so a notebook calling the report keeps its own plotting; absent data is said in its panel.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bytecanary import display, settling
from bytecanary.report.analysis import Convergence, Curve
from bytecanary.report.axis import Axis

DPI = 120
STYLE = {"font.size": 11, "axes.titlesize": 12, "axes.labelsize": 11, "legend.fontsize": 9}
LANG_COLORS = {"all": "black", "en": "tab:blue", "ja": "tab:red", "ko": "tab:green", "zh": "tab:orange"}
RATIO_LINES = ("-.", "--")  # the vertical line where each ratio curve converges


def new_figure(nrows: int, ncols: int, size: tuple[float, float], **kwargs: Any) -> tuple[Any, Any]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False, **kwargs)
    return fig, axes


def save(fig: Any, path: Path) -> None:
    fig.savefig(path, dpi=DPI)


def say_empty(ax: Any, message: str) -> None:
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, color="gray")


def si(tokens: float) -> str:
    """400000 -> 400k, 2000000 -> 2M: token counts a reader takes in at a glance."""
    for factor, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if tokens >= factor:
            return f"{tokens / factor:g}{suffix}"
    return f"{tokens:g}"


def _plain_log_labels(axis: Any, fmt: Callable[[float], str]) -> None:
    """Plain numbers on a log axis instead of 2x10^4: every decade, and between decades
    2 and 5 when the axis spans under 300x (every tick under 10x)."""
    from matplotlib.ticker import FuncFormatter

    def minor(value: float, _: Any) -> str:
        lo, hi = axis.get_view_interval()
        span = hi / lo if lo > 0 else math.inf
        lead = round(value / 10 ** math.floor(math.log10(value)))
        return fmt(value) if span < 10 or (span < 300 and lead in (2, 5)) else ""

    axis.set_major_formatter(FuncFormatter(lambda value, _: fmt(value)))
    axis.set_minor_formatter(FuncFormatter(minor))


def x_label(axis: Axis) -> str:
    return f"{axis.label} (log scale)"


def log_x(ax: Any) -> None:
    """Log x-axis (tokens seen or steps) with plain labels, once the axis holds data."""
    if ax.lines:
        ax.set_xscale("log")
        _plain_log_labels(ax.xaxis, si)


def log_y(ax: Any) -> None:
    """Log y-axis with plain labels (perplexity)."""
    ax.set_yscale("log")
    _plain_log_labels(ax.yaxis, lambda v: f"{v:,.0f}")


def _positive(curve: Curve) -> tuple[list[float], list[float]]:
    """Points a log axis can show (a checkpoint at 0 tokens cannot)."""
    pairs = [(x, y) for x, y in zip(curve.tokens, curve.values, strict=True) if x > 0]
    return [x for x, _ in pairs], [y for _, y in pairs]


def plot_curve(ax: Any, curve: Curve, mark: bool = False, **style: Any) -> bool:
    """Draw a curve (False when it has no point to draw), with its convergence point as a
    large dot when ``mark``."""
    xs, ys = _positive(curve)
    if not xs:
        return False
    ax.plot(xs, ys, marker="o", markersize=3, **style)
    if mark and curve.converged_at:
        y = curve.values[curve.tokens.index(curve.converged_at)]
        ax.plot([curve.converged_at], [y], "o", markersize=9, mfc="none", mew=2, color=style.get("color"))
    return True


def _convergence_lines(axes: Sequence[Any], conv: Convergence) -> None:
    """Vertical lines where perplexity and each ratio curve converge, in every panel."""
    ratio_lines = [
        ((c := conv.curve(key)) and c.converged_at, style, f"{named.panel or named.what} converges")
        for (key, named), style in zip(conv.named.items(), RATIO_LINES, strict=False)
    ]
    for x, style, label in ((conv.ppl.converged_at, ":", f"{conv.ppl.key} converges"), *ratio_lines):
        if x:
            for i, ax in enumerate(axes):
                ax.axvline(x, color="gray", linestyle=style, linewidth=1.2, label=label if i == 0 else None)


def _tolerance_marks(axes: Sequence[Any], conv: Convergence) -> None:
    """A downward triangle where perplexity (top panel) and each ratio curve (the greedy panel,
    or the expected one) come within their default tolerance of their final level for good."""
    eps = conv.tolerance
    top, middle, bottom = axes
    named = [(middle if key in conv.validity else bottom, conv.curve(key)) for key in conv.named]
    for ax, curve in ((top, conv.ppl), *named):
        at = conv.settling(curve).at if curve else None
        if at is None:
            continue
        ppl, validity = (
            settling.eps_text(eps.ppl_tolerance, True),
            settling.eps_text(eps.validity_tolerance, False),
        )
        label = f"within tolerance ({ppl} ppl, {validity}) of the final level from here"
        y = curve.values[curve.tokens.index(at)]
        ax.plot([at], [y], "v", markersize=11, color="tab:purple", label=label, zorder=5)


def tolerance_title(conv: Convergence) -> str:
    """The time-to-tolerance ratios at the default tolerances, in one sentence for a title."""
    eps = conv.tolerance
    parts = []
    for key, named in conv.named.items():
        r = conv.tolerance_ratio(key)
        name = named.name
        parts.append(f"{name} {r.value:.2f}x (95% CI {settling.ci_text(r)})" if r else f"{name} n/a")
    tol = (
        f"{settling.eps_text(eps.validity_tolerance, False)} vs {settling.eps_text(eps.ppl_tolerance, True)}"
    )
    return f"Within this run, {conv.axis.noun} to tolerance ({tol}) over perplexity's: {', '.join(parts)}"


def _greedy_panel(ax: Any, conv: Convergence) -> None:
    """Greedy validity, partial solid and strict dashed per language, the band of one SE
    (binomial or the scatter between checkpoints, the larger) around V partial (all)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    for key, curve in conv.validity.items():
        style = "--" if key.endswith("/strict") else "-"
        plot_curve(ax, curve, mark=True, color=LANG_COLORS[display.language_of(key)], linestyle=style)
    if not ax.lines:
        say_empty(ax, "no Level 0 probe records (probes.jsonl)")
        return
    ax.set_ylim(-0.02, 1.02)  # a band may reach past the metric's range
    band = bool(conv.headline and conv.headline.se)
    if band:
        _band(ax, conv.headline, LANG_COLORS["all"])
    langs = dict.fromkeys(display.language_of(k) for k in conv.validity)
    handles = [Line2D([], [], color=LANG_COLORS[lang], label=lang) for lang in langs]
    handles += [
        Line2D([], [], color="gray", linestyle="-", label="V partial"),
        Line2D([], [], color="gray", linestyle="--", label="V strict"),
        Line2D([], [], color="gray", marker="o", mfc="none", mew=2, linestyle="", label="converges"),
        *([Patch(color=LANG_COLORS["all"], alpha=0.12, label="SE, V partial all")] if band else []),
    ]
    ax.legend(handles=handles, loc="center left", bbox_to_anchor=(1.01, 0.5))


def _p_valid_panel(ax: Any, conv: Convergence) -> None:
    """Expected validity p_valid per language, each with its band of one SE over the samples."""
    for key, curve in conv.p_valid.items():
        color = LANG_COLORS[display.language_of(key)]
        if (
            plot_curve(ax, curve, mark=True, color=color, label=f"p_valid {display.language_of(key)}")
            and curve.se
        ):
            _band(ax, curve, color)
    if ax.lines:
        ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5))
    else:
        say_empty(ax, "no p_valid in the Level 0 records (probes.jsonl)")


def _band(ax: Any, curve: Curve, color: str) -> None:
    """A shaded band of one SE either side of a curve."""
    lo = [y - e for y, e in zip(curve.values, curve.se, strict=True)]
    hi = [y + e for y, e in zip(curve.values, curve.se, strict=True)]
    ax.fill_between(curve.tokens, lo, hi, color=color, alpha=0.12, linewidth=0)


def convergence_figure(conv: Convergence) -> Any:
    """Perplexity (log y), greedy Level 0 validity and expected validity (p_valid) in three
    panels over tokens seen, a ring where a curve converged; the ratios in the title."""
    import matplotlib

    with matplotlib.rc_context(STYLE):
        fig, axes = new_figure(3, 1, (10, 10.5), sharex=True)
        top, middle, bottom = axes[:, 0]
        if plot_curve(top, conv.ppl, mark=True, color="black", label=conv.ppl.key):
            log_y(top)
        else:
            say_empty(top, "no perplexity: no val/ppl in metrics.jsonl, no ppl probe records")
        top.set_ylabel(f"{conv.ppl_name} (log scale)")
        _greedy_panel(middle, conv)
        middle.set_ylabel("greedy validity V (0-1)")
        _p_valid_panel(bottom, conv)
        bottom.set_ylabel("expected validity p_valid (0-1)")
        bottom.set_xlabel(x_label(conv.axis))
        _convergence_lines([top, middle, bottom], conv)
        _tolerance_marks([top, middle, bottom], conv)
        for ax in (top, middle, bottom):
            log_x(ax)
            ax.grid(True, which="major", alpha=0.3)
        if top.get_legend_handles_labels()[0]:
            top.legend(loc="upper right")
        # the ratios, or why there are none; then the time-to-tolerance ratios
        title = ". ".join([*(conv.explain(key) for key in conv.named), tolerance_title(conv)])
        fig.suptitle(textwrap.fill(title, 90))
    return fig


def plot_convergence(conv: Convergence, path: Path) -> None:
    """``convergence_figure`` as a PNG (drawn in the same style: ticks are made at draw time)."""
    import matplotlib

    with matplotlib.rc_context(STYLE):
        save(convergence_figure(conv), path)
