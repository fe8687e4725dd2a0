"""Statistics the probes and the convergence report share: ECE, exact McNemar, bootstrap CIs (FSI,
arXiv:2607.09665), correlations, the fixed-effects fit, and the convergence detector (arXiv:2606.14122)
with curve noise (docs/report-and-wandb.md). Plain numpy and ``math``: no torch or scipy.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike


def ece(confidence: ArrayLike, correct: ArrayLike, n_bins: int = 10) -> float:
    """Expected calibration error over ``n_bins`` equal-width bins of [0, 1]:
    sum over bins of |B_m|/N * |acc(B_m) - conf(B_m)|. Bin m holds (m/M, (m+1)/M];
    a confidence of exactly 0 falls in the first bin."""
    conf = np.asarray(confidence, dtype=np.float64)
    hit = np.asarray(correct, dtype=np.float64)
    if conf.shape != hit.shape or conf.ndim != 1:
        raise ValueError("confidence and correct must be 1-D arrays of the same length")
    if len(conf) == 0:
        return 0.0
    bins = np.clip(np.ceil(conf * n_bins).astype(np.int64) - 1, 0, n_bins - 1)
    gap = np.abs(np.bincount(bins, hit, n_bins) - np.bincount(bins, conf, n_bins))
    return float(gap.sum() / len(conf))


def _discordant(correct_a: ArrayLike, correct_b: ArrayLike) -> tuple[int, int]:
    a = np.asarray(correct_a, dtype=bool)
    b = np.asarray(correct_b, dtype=bool)
    if a.shape != b.shape:
        raise ValueError("McNemar needs paired results: correct_a and correct_b differ in shape")
    return int((a & ~b).sum()), int((~a & b).sum())


def mcnemar_exact(correct_a: ArrayLike, correct_b: ArrayLike) -> float:
    """Two-sided exact McNemar p-value: binomial(n = discordant pairs, 0.5) on the
    smaller discordant count."""
    b, c = _discordant(correct_a, correct_b)
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(b, c) + 1)) / 2**n
    return min(1.0, 2 * tail)


def bootstrap_ci(
    values: ArrayLike,
    statistic: Callable[[np.ndarray], float] = np.mean,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``statistic`` with a fixed seed (reproducible)."""
    data = np.asarray(values)
    drawn = [statistic(data[rows]) for rows in resamples(len(data), n_resamples, seed)]
    return percentile_ci(drawn, confidence)


def resamples(n: int, n_resamples: int, seed: int = 0) -> np.ndarray:
    """The indices of ``n_resamples`` bootstrap resamples of ``n`` values, one row each: several
    statistics of the same resamples need them drawn once."""
    if n == 0:
        raise ValueError("a bootstrap needs at least one value")
    return np.random.default_rng(seed).integers(0, n, (n_resamples, n))


def percentile_ci(statistics: ArrayLike, confidence: float = 0.95) -> tuple[float, float]:
    """The percentile interval of a statistic's values over bootstrap resamples."""
    tail = (1 - confidence) / 2 * 100
    lo, hi = np.percentile(statistics, [tail, 100 - tail])
    return float(lo), float(hi)


@dataclass(frozen=True)
class Gap:
    """A difference of two means with its bootstrap CI."""

    value: float
    lo: float
    hi: float


# one stratum of clusters: per cluster the sums of its samples' values (C, M) and its sample count (C,)
Stratum = tuple[np.ndarray, np.ndarray]


