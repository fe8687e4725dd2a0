"""The numbers behind ``bytecanary report``: whether perplexity and each curve the probes
declare (``display.Judged``) converged, and when, by one detector, and their ratios ("Beyond
Perplexity", arXiv:2606.14122: validity needs about twice the tokens); docs/report-and-wandb.md."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from bytecanary import display, keys, records, settling, stats
from bytecanary.display import Judged, RatioCurve
from bytecanary.records import Record
from bytecanary.report.axis import TOKENS_AXIS, Axis
from bytecanary.settling import Tolerance, ci_text, eps_text

# where a curve's noise comes from, as the convergence table says it
FROM_CURVE, FROM_GREEDY, FROM_P_VALID_SE = "curve", "max(probe n, local scatter)", "probe (p_valid_se)"


VAL_PPL_NAME = "validation perplexity"


def judged() -> list[Judged]:
    """Every curve the installed probes' displays declare for judging beside perplexity."""
    return [j for d in display.declared().values() for j in d.judged]


def perplexities() -> list[display.Perplexity]:
    """The perplexities the installed probes record, a report's where a run logs no ``val/ppl``."""
    return [d.perplexity for d in display.declared().values() if d.perplexity is not None]


def finite(value: Any) -> float | None:
    """A finite float, or None for a missing, null, NaN or non-numeric value."""
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    return None


@dataclass(frozen=True)
class Checkpoint:
    """One probed checkpoint: the metrics of all its successful probe records merged."""

    key: str
    step: int | None
    tokens_seen: int | None
    metrics: dict[str, Any]

    def value(self, key: str) -> float | None:
        return finite(self.metrics.get(key))


def checkpoints(probe_records: Iterable[Record]) -> list[Checkpoint]:
    """Checkpoints in training order, each with the metrics of its records merged as
    ``records.merge`` merges them (failed records ignored, a rerun's record wins)."""
    merged: dict[str, Checkpoint] = {}
    for record in records.merge(probe_records):
        key = record.identity[0]
        old = merged.get(key)
        metrics = {**(old.metrics if old else {}), **record.metrics}
        merged[key] = Checkpoint(key, record.step, record.tokens_seen, metrics)
    return sorted(
        merged.values(),
        key=lambda c: (c.tokens_seen is None, c.tokens_seen or 0, c.step is None, c.step or 0),
    )


@dataclass(frozen=True)
class Curve:
    """A metric against tokens seen (> 0), each point's standard error when the probe
    measured it, and what the convergence detector says of it."""

    key: str
    tokens: list[float]
    values: list[float]
    se: list[float] | None = None
    """None: the detector estimates the noise from the curve itself."""
    log: bool = False
    """Judge the curve on the log of its values (perplexity)."""
    noise_from: str = FROM_CURVE

    def series(self) -> stats.Series:
        values = np.log(self.values) if self.log else np.asarray(self.values)
        return self.tokens, values, self.se

    @cached_property
    def verdict(self) -> stats.Verdict | None:
        """None when the curve has too few points to judge."""
        return stats.detect_convergence(*self.series()) if len(self.tokens) >= stats.MIN_TAIL else None

    @property
    def converged_at(self) -> float | None:
        return self.verdict.converged_at if self.verdict else None

    @property
    def state(self) -> str:
        return self.verdict.state if self.verdict else f"too few points (< {stats.MIN_TAIL})"

    @property
    def describe(self) -> str:
        """What the curve did, with the evidence, or why it cannot be judged."""
        if self.verdict is None:
            return f"has too few points ({len(self.tokens)} < {stats.MIN_TAIL})"
        return self.verdict.describe()

    @property
    def in_words(self) -> str:
        """What the curve did, without the numbers (the reason a ratio is missing)."""
        return stats.STATE_WORDS[self.verdict.state] if self.verdict else self.describe

    def tolerance_eps(self, eps: float) -> float:
        """A tolerance in the units the rule runs in: log(1 + eps) for perplexity (within a
        factor 1 + eps), eps itself for validity."""
        return math.log1p(eps) if self.log else eps

    def settle(self, eps: float) -> settling.Settling:
        """T(eps): where the curve comes within ``eps`` of its final level for good
        (``settling.time_to_tolerance``), judged on the larger of each point's SE and the local
        scatter between checkpoints."""
        xs, ys, se = self.series()
        return settling.time_to_tolerance(xs, ys, self.tolerance_eps(eps), se)


