"""Time to tolerance (arXiv:2606.14122, abstract: "stabilises" after 2.1B tokens, validity after 4.2B):
T(eps), the first checkpoint from which a curve stays within eps of its final level, which any
finished run has, and bootstrap CIs of ratios of T (docs/report-and-wandb.md). Plain numpy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from bytecanary.errors import BytecanaryError
from bytecanary.stats import Series, local_noise

WITHIN, NOT_WITHIN, TOO_NOISY, TOO_FEW = "within", "not within", "too noisy", "too few points"
MIN_STAY = 3  # the curve stays within eps for at least this many checkpoints (else: not within)
MIN_SETTLE_POINTS = 5  # fewer points: no time to tolerance
RESOLVE_Z = 3.0  # a point's smoothed level is used when its SE is at most eps / RESOLVE_Z...
MAX_HALF = 3  # ...over a window of at most 2 * MAX_HALF + 1 checkpoints (local_noise's width)
TOLERANCE_HALF = 6  # the scatter behind a point's noise: the median over 2 * this + 1 residuals
NOISY_SHARE = 0.5  # too noisy: more than this share of the stay cannot tell eps
FINAL_Z = 3.0  # the final tail grows while the point added lies within FINAL_Z noise of it...
FINAL_SLOPE_Z = 2.0  # ...and its slope stays within FINAL_SLOPE_Z SE of 0
MEDIAN_SE = math.sqrt(math.pi / 2)  # SE of a median of w normal points: about this / sqrt(w) SD


@dataclass(frozen=True)
class Settling:
    """Where a curve came within ``eps`` of its final level for good (``state`` ``within``, ``at`` that
    checkpoint's x), or why it has no such point: ``not within``, ``too noisy``, ``too few points``."""

    state: str
    at: float | None
    eps: float
    """The tolerance in the units the rule ran in (perplexity: log of 1 + the relative eps)."""
    final: float
    final_se: float
    final_points: int
    """How many of the last checkpoints the final level is the mean of."""
    noise: float
    """Median noise (SE) of one point: the larger of its sampling SE and the local scatter."""

    def describe(self, eps_text: str, unit: str = "tokens seen") -> str:
        if self.state == WITHIN:
            return f"within {eps_text} of its final level from {self.at:,.0f} {unit}"
        if self.state == NOT_WITHIN:
            return f"not within {eps_text} of its final level before its last {MIN_STAY} checkpoints"
        if self.state == TOO_NOISY:
            return f"too noisy to tell {eps_text} (noise {self.noise:.2g} a point)"
        return f"has too few points (< {MIN_SETTLE_POINTS})"


def tolerance_noise(x: ArrayLike, y: ArrayLike, se: ArrayLike | None = None) -> np.ndarray:
    """Each point's noise for the tolerance rule: the larger of its sampling SE and the robust scatter of
    the checkpoints around it (training noise can dwarf the SE), floored at a tiny fraction of the scale."""
    ys = np.asarray(y, dtype=np.float64)
    noise = local_noise(x, ys, half=TOLERANCE_HALF, robust=True)
    if se is not None:
        noise = np.maximum(noise, np.asarray(se, dtype=np.float64))
    return np.maximum(noise, 1e-9 * (1 + np.abs(ys).max()))


def smoothing_halves(noise: ArrayLike, eps: float) -> np.ndarray:
    """Per point, the half-width h (1..``MAX_HALF``) of the narrowest window of 2h + 1 checkpoints whose
    median knows the level to eps / ``RESOLVE_Z`` at the point's own noise (so a noisy neighbour's does not
    spread), or -1 where even the widest does not; at least 3 points, so one noisy point never decides."""
    sd = np.asarray(noise, dtype=np.float64)
    halves = np.full(len(sd), -1)
    for h in range(MAX_HALF, 0, -1):  # narrowest last, so it wins
        halves[RESOLVE_Z * MEDIAN_SE * sd / math.sqrt(min(2 * h + 1, len(sd))) <= eps] = h
    return halves


def running_median(y_BN: np.ndarray, halves: np.ndarray) -> np.ndarray:
    """Median of each point's window of 2h + 1 checkpoints (shifted, not cut, at the ends;
    NaN where h is -1). On a monotone stretch it is the point itself."""
    n = y_BN.shape[-1]
    out = np.full(y_BN.shape, np.nan)
    for h in np.unique(halves[halves >= 0]):
        at = np.flatnonzero(halves == h)
        w = min(2 * int(h) + 1, n)
        idx = np.clip(at - h, 0, n - w)[:, None] + np.arange(w)
        out[..., at] = np.median(y_BN[..., idx], axis=-1)
    return out


def final_level(
    x: ArrayLike, y_BN: np.ndarray, noise: ArrayLike
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(level, its SE, first index of the tail) per curve: the noise-weighted mean of the last ``MIN_STAY``
    checkpoints, grown back while the added one lies within ``FINAL_Z`` noise of those after it and the
    tail's slope per decade stays within ``FINAL_SLOPE_Z`` SE of 0."""
    lx, sd = np.log10(np.asarray(x, dtype=np.float64)), np.asarray(noise, dtype=np.float64)
    lx = lx - lx.mean()  # centred: the sums below cancel less
    y_BN = np.atleast_2d(y_BN)
    n = y_BN.shape[1]
    w = 1 / sd**2
    # sums over the suffix from k, for every k: weights, x, x^2 (shared), y and x*y (per curve)
    sw, sx, sxx = (np.cumsum((w * lx**p)[::-1])[::-1] for p in (0, 1, 2))
    sy, sxy = (np.cumsum((w * lx**p * y_BN)[:, ::-1], axis=1)[:, ::-1] for p in (0, 1))
    mean = sy / sw
    start = np.full(len(y_BN), max(0, n - MIN_STAY))
    growing = np.ones(len(y_BN), dtype=bool)
    for k in range(n - MIN_STAY - 1, -1, -1):
        rows = np.flatnonzero(growing)
        det = sw[k] * sxx[k] - sx[k] ** 2  # 0 (to rounding) when one point outweighs the rest
        near = np.abs(y_BN[rows, k] - mean[rows, k + 1]) <= FINAL_Z * np.sqrt(sd[k] ** 2 + 1 / sw[k + 1])
        ok = near
        if det > 1e-12 * sw[k] * sxx[k]:
            slope = (sw[k] * sxy[rows, k] - sx[k] * sy[rows, k]) / det
            ok = near & (np.abs(slope) <= FINAL_SLOPE_Z * math.sqrt(sw[k] / det))
        start[rows[ok]] = k
        growing[rows[~ok]] = False
        if not growing.any():
            break
    rows = np.arange(len(y_BN))
    return mean[rows, start], np.sqrt(1 / sw[start]), start


def settle_indices(
    x: ArrayLike, y_BN: np.ndarray, noise: ArrayLike, eps: float
) -> tuple[np.ndarray, np.ndarray]:
    """The rule on every curve of ``y_BN`` (B curves over one x, one noise): (index of T(eps) or -1, state).
    T follows the last point whose window median (``smoothing_halves``) is not within eps of the final
    level, if the stay lasts ``MIN_STAY``; too noisy where most of the stay's points cannot tell eps."""
    y_BN = np.atleast_2d(np.asarray(y_BN, dtype=np.float64))
    n = y_BN.shape[1]
    halves = smoothing_halves(noise, eps)
    unresolved = halves < 0
    level, _, _ = final_level(x, y_BN, noise)
    smooth = running_median(y_BN, np.where(unresolved, MAX_HALF, halves))
    outside = np.abs(smooth - level[:, None]) > eps
    k = np.where(outside.any(axis=1), n - np.argmax(outside[:, ::-1], axis=1), 0)
    # share of points that cannot tell eps, over the stay from k (at least the last MIN_STAY)
    unresolved_share = (np.cumsum(unresolved[::-1])[::-1] / (n - np.arange(n)))[np.minimum(k, n - MIN_STAY)]
    noisy = unresolved_share > NOISY_SHARE
    reached = ~noisy & (k <= n - MIN_STAY)
    state = np.where(noisy, TOO_NOISY, np.where(reached, WITHIN, NOT_WITHIN))
    return np.where(reached, k, -1), state


def time_to_tolerance(x: ArrayLike, y: ArrayLike, eps: float, se: ArrayLike | None = None) -> Settling:
    """T(eps) of one curve: the first checkpoint from which it stays within ``eps`` (in y's
    units) of its final level (``settle_indices``), its noise the larger of ``se`` and its
    scatter (``tolerance_noise``)."""
    xs, ys = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if xs.shape != ys.shape or xs.ndim != 1 or (xs <= 0).any() or (np.diff(xs) <= 0).any():
        raise ValueError("x and y must be 1-D, of the same length, x > 0 and ascending")
    if eps <= 0:
        raise ValueError(f"the tolerance must be > 0, not {eps}")
    if len(xs) < MIN_SETTLE_POINTS:
        return Settling(TOO_FEW, None, eps, math.nan, math.nan, 0, math.nan)
    noise = tolerance_noise(xs, ys, se)
    level, level_se, start = final_level(xs, ys[None], noise)
    (k,), (state,) = settle_indices(xs, ys[None], noise, eps)
    at = float(xs[k]) if k >= 0 else None
    return Settling(
        str(state),
        at,
        eps,
        float(level[0]),
        float(level_se[0]),
        len(xs) - int(start[0]),
        float(np.median(noise)),
    )


@dataclass(frozen=True)
class TimeRatio:
    """T(eps) of one curve over T(eps) of another, with a bootstrap CI over the resamples in
    which both came within their tolerance (``defined``: their share)."""

    value: float
    lo: float
    hi: float
    defined: float


def _resampled_indices(
    series: Series, eps: Sequence[float], n_resamples: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """(x, T index per eps of the observed curve, then of ``n_resamples`` resamples): each its running
    median plus normal noise of each point's size, judged with the observed curve's noise."""
    x, y, se = series
    xs, ys = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    noise = tolerance_noise(xs, ys, se)
    n = len(ys)
    centred = np.minimum(MAX_HALF, np.minimum(np.arange(n), n - 1 - np.arange(n)))  # never shifted
    centre = running_median(ys[None], centred)[0]
    y_BN = np.vstack([ys, centre + rng.normal(0.0, 1.0, (n_resamples, len(ys))) * noise])
    return xs, np.stack([settle_indices(xs, y_BN, noise, e)[0] for e in eps])


def tolerance_ratios(
    late: Series,
    early: Series,
    eps_late: Sequence[float],
    eps_early: Sequence[float],
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[tuple[float, float], TimeRatio | None]:
    """T_late(e_late) / T_early(e_early) for every pair of tolerances, with a parametric bootstrap CI
    (both curves resampled, the whole rule rerun); None where either curve has no T(eps)
    (``time_to_tolerance`` says why)."""
    rng = np.random.default_rng(seed)
    x_late, k_late = _resampled_indices(late, eps_late, n_resamples, rng)
    x_early, k_early = _resampled_indices(early, eps_early, n_resamples, rng)
    tail = (1 - confidence) / 2 * 100
    out: dict[tuple[float, float], TimeRatio | None] = {}
    for i, el in enumerate(eps_late):
        for j, ee in enumerate(eps_early):
            a, b = k_late[i], k_early[j]
            if a[0] < 0 or b[0] < 0:
                out[(el, ee)] = None
                continue
            both = (a[1:] >= 0) & (b[1:] >= 0)
            ratios = x_late[a[1:][both]] / x_early[b[1:][both]]
            lo, hi = np.percentile(ratios, [tail, 100 - tail]) if both.any() else (math.nan, math.nan)
            out[(el, ee)] = TimeRatio(
                float(x_late[a[0]] / x_early[b[0]]), float(lo), float(hi), float(both.mean())
            )
    return out


@dataclass(frozen=True)
class Tolerance:
    """Time to tolerance: how close to its final level a curve must stay (the defaults' reasons are in
    docs/report-and-wandb.md, "Time to tolerance").

    Args:
        ppl_tolerance: relative tolerance of perplexity (0.02: within 2%, a factor 1.02, of its final level)
        validity_tolerance: absolute tolerance of validity (V partial, strict, p_valid; 0.01: a point in 100)
        ppl_grid: the perplexity tolerances of the report's ratio grid
        validity_grid: the validity tolerances of the report's ratio grid
        ci_resamples: bootstrap resamples behind each ratio's 95% CI
    """

    ppl_tolerance: float = 0.02
    validity_tolerance: float = 0.01
    ppl_grid: tuple[float, ...] = (0.01, 0.02, 0.05)
    validity_grid: tuple[float, ...] = (0.005, 0.01, 0.02)
    ci_resamples: int = 1000

    def check(self) -> Tolerance:
        """The settings, or an error naming the flag that is out of range (checked where the
        report starts, so the command line prints it as one line)."""
        for name in ("ppl_tolerance", "validity_tolerance"):
            if not 0 < getattr(self, name) < 1:
                raise BytecanaryError(f"--{name} must be in (0, 1), not {getattr(self, name)}")
        for name in ("ppl_grid", "validity_grid"):
            values = getattr(self, name)
            if not values or not all(0 < v < 1 for v in values):
                raise BytecanaryError(f"--{name} must hold tolerances in (0, 1), not {values}")
        if self.ci_resamples < 100:
            raise BytecanaryError(f"--ci_resamples must be at least 100, not {self.ci_resamples}")
        return self

    def eps(self, log: bool) -> float:
        """The default tolerance of a curve: perplexity's (``log``) or validity's."""
        return self.ppl_tolerance if log else self.validity_tolerance

    def grid(self, log: bool) -> tuple[float, ...]:
        """The grid's tolerances of a curve, its default among them, ascending."""
        return tuple(sorted({*(self.ppl_grid if log else self.validity_grid), self.eps(log)}))


def eps_text(eps: float, log: bool) -> str:
    """A tolerance as the report writes it: perplexity's in percent, validity's absolute."""
    return f"±{eps * 100:g}%" if log else f"±{eps:g}"


def ci_text(r: TimeRatio) -> str:
    """A ratio's CI, with the share of resamples it rests on where some had no ratio."""
    if math.isnan(r.lo):
        return "n/a: no resample reached both tolerances"
    share = f", from {r.defined:.0%} of resamples" if r.defined < 0.95 else ""
    return f"{r.lo:.2f}-{r.hi:.2f}{share}"