def clustered_gaps(
    a: Sequence[Stratum],
    b: Sequence[Stratum],
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> list[Gap]:
    """Per column M, mean(a) - mean(b) with a percentile bootstrap CI that redraws whole clusters within
    each stratum, so correlated samples count once; the draws depend only on the strata's sizes and
    ``seed``, so the curve of gaps is paired across checkpoints and columns."""
    rng = np.random.default_rng(seed)
    tail = (1 - confidence) / 2 * 100
    means = []
    for side in (a, b):
        strata = [(s, n) for s, n in side if len(n)]
        if not strata:
            raise ValueError("each side needs at least one cluster")
        total = sum(s.sum(axis=0) for s, _ in strata)
        count = sum(float(n.sum()) for _, n in strata)
        draws = [rng.integers(0, len(n), (n_resamples, len(n))) for _, n in strata]
        resampled = sum(s[d].sum(axis=1) for (s, _), d in zip(strata, draws, strict=True))  # (R, M)
        counts = sum(n[d].sum(axis=1) for (_, n), d in zip(strata, draws, strict=True))  # (R,)
        means.append((total / count, resampled / counts[:, None]))
    (mean_a, boot_a), (mean_b, boot_b) = means
    lo, hi = np.percentile(boot_a - boot_b, [tail, 100 - tail], axis=0)
    return [
        Gap(float(v), float(low), float(high)) for v, low, high in zip(mean_a - mean_b, lo, hi, strict=True)
    ]


def pearson_r(x: ArrayLike, y: ArrayLike) -> float:
    """Pearson correlation; nan when either input is constant."""
    xc = np.asarray(x, dtype=np.float64) - np.mean(x)
    yc = np.asarray(y, dtype=np.float64) - np.mean(y)
    denom = math.sqrt(float(xc @ xc) * float(yc @ yc))
    return float(xc @ yc / denom) if denom > 0 else math.nan


def kendall_tau_b(x: ArrayLike, y: ArrayLike) -> float:
    """Kendall's tau-b (ties corrected): sum of sign products over pairs divided by
    sqrt(pairs untied in x * pairs untied in y). O(n^2), fine for probe-sized inputs."""
    xs = np.asarray(x, dtype=np.float64)
    ys = np.asarray(y, dtype=np.float64)
    sx = np.sign(xs[:, None] - xs[None, :])
    sy = np.sign(ys[:, None] - ys[None, :])
    denom = math.sqrt(float(np.abs(sx).sum()) * float(np.abs(sy).sum()))
    return float((sx * sy).sum() / denom) if denom > 0 else math.nan


def _dummies(levels: Sequence, keep_first: bool) -> list[np.ndarray]:
    """One 0/1 column per level (in order of first appearance), the first one dropped
    unless ``keep_first``."""
    values = list(levels)
    uniq = list(dict.fromkeys(values))
    return [np.array([v == u for v in values], dtype=np.float64) for u in uniq[0 if keep_first else 1 :]]


def fixed_effects_fit(y: ArrayLike, x: ArrayLike, factors: dict[str, Sequence]) -> tuple[float, float]:
    """OLS of y = beta * x + one fixed effect per level of each factor, FSI (arXiv:2607.09665) eq. 5
    unweighted; returns (beta, SE), or raises ValueError when x is absorbed by the effects or no
    residual degrees of freedom are left.
    """
    ys = np.asarray(y, dtype=np.float64)
    xs = np.asarray(x, dtype=np.float64)
    n = len(ys)
    if xs.shape != ys.shape or ys.ndim != 1:
        raise ValueError("fixed_effects_fit: y and x must be 1-D arrays of the same length")
    effects = [np.ones(n)] if not factors else []
    for i, (name, levels) in enumerate(factors.items()):
        if len(levels) != n:
            raise ValueError(f"fixed_effects_fit: factor {name!r} has {len(levels)} values for {n} rows")
        # the first factor keeps every level (it stands in for the intercept), the others drop their
        # first: the effects are identified, and beta is the same whichever level is dropped
        effects += _dummies(levels, keep_first=i == 0)
    design = np.column_stack([xs, *effects])
    p = int(np.linalg.matrix_rank(design))
    if p <= int(np.linalg.matrix_rank(np.column_stack(effects))):
        raise ValueError("fixed_effects_fit: x is constant within the fixed effects (beta not identified)")
    if n - p <= 0:
        raise ValueError(f"fixed_effects_fit: no residual degrees of freedom ({n} rows, {p} parameters)")
    coef, *_ = np.linalg.lstsq(design, ys, rcond=None)
    resid = ys - design @ coef
    sigma2 = float(resid @ resid) / (n - p)  # SE = sqrt(RSS / (n - p) * (X'X)^-1[0, 0]), p the design's rank
    return float(coef[0]), math.sqrt(sigma2 * float(np.linalg.pinv(design.T @ design)[0, 0]))


# --- convergence ------------------------------------------------------------------------

CONVERGED, MOVING, NO_CHANGE = "converged", "still moving", "no change"
STATE_WORDS = {  # what a report says of a curve in each state
    CONVERGED: "converges",
    MOVING: "is still moving at the end of the run",
    NO_CHANGE: "shows no change beyond noise",
}
MIN_TAIL = 4  # a flat tail holds at least this many checkpoints
SLOPE_Z = 2.0  # a tail is flat when |slope| <= SLOPE_Z standard errors...
BAND_Z = 3.5  # ...every tail point lies within BAND_Z noise of the tail's mean...
RATE_FRACTION = 0.5  # ...and the slope's upper bound is under half the rate the curve came at
MOVE_Z = 3.0  # the curve moved when a point before the tail departs from it by MOVE_Z noise


@dataclass(frozen=True)
class Verdict:
    """What a curve did, with the evidence: ``state`` is ``converged`` (flat from
    ``converged_at`` on, after a change beyond noise), ``still moving`` (no flat tail at
    the end of the run) or ``no change`` (flat, within noise, from the start)."""

    state: str
    converged_at: float | None
    slope: float
    """Per decade of x, over the last ``n_tail`` points: the flat tail, or (still moving) the
    second half of the curve."""
    slope_se: float
    moved: float
    """Largest departure of a point before the tail from the tail's mean, in noise units."""
    noise: float
    """Median noise (standard error) of one point."""
    n_tail: int

    def describe(self, unit: str = "tokens seen") -> str:
        """The verdict in words, for a line such as ``val/ppl <describe>``."""
        slope = f"slope {self.slope:+.2g} +- {self.slope_se:.2g} per decade, last {self.n_tail} points"
        if self.state == CONVERGED:
            before = f"{self.moved:.0f}x noise away before"
            return f"{STATE_WORDS[CONVERGED]} at {self.converged_at:,.0f} {unit} ({slope}; {before})"
        if self.state == MOVING:
            return f"{STATE_WORDS[MOVING]} ({slope})"
        return f"{STATE_WORDS[NO_CHANGE]} (noise {self.noise:.2g} a point; {slope})"


def proportion_se(value: float | None, n: float | None) -> float | None:
    """SE of a share (or of a mean of scores in [0, 1], as a bound) over n samples, with the
    share pulled off 0 and 1 by one success and one failure so it is never 0."""
    if value is None or n is None or n < 1:
        return None
    p = (value * n + 1) / (n + 2)
    return math.sqrt(p * (1 - p) / n)


def _scaled_residuals(x: ArrayLike, y: ArrayLike) -> np.ndarray:
    """Per inner point (x ascending), its squared residual from the line through its two neighbours (in
    log x) over what unit-variance noise would give: a local line cancels the trend, so each is an
    unbiased estimate of the point's noise variance."""
    lx, ys = np.log10(np.asarray(x, dtype=np.float64)), np.asarray(y, dtype=np.float64)
    if len(ys) < 3:
        raise ValueError("the noise of a curve needs at least three points")
    w = (lx[1:-1] - lx[:-2]) / (lx[2:] - lx[:-2])
    resid = ys[1:-1] - ((1 - w) * ys[:-2] + w * ys[2:])
    return resid**2 / (1 + w**2 + (1 - w) ** 2)  # Var(resid) / sigma^2 for independent noise


CHI2_MEDIAN = 0.45494  # median of chi-square with 1 degree of freedom


def curve_noise(x: ArrayLike, y: ArrayLike) -> float:
    """Noise of one point of a curve that has no measured standard error, from the curve
    itself: the scatter of each inner point around its neighbours, robustly (median, scaled
    to a standard deviation), one number for the whole curve."""
    return math.sqrt(float(np.median(_scaled_residuals(x, y))) / CHI2_MEDIAN)


LOCAL_HALF = 3  # local_noise pools the 2 * LOCAL_HALF + 1 nearest inner points


def local_noise(x: ArrayLike, y: ArrayLike, half: int = LOCAL_HALF, robust: bool = False) -> np.ndarray:
    """Noise of each point (x ascending): the root mean of the scaled squared residuals of the
    ``2 * half + 1`` nearest inner points, local because a greedy metric's scatter depends on the phase of
    training (docs/report-and-wandb.md); ``robust`` takes the median, so one sharp bend is not noise."""
    scaled = _scaled_residuals(x, y)
    size = min(2 * half + 1, len(scaled))
    starts = np.clip(np.arange(len(scaled) + 2) - 1 - half, 0, len(scaled) - size)
    windows = scaled[starts[:, None] + np.arange(size)]
    if robust:
        return np.sqrt(np.median(windows, axis=1) / CHI2_MEDIAN)
    # a mean, not a median: a metric flipping between two values repeats them, and a point equal
    # to both neighbours has residual 0
    return np.sqrt(windows.mean(axis=1))


def _line(lx: np.ndarray, y: np.ndarray, se: np.ndarray) -> tuple[float, float]:
    """Weighted least-squares slope of y on lx and its SE; the SE grows by the residual
    scatter when that exceeds the stated noise (Birge ratio), so jitter between
    checkpoints beyond sampling noise cannot pass for a slope."""
    w = 1 / se**2
    centred = lx - (w * lx).sum() / w.sum()
    sxx = float((w * centred**2).sum())
    slope = float((w * centred * y).sum()) / sxx
    resid = y - (w * y).sum() / w.sum() - slope * centred
    birge = float((w * resid**2).sum()) / max(1, len(y) - 2)
    return slope, math.sqrt(max(1.0, birge) / sxx)


def detect_convergence(x: ArrayLike, y: ArrayLike, se: ArrayLike | None = None) -> Verdict:
    """Whether a curve converged, kept moving, or never changed beyond its noise: the first checkpoint
    with a flat tail on log ``x`` (docs/report-and-wandb.md); ``se`` per point, or None to estimate one
    noise (``curve_noise``). The same rule serves perplexity (on its log) and every validity curve.
    """
    xs, ys = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if xs.shape != ys.shape or xs.ndim != 1 or len(xs) < MIN_TAIL or (xs <= 0).any():
        raise ValueError(f"x and y must be 1-D, of the same length, at least {MIN_TAIL} points, x > 0")
    order = np.argsort(xs, kind="stable")
    xs, ys, lx = xs[order], ys[order], np.log10(xs[order])
    noise = np.full(len(ys), curve_noise(xs, ys)) if se is None else np.asarray(se, np.float64)[order]
    noise = np.maximum(noise, 1e-12 * (1 + np.abs(ys).max()))  # a noise-free curve still has a scale
    for k in range(len(ys) - MIN_TAIL + 1):
        slope, slope_se = _line(lx[k:], ys[k:], noise[k:])
        weights = 1 / noise[k:] ** 2
        mean = float((weights * ys[k:]).sum() / weights.sum())
        if abs(slope) > SLOPE_Z * slope_se or (np.abs(ys[k:] - mean) > BAND_Z * noise[k:]).any():
            continue
        mean_se = math.sqrt(1 / weights.sum())
        moved = float(np.max(np.abs(ys[:k] - mean) / np.sqrt(noise[:k] ** 2 + mean_se**2), initial=0.0))
        evidence = (slope, slope_se, moved, float(np.median(noise)), len(ys) - k)
        if moved <= MOVE_Z:
            return Verdict(NO_CHANGE, None, *evidence)
        rate = abs(mean - ys[0]) / (lx[k] - lx[0])
        if abs(slope) + SLOPE_Z * slope_se <= RATE_FRACTION * rate:
            return Verdict(CONVERGED, float(xs[k]), *evidence)
    half = max(MIN_TAIL, len(ys) // 2)  # the evidence: how the second half of the run moves
    slope, slope_se = _line(lx[-half:], ys[-half:], noise[-half:])
    return Verdict(MOVING, None, slope, slope_se, math.nan, float(np.median(noise)), half)


@dataclass(frozen=True)
class RatioEstimate:
    """x where one curve converged over x where another did, with a parametric bootstrap CI."""

    value: float
    lo: float
    hi: float
    both_converged: float
    """Share of the resamples in which both curves converged: the CI is over those."""


Series = tuple[ArrayLike, ArrayLike, ArrayLike | None]  # (x, y, se or None), as detect_convergence takes


def convergence_ratio(
    late: Series, early: Series, n_resamples: int = 1000, confidence: float = 0.95, seed: int = 0
) -> RatioEstimate | None:
    """converged_at(late) / converged_at(early), or None unless both converged, with a parametric bootstrap
    CI (points perturbed by their noise, the detector rerun on both curves). Remembered per curves:
    the report and its terminal summary state the same ratio, and the bootstrap is its cost."""
    return _convergence_ratio(_frozen(late), _frozen(early), n_resamples, confidence, seed)


def _frozen(series: Series) -> tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...] | None]:
    """A series as exact float64 tuples, a key of the memo."""
    x, y, se = (None if a is None else tuple(np.asarray(a, dtype=np.float64).tolist()) for a in series)
    return x, y, se