def make_curve(key: str, points: Iterable[tuple[Any, ...]], log: bool = False) -> Curve:
    """A curve from (tokens_seen, value) or (tokens_seen, value, se) tuples; points without
    tokens > 0 or a value are dropped, and a repeated x keeps its last point (a resumed run
    logs a step again). The curve has SEs only when every point has one."""
    by_x: dict[float, tuple[float, float | None]] = {}
    for x, y, *se in points:
        if (finite(x) or 0) > 0 and finite(y) is not None:
            by_x[float(x)] = (float(y), finite(se[0]) if se else None)
    xs = sorted(by_x)
    ses = [by_x[x][1] for x in xs]
    known = bool(xs) and all(e is not None for e in ses)
    return Curve(key, xs, [by_x[x][0] for x in xs], ses if known else None, log)


def _with_se(curve: Curve, se: Sequence[float] | None, noise_from: str) -> Curve:
    """The curve judged on ``se`` (None: on its own scatter, as perplexity)."""
    se = None if se is None else [float(e) for e in se]
    return Curve(curve.key, curve.tokens, curve.values, se, curve.log, noise_from if se else FROM_CURVE)


def probe_curve(cps: Sequence[Checkpoint], key: str) -> Curve:
    return make_curve(key, ((c.tokens_seen, c.metrics.get(key)) for c in cps))


def validity_curve(cps: Sequence[Checkpoint], key: str, n_key: str) -> Curve:
    """A greedy validity curve, each point's SE the larger of the binomial SE (``stats.proportion_se``)
    and the checkpoints' scatter (``stats.local_noise``): the scatter already holds the sampling
    noise, and the binomial SE floors a scatter that a smooth stretch drives to 0.
    """
    curve = make_curve(
        key, ((c.tokens_seen, c.value(key), stats.proportion_se(c.value(key), c.value(n_key))) for c in cps)
    )
    if len(curve.tokens) < 3:
        return curve
    scatter = stats.local_noise(curve.tokens, curve.values)
    return _with_se(curve, np.maximum(scatter, curve.se or 0.0), FROM_GREEDY)


def p_valid_curve(cps: Sequence[Checkpoint], key: str, se_key: str) -> Curve:
    """An expected-validity curve, each point's SE the one its probe recorded in ``se_key``
    (judged on its own scatter where a point lacks one)."""
    curve = make_curve(key, ((c.tokens_seen, c.value(key), c.value(se_key)) for c in cps))
    return _with_se(curve, curve.se, FROM_P_VALID_SE)


