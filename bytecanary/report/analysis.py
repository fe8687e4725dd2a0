"""The numbers behind ``bytecanary report``.

Pure functions over the rows of ``metrics.jsonl`` and ``probes.jsonl``: whether validation
perplexity and Level 0 validity each converged, kept moving, or never changed beyond their
noise, with one detector for every curve (``stats.detect_convergence``), and the ratio of
their convergence tokens only when both converged. "Beyond Perplexity: UTF-8 Validity in
Byte-aware LMs" (arXiv:2606.14122, abstract and section 1) finds that validity needs about
twice the tokens perplexity needs (4.2B vs 2.1B). Greedy validity (V_partial, strict) is a
step function of the weights: prompts share their structure and flip together, so its
scatter between checkpoints can dwarf the binomial SE of its n samples (0.6 <-> 0.93
against 0.012 on the tiny CPU run). A greedy point's SE is the larger of the two
(``validity_curve``). Expected validity (``p_valid``) is smooth in the weights and is
judged on its own SE over the samples (``p_valid_se``). Perplexity is judged on its log
(the validation loss), its noise estimated from the curve itself (``stats.curve_noise``):
the validation set is fixed, so what scatters is the model between checkpoints. Beside
that flat-tail verdict, the time to tolerance (issue 36): where each curve comes within a
stated tolerance of its final level for good (``Tolerance``, ``Curve.settle``), and the
ratio of validity's to perplexity's with a bootstrap CI over a grid of tolerances
(``Convergence.tolerance_grids``): the paper's "stabilises", which holds within any
finished run, where a power-law loss is never flat. The MCQA protocols across checkpoints
are ``mcqa_trends``. Absent keys are absent data, never zeros.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from bytecanary import display, keys, records, settling, stats
from bytecanary.data.languages import LANGUAGES
from bytecanary.records import Record
from bytecanary.report.axis import TOKENS_AXIS, Axis
from bytecanary.settling import Tolerance, ci_text, eps_text

HEADLINE_KEY = keys.level0()  # V_partial over all languages and tiers: the paper's ratio
P_VALID_KEY = keys.level0(metric="p_valid")  # expected validity over all languages and tiers
VALIDITY_KEYS = tuple(  # greedy validity
    keys.level0(lang, "all", m) for lang in ("all", *LANGUAGES) for m in ("partial", "strict")
)
P_VALID_KEYS = tuple(keys.level0(lang, "all", "p_valid") for lang in ("all", *LANGUAGES))
RATIO_CURVES = {  # key -> (short name, what it is), for the lines that state a ratio
    HEADLINE_KEY: ("validity", "Level 0 validity (all, partial)"),
    P_VALID_KEY: ("p_valid", "Level 0 expected validity (all, p_valid)"),
}
# where a curve's noise comes from, as the convergence table says it
FROM_CURVE, FROM_GREEDY, FROM_P_VALID_SE = "curve", "max(probe n, local scatter)", "probe (p_valid_se)"


PPL_NAMES = {keys.val_ppl(): "validation perplexity", keys.heldout(): "held-out perplexity (ppl probe)"}


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


def validity_curve(cps: Sequence[Checkpoint], key: str) -> Curve:
    """A greedy Level 0 validity curve, each point's SE the larger of the binomial one from
    the ``n`` its probe recorded (``stats.proportion_se``: V_partial is a mean of scores in
    [0, 1], so the same SE bounds it) and the scatter of the checkpoints around it
    (``stats.local_noise``). Not their sum: the scatter already holds the sampling noise.
    The binomial SE floors a scatter that a smooth stretch of the curve drives to 0."""
    n_key = keys.level0(display.language_of(key) or "all", "all", "n")
    curve = make_curve(
        key, ((c.tokens_seen, c.value(key), stats.proportion_se(c.value(key), c.value(n_key))) for c in cps)
    )
    if len(curve.tokens) < 3:
        return curve
    scatter = stats.local_noise(curve.tokens, curve.values)
    return _with_se(curve, np.maximum(scatter, curve.se or 0.0), FROM_GREEDY)


def p_valid_curve(cps: Sequence[Checkpoint], key: str) -> Curve:
    """An expected-validity curve, each point's SE the ``p_valid_se`` its probe recorded
    (judged on its own scatter where a point lacks one)."""
    se_key = key.removesuffix("p_valid") + "p_valid_se"
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

    @property
    def ppl_name(self) -> str:
        """Which perplexity the curve is: the run's validation one, or the ``ppl`` probe's."""
        return PPL_NAMES[self.ppl.key]

    def describe(self, curve: Curve) -> str:
        """What ``curve`` did, with the evidence, its points placed on this report's axis."""
        return curve.verdict.describe(self.axis.unit) if curve.verdict else curve.describe

    @property
    def headline(self) -> Curve | None:
        return self.validity.get(HEADLINE_KEY)

    def curve(self, key: str) -> Curve | None:
        return self.validity.get(key) or self.p_valid.get(key)

    def ratio_to_ppl(self, curve: Curve) -> float | None:
        """The curve's convergence tokens over perplexity's; None unless both converged."""
        if curve.converged_at is None or self.ppl.converged_at is None:
            return None
        return curve.converged_at / self.ppl.converged_at

    @property
    def validity_tokens(self) -> float | None:
        return self.headline.converged_at if self.headline else None

    @cached_property
    def ratios(self) -> dict[str, stats.RatioEstimate | None]:
        """Per curve of ``RATIO_CURVES``, its over perplexity's convergence tokens with the
        bootstrap CI; None unless both converged."""
        out = {}
        for key in RATIO_CURVES:
            curve = self.curve(key)
            both = curve is not None and self.ratio_to_ppl(curve) is not None
            out[key] = stats.convergence_ratio(curve.series(), self.ppl.series()) if both else None
        return out

    @property
    def ratio(self) -> stats.RatioEstimate | None:
        """The headline: V_partial (``all/all/partial``) over perplexity, the paper's ratio."""
        return self.ratios[HEADLINE_KEY]

    @property
    def p_valid_ratio(self) -> stats.RatioEstimate | None:
        """Expected validity (``all/all/p_valid``) over perplexity, stated beside the headline."""
        return self.ratios[P_VALID_KEY]

    def why_no_ratio(self, key: str = HEADLINE_KEY) -> str:
        """In words, which curve did not converge and what it did instead."""
        name = RATIO_CURVES[key][0]
        curve = self.curve(key)
        why = [f"{self.ppl.key} {self.ppl.in_words}"] if self.ppl.converged_at is None else []
        if curve is None:
            why.append(f"no Level 0 {name} records")
        elif curve.converged_at is None:
            why.append(f"{name} {curve.in_words}")
        return "; ".join(why)

    def explain(self, key: str = HEADLINE_KEY) -> str:
        """The ratio of ``key`` (default the headline), or in words why there is none, in one line."""
        name, what = RATIO_CURVES[key]
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
        """Per curve of ``RATIO_CURVES`` that has records: T_curve(eps_v) / T_ppl(eps_p) with
        its bootstrap CI for every (eps_v, eps_p) of the grid; None where either curve has no
        T(eps) (``why_no_tolerance_ratio`` says why)."""
        grids = {}
        for i, key in enumerate(RATIO_CURVES):
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
        self, key: str = HEADLINE_KEY, cell: tuple[float, float] | None = None
    ) -> settling.TimeRatio | None:
        """T(eps_v) of ``key`` over perplexity's T(eps_p) at ``cell`` (default: the defaults)."""
        cell = cell or (self.tolerance.validity_tolerance, self.tolerance.ppl_tolerance)
        return self.tolerance_grids.get(key, {}).get(cell)

    def why_no_tolerance_ratio(self, key: str = HEADLINE_KEY, cell: tuple[float, float] | None = None) -> str:
        """In words, which curve has no T(eps) at ``cell`` and why."""
        eps_v, eps_p = cell or (self.tolerance.validity_tolerance, self.tolerance.ppl_tolerance)
        name = RATIO_CURVES[key][0]
        curve = self.curve(key)
        why = []
        for what, c, eps in ((self.ppl.key, self.ppl, eps_p), (name, curve, eps_v)):
            if c is None:
                why.append(f"no Level 0 {name} records")
                continue
            s = c.settle(eps)
            if s.state != settling.WITHIN:
                why.append(f"{what} {s.describe(eps_text(eps, c.log), self.axis.unit)}")
        return "; ".join(why)

    def explain_tolerance(self, key: str = HEADLINE_KEY) -> str:
        """The time-to-tolerance ratio of ``key`` at the default tolerances, within this run,
        or in words why there is none, in one line."""
        name, what = RATIO_CURVES[key]
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
    """What perplexity, Level 0 partial/strict validity and p_valid (all, en, ja, ko, zh)
    did along ``axis``, all judged by the same detector, and when each came within its
    ``tolerance`` (default ``Tolerance()``) of its final level. Perplexity is the run's
    ``val/ppl``, else (records without a training run) the ``ppl`` probe's held-out one."""
    points = ((r.get(keys.TOKENS_SEEN), r.get(keys.val_ppl())) for r in metrics_rows)
    ppl = make_curve(keys.val_ppl(), points, log=True)
    cps = checkpoints(probe_records)
    heldout = make_curve(keys.heldout(), ((c.tokens_seen, c.value(keys.heldout())) for c in cps), log=True)
    present = {k for c in cps for k in c.metrics}
    validity = {key: validity_curve(cps, key) for key in VALIDITY_KEYS if key in present}
    p_valid = {key: p_valid_curve(cps, key) for key in P_VALID_KEYS if key in present}
    ppl = heldout if heldout.tokens and not ppl.tokens else ppl
    return Convergence(ppl, validity, p_valid, (tolerance or Tolerance()).check(), axis)


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
