"""The tables behind the report's figures: markdown in ``report.md``, ``wandb.Table`` in W&B, one
row per probed checkpoint, columns named by metric key so a header can say which way is better;
absent data is ``-``, a statistic the data cannot support ``n/a``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from bytecanary import display, keys, settling
from bytecanary.report import analysis, figures, sections
from bytecanary.report.analysis import Checkpoint, Convergence
from bytecanary.report.axis import STEP_AXIS

TOKENS = "tokens seen"
VAL_PPL_LABEL = "val ppl"


@dataclass(frozen=True)
class Column:
    """A table column: its label, the format spec of its cells and the metric key it holds."""

    label: str
    fmt: str = ".3f"
    key: str | None = None

    @property
    def header(self) -> str:
        """The label with ``↑``/``↓`` when the metric declares which way is better."""
        up = display.higher_is_better(self.key) if self.key else None
        return self.label if up is None else f"{self.label} {'↑' if up else '↓'}"


@dataclass(frozen=True)
class Table:
    """One table of the report: markdown in ``report.md``, a ``wandb.Table`` in W&B."""

    name: str
    title: str
    columns: list[Column]
    rows: list[list[Any]]

    @property
    def labels(self) -> list[str]:
        return [c.label for c in self.columns]

    def markdown(self) -> str:
        head = f"| {' | '.join(c.header for c in self.columns)} |\n|{'---|' * len(self.columns)}\n"
        body = "".join(
            f"| {' | '.join(_cell(v, c.fmt) for v, c in zip(row, self.columns, strict=True))} |\n"
            for row in self.rows
        )
        return f"## {self.title}\n\n{head}{body}"

    def without(self, label: str) -> Table:
        """The table without the column labelled ``label`` (if it has one)."""
        cols = [i for i, c in enumerate(self.columns) if c.label != label]
        return Table(
            self.name, self.title, [self.columns[i] for i in cols], [[r[i] for i in cols] for r in self.rows]
        )

    def without_empty_columns(self, keep: int) -> Table:
        """Drop the columns after the first ``keep`` that hold no value at all."""
        cols = [i for i in range(len(self.columns)) if i < keep or any(r[i] is not None for r in self.rows)]
        rows = [[r[i] for i in cols] for r in self.rows]
        return Table(self.name, self.title, [self.columns[i] for i in cols], rows)


def _cell(value: Any, spec: str) -> str:
    """``-`` for absent data, ``n/a`` for a statistic the data cannot support."""
    if value is None:
        return "-"
    if isinstance(value, float) and math.isnan(value):
        return "n/a"
    return format(value, spec)


def _rows_by_checkpoint(
    metrics: list[dict[str, Any]], cps: list[Checkpoint], columns: list[tuple[str, str]], ppl: str | None
) -> list[list[Any]]:
    """tokens_seen, step, [perplexity], then ``columns`` per checkpoint; with a ``ppl`` key
    its value at each checkpoint and every row of ``metrics`` that holds it, merged on tokens_seen."""
    row_keys = ([ppl] if ppl else []) + [k for _, k in columns]
    rows: dict[Any, dict[str, Any]] = {}
    for c in cps:
        key = c.tokens_seen if c.tokens_seen is not None else f"checkpoint {c.key}"
        rows[key] = {"tokens": c.tokens_seen, "step": c.step, **{k: c.value(k) for k in row_keys}}
    for r in metrics if ppl else ():
        value, tokens = analysis.finite(r.get(ppl)), r.get(keys.TOKENS_SEEN)
        if value is not None and tokens is not None:
            rows.setdefault(tokens, {"tokens": tokens, "step": r.get(keys.STEP)})[ppl] = value
    ordered = sorted(rows.values(), key=lambda r: (r["tokens"] is None, r["tokens"] or 0, r["step"] or 0))
    return [[r["tokens"], r["step"], *(r.get(k) for k in row_keys)] for r in ordered]


def checkpoint_table(
    name: str,
    title: str,
    metrics: list[dict[str, Any]],
    cps: list[Checkpoint],
    columns: list[tuple[str, str]],
    ppl: str | None = None,
) -> Table:
    head = [Column(TOKENS, ","), Column("step", "")]
    labels = {keys.val_ppl(): VAL_PPL_LABEL, **{p.key: p.label for p in analysis.perplexities()}}
    head += [Column(labels[ppl], ",.1f", ppl)] if ppl else []
    rows = _rows_by_checkpoint(metrics, cps, columns, ppl)
    return Table(name, title, head + [Column(label, ".3f", key) for label, key in columns], rows)


def _convergence_table(conv: Convergence) -> Table:
    """Every curve's verdict with its evidence: the tail's slope per decade of tokens and its
    SE, how far (in noise) the curve moved before the tail, and the noise of one point."""
    rows = []
    for curve in (conv.ppl, *conv.validity.values(), *conv.p_valid.values()):
        v = curve.verdict
        evidence = [v.n_tail, v.slope, v.slope_se, v.moved, v.noise] if v else [None] * 5
        head = [curve.key, len(curve.tokens), curve.state, curve.converged_at, conv.ratio_to_ppl(curve)]
        rows.append([*head, *evidence, curve.noise_from])
    columns = [
        Column("curve", ""),
        Column("points", ""),
        Column("state", ""),
        Column(f"converges at ({conv.axis.unit})", ",.0f"),
        Column(f"x {conv.ppl.key} {conv.axis.noun}", ".2f"),
        Column("tail points", ""),
        Column("tail slope / decade", "+.3g"),
        Column("slope SE", ".2g"),
        Column("moved (x noise)", ".1f"),
        Column("noise", ".2g"),
        Column("noise from", ""),
    ]
    title = f"Convergence (one detector for every curve; {conv.ppl.key} judged on its log)"
    return Table("convergence", title, columns, rows)


def _tolerance_table(conv: Convergence) -> Table:
    """Every curve's time to tolerance at its default tolerance: where it came within eps of
    its final level for good, or why it has no such point, with the final level and noise."""
    rows = []
    for curve in (conv.ppl, *conv.validity.values(), *conv.p_valid.values()):
        eps = conv.tolerance.eps(curve.log)
        s = conv.settling(curve)
        final = None if math.isnan(s.final) else (math.exp(s.final) if curve.log else s.final)
        noise = None if math.isnan(s.noise) else s.noise
        rows.append(
            [curve.key, settling.eps_text(eps, curve.log), s.state, s.at, final, s.final_points, noise]
        )
    columns = [
        Column("curve", ""),
        Column("tolerance", ""),
        Column("state", ""),
        Column(f"within from ({conv.axis.unit})", ",.0f"),
        Column("final level", ".4g"),
        Column("final points", ""),
        Column("noise", ".2g"),
    ]
    title = f"Time to tolerance ({conv.ppl.key} relative, on its log; validity absolute)"
    return Table("time_to_tolerance", title, columns, rows)


def _short_why(conv: Convergence, key: str, cell: tuple[float, float]) -> str:
    """Per cell without a ratio, which curve had no T(eps) and in one or two words why."""
    eps_v, eps_p = cell
    name = conv.named[key].name
    why = [
        f"{what} {c.settle(eps).state}"
        for what, c, eps in ((conv.ppl.key, conv.ppl, eps_p), (name, conv.curve(key), eps_v))
        if c.settle(eps).state != settling.WITHIN
    ]
    return f"n/a: {'; '.join(why)}"


def _tokens(s: settling.Settling) -> str:
    """T in three significant digits (6963200 -> 6.96M): a heading, not a record."""
    return figures.si(float(f"{s.at:.3g}")) if s.at is not None else "n/a"


def _grid_tables(conv: Convergence) -> list[Table]:
    """Per ratio curve (V partial, p_valid), its T(eps_v) over perplexity's T(eps_p) with the
    95% CI for every pair of the grid's tolerances, each heading with the curve's T(eps)."""
    tables = []
    for key, grid in conv.tolerance_grids.items():
        name = conv.named[key].name
        curve = conv.curve(key)
        p_eps, v_eps = conv.tolerance.grid(True), conv.tolerance.grid(False)
        columns = [Column(f"{name} \\ {conv.ppl.key}", "")] + [
            Column(f"{settling.eps_text(e, True)} (T {_tokens(conv.ppl.settle(e))})", "") for e in p_eps
        ]
        rows = []
        for ev in v_eps:
            cells = []
            for ep in p_eps:
                r = grid[(ev, ep)]
                cells.append(
                    f"{r.value:.2f} ({settling.ci_text(r)})" if r else _short_why(conv, key, (ev, ep))
                )
            rows.append([f"{settling.eps_text(ev, False)} (T {_tokens(curve.settle(ev))})", *cells])
        title = (
            f"Time-to-tolerance ratio, {name} over {conv.ppl.key}, within this run "
            f"(value and 95% CI; T: {conv.axis.unit} to come within the tolerance)"
        )
        tables.append(Table(f"tolerance_grid_{name}", title, columns, rows))
    return tables


def build_tables(inputs: sections.Inputs, conv: Convergence) -> list[Table]:
    """Every table of the report, in the order of the figures they stand behind (the sections'
    after the convergence ones); on the step axis without the tokens-seen column (the step
    column holds the x)."""
    metrics, cps = inputs.metrics, inputs.cps
    beside = [t for d in display.declared().values() if (t := d.ppl_table) is not None]
    title = " and ".join([conv.ppl_name.capitalize(), *(t.title for t in beside)])
    columns = [c for t in beside for c in t.columns if any(c[1] in cp.metrics for cp in cps)]
    per_checkpoint = checkpoint_table(
        "per_checkpoint", f"{title} per checkpoint", metrics, cps, columns, ppl=conv.ppl.key
    )
    tables = [
        per_checkpoint,
        _convergence_table(conv),
        _tolerance_table(conv),
        *_grid_tables(conv),
        *(t for s in sections.every() if s.tables is not None for t in s.tables(inputs)),
        *_other_tables(metrics, cps),
    ]
    return [t.without(TOKENS) for t in tables] if conv.axis == STEP_AXIS else tables


def _other_tables(metrics: list[dict[str, Any]], cps: list[Checkpoint]) -> list[Table]:
    """Per probe that asks for one (``Display.report_table``), the columns of the table it
    declares, else its headline keys (``keys.generic_headline``), per checkpoint."""
    seen = {k for c in cps for k in c.metrics}
    probes = sorted({p for k in seen if (p := keys.probe_of(k)) and display.display_of(p).report_table})
    return [
        checkpoint_table(
            f"probe_{probe}", f"{probe} per checkpoint", metrics, cps, display.columns(probe, seen)[1]
        )
        for probe in probes
    ]
