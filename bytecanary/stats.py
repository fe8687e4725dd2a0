"""Statistics the probes and the convergence report share.

Calibration (ECE), paired tests between two scoring strategies (exact and chi-square
McNemar, as the space-tokenization-trap MCQA study uses), bootstrap confidence intervals
(Format Sensitivity Index, arXiv:2607.09665), correlations, the
fixed-effects regression of accuracy on parsability, and the convergence detector applied
alike to perplexity and to UTF-8 validity (arXiv:2606.14122).
Plain numpy and ``math``: importable without torch or scipy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

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


def mcnemar_chi2(correct_a: ArrayLike, correct_b: ArrayLike) -> tuple[float, float]:
    """Continuity-corrected McNemar: statistic (|b - c| - 1)^2 / (b + c) and its
    chi-square (1 df) p-value."""
    b, c = _discordant(correct_a, correct_b)
    if b + c == 0:
        return 0.0, 1.0
    stat = (abs(b - c) - 1) ** 2 / (b + c)
    return stat, math.erfc(math.sqrt(stat / 2))


def bootstrap_ci(
    values: ArrayLike,
    statistic: Callable[[np.ndarray], float] = np.mean,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``statistic`` with a fixed seed (reproducible)."""
    data = np.asarray(values)
    if len(data) == 0:
        raise ValueError("bootstrap_ci needs at least one value")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(data), (n_resamples, len(data)))
    stats = np.array([statistic(data[row]) for row in idx])
    tail = (1 - confidence) / 2 * 100
    lo, hi = np.percentile(stats, [tail, 100 - tail])
    return float(lo), float(hi)


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
    """OLS of y = beta * x + one fixed effect per level of each factor; returns (beta, SE).

    Format Sensitivity Index (arXiv:2607.09665) eq. 5 (accuracy on parsability with model,
    task and wrapper effects), unweighted where the paper weights its cells. Dummy coding
    keeps every level of the first factor (it stands in for the intercept) and drops the first
    level of the others, so the effects are identified; the slope on x is the same whichever
    level is dropped.
    SE = sqrt(RSS / (n - p) * (X'X)^-1[0, 0]) with p the rank of the design. Raises
    ValueError when x is absorbed by the fixed effects or no residual degrees of freedom
    are left.
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
        effects += _dummies(levels, keep_first=i == 0)
    design = np.column_stack([xs, *effects])
    p = int(np.linalg.matrix_rank(design))
    if p <= int(np.linalg.matrix_rank(np.column_stack(effects))):
        raise ValueError("fixed_effects_fit: x is constant within the fixed effects (beta not identified)")
    if n - p <= 0:
        raise ValueError(f"fixed_effects_fit: no residual degrees of freedom ({n} rows, {p} parameters)")
    coef, *_ = np.linalg.lstsq(design, ys, rcond=None)
    resid = ys - design @ coef
    sigma2 = float(resid @ resid) / (n - p)
    return float(coef[0]), math.sqrt(sigma2 * float(np.linalg.pinv(design.T @ design)[0, 0]))


CONVERGENCE_RTOL = 0.05  # the band around the plateau, relative to it
CONVERGENCE_TAIL = 0.1  # the plateau is the mean of this share of the last points


def convergence_point(
    x: ArrayLike, y: ArrayLike, rtol: float = CONVERGENCE_RTOL, tail: float = CONVERGENCE_TAIL
) -> float | None:
    """Smallest x after which the curve stays within ``rtol`` of its final plateau.

    The plateau is the mean of the last ``tail`` fraction of points (at least one).
    Returns x[i] for the smallest i with |y[j] - plateau| <= rtol * |plateau| for all
    j >= i, or None when even the last point is outside the band (not converged).
    The same rule serves perplexity (falling) and validity (rising) curves.
    """
    xs = np.asarray(x, dtype=np.float64)
    ys = np.asarray(y, dtype=np.float64)
    if xs.shape != ys.shape or xs.ndim != 1 or len(xs) == 0:
        raise ValueError("x and y must be non-empty 1-D arrays of the same length")
    order = np.argsort(xs, kind="stable")
    xs, ys = xs[order], ys[order]
    plateau = ys[-max(1, math.ceil(tail * len(ys))) :].mean()
    inside = np.abs(ys - plateau) <= rtol * abs(plateau)
    if not inside[-1]:
        return None
    outside = np.flatnonzero(~inside)
    return float(xs[outside[-1] + 1] if len(outside) else xs[0])