@functools.lru_cache(maxsize=64)
def _convergence_ratio(
    late: Series, early: Series, n_resamples: int, confidence: float, seed: int
) -> RatioEstimate | None:
    verdicts = [detect_convergence(*series) for series in (late, early)]
    if any(v.state != CONVERGED for v in verdicts):
        return None
    rng = np.random.default_rng(seed)
    curves = []
    for x, y, se in (late, early):
        ys = np.asarray(y, dtype=np.float64)
        sd = np.full(len(ys), curve_noise(x, ys)) if se is None else np.asarray(se, dtype=np.float64)
        # a resample holds the observed noise and the added noise: the detector is told sqrt(2) x the SE
        curves.append((x, ys, sd, None if se is None else sd * math.sqrt(2)))
    ratios = []
    for _ in range(n_resamples):
        at = [detect_convergence(x, ys + rng.normal(0.0, sd), se).converged_at for x, ys, sd, se in curves]
        if at[0] is not None and at[1] is not None:
            ratios.append(at[0] / at[1])
    value = verdicts[0].converged_at / verdicts[1].converged_at
    tail = (1 - confidence) / 2 * 100
    lo, hi = np.percentile(ratios, [tail, 100 - tail]) if ratios else (math.nan, math.nan)
    return RatioEstimate(value, float(lo), float(hi), len(ratios) / n_resamples)