@dataclass(frozen=True)
class Convergence:
    """Perplexity, greedy and expected validity curves, what each did, and the ratios to
    perplexity of V_partial (the paper's headline) and of p_valid (all languages)."""

    ppl: Curve
    validity: dict[str, Curve]  # greedy, by metric key; only keys some checkpoint has
    p_valid: dict[str, Curve] = field(default_factory=dict)  # expected validity, likewise
    tolerance: Tolerance = field(default_factory=Tolerance)
    axis: Axis = TOKENS_AXIS
    named: dict[str, RatioCurve] = field(default_factory=dict)
    """The curves whose ratio to perplexity the report states, the headline first."""
    ppl_name: str = VAL_PPL_NAME
    """Which perplexity the curve is: the run's validation one, or one a probe recorded."""

    @property
    def headline_key(self) -> str | None:
        return next(iter(self.named), None)

    def describe(self, curve: Curve) -> str:
        """What ``curve`` did, with the evidence, its points placed on this report's axis."""
        return curve.verdict.describe(self.axis.unit) if curve.verdict else curve.describe

    @property
    def headline(self) -> Curve | None:
        return self.validity.get(self.headline_key)

    def curve(self, key: str) -> Curve | None:
        return self.validity.get(key) or self.p_valid.get(key)

    def ratio_to_ppl(self, curve: Curve) -> float | None:
        """The curve's convergence tokens over perplexity's; None unless both converged."""
        if curve.converged_at is None or self.ppl.converged_at is None:
            return None
        return curve.converged_at / self.ppl.converged_at

    @cached_property
    def ratios(self) -> dict[str, stats.RatioEstimate | None]:
        """Per curve of ``named``, its over perplexity's convergence tokens with the
        bootstrap CI; None unless both converged."""
        out = {}
        for key in self.named:
            curve = self.curve(key)
            both = curve is not None and self.ratio_to_ppl(curve) is not None
            out[key] = stats.convergence_ratio(curve.series(), self.ppl.series()) if both else None
        return out

    @property
    def ratio(self) -> stats.RatioEstimate | None:
        """The headline: the first named curve over perplexity."""
        return self.ratios.get(self.headline_key)

    def why_no_ratio(self, key: str | None = None) -> str:
        """In words, which curve did not converge and what it did instead."""
        key = key or self.headline_key
        name = self.named[key].name
        curve = self.curve(key)
        why = [f"{self.ppl.key} {self.ppl.in_words}"] if self.ppl.converged_at is None else []
        if curve is None:
            why.append(f"no {name} records")
        elif curve.converged_at is None:
            why.append(f"{name} {curve.in_words}")
        return "; ".join(why)

    def explain(self, key: str | None = None) -> str:
        """The ratio of ``key`` (default the headline), or in words why there is none, in one line."""
        key = key or self.headline_key
        name, what = self.named[key].name, self.named[key].what
        r = self.ratios[key]
        if r is None:
            return f"No {name}/perplexity ratio: {self.why_no_ratio(key)}"
        return (
            f"{what} converges after {r.value:.2f}x the {self.axis.noun} of perplexity "
            f"(95% CI {r.lo:.2f}-{r.hi:.2f}; {self.curve(key).converged_at:,.0f} vs "
            f"{self.axis.at(self.ppl.converged_at)})"
        )

    def settling(self, curve: Curve, eps: float | None = None) -> settling.Settling:
        """T(eps) of a curve, at its default tolerance unless ``eps`` is given."""
        return curve.settle(self.tolerance.eps(curve.log) if eps is None else eps)

    @cached_property
    def tolerance_grids(self) -> dict[str, dict[tuple[float, float], settling.TimeRatio | None]]:
        """Per curve of ``named`` that has records: T_curve(eps_v) / T_ppl(eps_p) with
        its bootstrap CI for every (eps_v, eps_p) of the grid; None where either curve has no
        T(eps) (``why_no_tolerance_ratio`` says why)."""
        grids = {}
        for i, key in enumerate(self.named):
            curve = self.curve(key)
            if curve is None or min(len(curve.tokens), len(self.ppl.tokens)) < settling.MIN_SETTLE_POINTS:
                continue
            v_grid, p_grid = self.tolerance.grid(False), self.tolerance.grid(True)
            grids[key] = settling.tolerance_ratios(
                curve.series(),
                self.ppl.series(),
                [curve.tolerance_eps(e) for e in v_grid],
                [self.ppl.tolerance_eps(e) for e in p_grid],
                n_resamples=self.tolerance.ci_resamples,
                seed=i,
            )
            grids[key] = {
                (ev, ep): grids[key][(curve.tolerance_eps(ev), self.ppl.tolerance_eps(ep))]
                for ev in v_grid
                for ep in p_grid
            }
        return grids

    def tolerance_ratio(
        self, key: str | None = None, cell: tuple[float, float] | None = None
    ) -> settling.TimeRatio | None:
        """T(eps_v) of ``key`` (default the headline) over perplexity's T(eps_p) at ``cell``
        (default: the defaults)."""
        key = key or self.headline_key
        cell = cell or (self.tolerance.validity_tolerance, self.tolerance.ppl_tolerance)
        return self.tolerance_grids.get(key, {}).get(cell)

    def why_no_tolerance_ratio(self, key: str | None = None, cell: tuple[float, float] | None = None) -> str:
        """In words, which curve has no T(eps) at ``cell`` and why."""
        eps_v, eps_p = cell or (self.tolerance.validity_tolerance, self.tolerance.ppl_tolerance)
        key = key or self.headline_key
        name = self.named[key].name
        curve = self.curve(key)
        why = []
        for what, c, eps in ((self.ppl.key, self.ppl, eps_p), (name, curve, eps_v)):
            if c is None:
                why.append(f"no {name} records")
                continue
            s = c.settle(eps)
            if s.state != settling.WITHIN:
                why.append(f"{what} {s.describe(eps_text(eps, c.log), self.axis.unit)}")
        return "; ".join(why)

    def explain_tolerance(self, key: str | None = None) -> str:
        """The time-to-tolerance ratio of ``key`` (default the headline) at the default
        tolerances, within this run, or in words why there is none, in one line."""
        key = key or self.headline_key
        name, what = self.named[key].name, self.named[key].what
        eps_v, eps_p = self.tolerance.validity_tolerance, self.tolerance.ppl_tolerance
        tol = f"{eps_text(eps_v, False)} vs {eps_text(eps_p, True)}"
        r = self.tolerance_ratio(key)
        if r is None:
            return f"No {name}/perplexity time-to-tolerance ratio ({tol}): {self.why_no_tolerance_ratio(key)}"
        t_v, t_p = self.settling(self.curve(key)).at, self.settling(self.ppl).at
        return (
            f"Within this run, {what} comes within {eps_text(eps_v, False)} of its final level after "
            f"{r.value:.2f}x the {self.axis.noun} perplexity needs to come within {eps_text(eps_p, True)} of "
            f"its own (95% CI {ci_text(r)}; {t_v:,.0f} vs {self.axis.at(t_p)})"
        )


def convergence(
    metrics_rows: Iterable[dict[str, Any]],
    probe_records: Iterable[Record],
    tolerance: Tolerance | None = None,
    axis: Axis = TOKENS_AXIS,
) -> Convergence:
    """When perplexity and every judged curve (``analysis.judged``) came within ``tolerance`` of its
    final level along ``axis``, all by one detector, so their times compare. Perplexity is
    ``val/ppl``, else (records without a training run) the first one a probe recorded.
    """
    points = ((r.get(keys.TOKENS_SEEN), r.get(keys.val_ppl())) for r in metrics_rows)
    ppl = make_curve(keys.val_ppl(), points, log=True)
    cps = checkpoints(probe_records)
    present = {k for c in cps for k in c.metrics}
    declared = judged()
    curves = [j for j in declared if j.key in present]
    validity = {j.key: validity_curve(cps, j.key, j.noise_key) for j in curves if j.noise == "greedy"}
    p_valid = {j.key: p_valid_curve(cps, j.key, j.noise_key) for j in curves if j.noise == "se"}
    named = {j.key: j.ratio for j in declared if j.ratio is not None}
    name = VAL_PPL_NAME
    for probed in perplexities() if not ppl.tokens else ():
        heldout = make_curve(probed.key, ((c.tokens_seen, c.value(probed.key)) for c in cps), log=True)
        if heldout.tokens:
            ppl, name = heldout, probed.name
            break
    return Convergence(ppl, validity, p_valid, (tolerance or Tolerance()).check(), axis, named, name)


@dataclass(frozen=True)
class ProbeCost:
    """The share of a training run's wall time spent in its probes, from its logs alone."""

    seconds: dict[str, float]  # probe -> seconds over every checkpoint
    wall: float  # seconds since training started, probes included

    @property
    def share(self) -> float:
        return sum(self.seconds.values()) / self.wall

    def describe(self) -> str:
        parts = ", ".join(f"{p} {s:.0f} s" for p, s in self.seconds.items())
        total = sum(self.seconds.values())
        return f"{total:.0f} s of {self.wall:.0f} s of training ({self.share:.1%}): {parts}"


def probe_cost(metrics_rows: Iterable[dict[str, Any]]) -> ProbeCost | None:
    """Logged ``perf/probe_seconds/<probe>`` summed per probe, against the last logged
    ``perf/wall_seconds``; None when the run logged no wall time."""
    seconds: dict[str, float] = {}
    wall = None
    for row in metrics_rows:
        for key, value in row.items():
            if key.startswith(keys.probe_seconds("")) and finite(value) is not None:
                name = key.removeprefix(keys.probe_seconds(""))
                seconds[name] = seconds.get(name, 0.0) + value
        wall = finite(row.get(keys.perf("wall_seconds"))) or wall
    return ProbeCost(seconds, wall) if wall else None
