"""Statistics against scipy and hand-computed values."""

import math

import numpy as np
import pytest
from scipy import stats as sps

from bytecanary import stats


def test_ece_equals_a_per_bin_loop():
    rng = np.random.default_rng(0)
    conf = rng.uniform(0, 1, 500)
    conf[:5] = [0.0, 0.1, 0.2, 1.0, 0.55]  # bin edges
    correct = rng.uniform(0, 1, 500) < conf**2
    want = 0.0
    for m in range(10):
        lo, hi = m / 10, (m + 1) / 10
        in_bin = (conf > lo) & (conf <= hi) if m else (conf >= 0) & (conf <= hi)
        if in_bin.any():
            want += in_bin.sum() / 500 * abs(correct[in_bin].mean() - conf[in_bin].mean())
    assert stats.ece(conf, correct) == pytest.approx(want, abs=1e-12)


def test_ece_hand_values():
    assert stats.ece([1.0, 1.0], [1, 1]) == 0.0
    assert stats.ece([0.9, 0.9], [0, 0]) == pytest.approx(0.9)
    assert stats.ece([0.25, 0.75], [0, 1]) == pytest.approx(0.25)


@pytest.mark.parametrize("seed", range(5))
def test_mcnemar_against_scipy(seed):
    rng = np.random.default_rng(seed)
    a = rng.uniform(size=200) < 0.6
    b = np.where(rng.uniform(size=200) < 0.8, a, ~a)
    n01, n10 = int((a & ~b).sum()), int((~a & b).sum())
    exact = sps.binomtest(min(n01, n10), n01 + n10, 0.5).pvalue
    assert stats.mcnemar_exact(a, b) == pytest.approx(exact, rel=1e-12)
    stat = (abs(n01 - n10) - 1) ** 2 / (n01 + n10)
    got_stat, got_p = stats.mcnemar_chi2(a, b)
    assert got_stat == pytest.approx(stat)
    assert got_p == pytest.approx(sps.chi2.sf(stat, 1), rel=1e-9)


def test_mcnemar_hand_values():
    # b = 1 discordant for a, c = 5 for b: p = 2 * (C(6,0) + C(6,1)) / 64 = 14/64
    a = [1, 0, 0, 0, 0, 0, 1]
    b = [0, 1, 1, 1, 1, 1, 1]
    assert stats.mcnemar_exact(a, b) == pytest.approx(14 / 64)
    assert stats.mcnemar_exact([1, 0], [1, 0]) == 1.0
    with pytest.raises(ValueError, match="paired"):
        stats.mcnemar_exact([1, 0], [1])


def test_bootstrap_ci_is_seeded_and_agrees_with_scipy():
    rng = np.random.default_rng(1)
    data = rng.normal(3.0, 1.0, 300)
    ours = stats.bootstrap_ci(data, n_resamples=4000, seed=7)
    assert ours == stats.bootstrap_ci(data, n_resamples=4000, seed=7)
    ref = sps.bootstrap((data,), np.mean, n_resamples=4000, method="percentile", random_state=0)
    assert ours[0] == pytest.approx(ref.confidence_interval.low, abs=0.03)
    assert ours[1] == pytest.approx(ref.confidence_interval.high, abs=0.03)
    assert stats.bootstrap_ci([2.0] * 10) == (2.0, 2.0)


def test_correlations_against_scipy():
    rng = np.random.default_rng(2)
    x = rng.integers(0, 6, 80).astype(float)  # many ties
    y = x + rng.integers(0, 3, 80)
    assert stats.pearson_r(x, y) == pytest.approx(sps.pearsonr(x, y).statistic, rel=1e-12)
    assert stats.kendall_tau_b(x, y) == pytest.approx(sps.kendalltau(x, y).statistic, rel=1e-12)
    assert math.isnan(stats.pearson_r([1, 1, 1], [1, 2, 3]))


def test_convergence_point():
    x = np.arange(10) * 1000.0
    ppl = np.array([100, 60, 40, 30, 22, 20.5, 20.2, 19.9, 20.1, 20.0])
    # plateau = mean of last point (10% of 10) = 20.0; band [19, 21]; 22 at x=4000 is outside
    assert stats.convergence_point(x, ppl, rtol=0.05) == 5000.0
    validity = np.array([0.1, 0.5, 0.7, 0.9, 0.95, 0.97, 0.99, 1.0, 0.99, 1.0])
    assert stats.convergence_point(x, validity, rtol=0.02) == 6000.0  # band [0.98, 1.02]
    assert stats.convergence_point(x, np.linspace(1, 10, 10), rtol=0.01, tail=0.3) is None
    with pytest.raises(ValueError):
        stats.convergence_point([], [])


def _residualise(v, design):
    coef, *_ = np.linalg.lstsq(design, v, rcond=None)
    return v - design @ coef


def _panel(seed, n_a=6, n_b=4, n_c=5):
    """A full (a, b, c) grid with random effects per level, like (checkpoint, task, wrapper)."""
    rng = np.random.default_rng(seed)
    a, b, c = (g.ravel() for g in np.meshgrid(range(n_a), range(n_b), range(n_c), indexing="ij"))
    effects = rng.normal(size=n_a)[a] + rng.normal(size=n_b)[b] + rng.normal(size=n_c)[c]
    x = rng.uniform(size=len(a)) + 0.3 * effects
    return rng, a, [f"t{v}" for v in b], c, x, effects


@pytest.mark.parametrize("seed", range(3))
def test_fixed_effects_fit_equals_frisch_waugh_lovell(seed):
    rng, a, b, c, x, effects = _panel(seed)
    y = 0.7 * x + effects + rng.normal(scale=0.2, size=len(x))
    # every level of every factor as a dummy: the same column space as dropping first levels
    dummies = np.column_stack([np.equal.outer(f, np.unique(f)).astype(float) for f in (a, b, c)])
    rx, ry = _residualise(x, dummies), _residualise(y, dummies)
    beta = rx @ ry / (rx @ rx)
    p = np.linalg.matrix_rank(dummies) + 1
    rss = np.sum((ry - beta * rx) ** 2)
    se = math.sqrt(rss / (len(y) - p) / (rx @ rx))
    got_beta, got_se = stats.fixed_effects_fit(y, x, {"checkpoint": a, "task": b, "wrapper": c})
    assert got_beta == pytest.approx(beta, rel=1e-9)
    assert got_se == pytest.approx(se, rel=1e-9)


def test_fixed_effects_fit_recovers_a_known_beta():
    rng, a, b, c, x, effects = _panel(7, n_a=20, n_b=8, n_c=5)
    y = -1.5 * x + 3.0 * effects + rng.normal(scale=0.1, size=len(x))
    beta, se = stats.fixed_effects_fit(y, x, {"a": a, "b": b, "c": c})
    assert abs(beta + 1.5) < 4 * se
    assert 0 < se < 0.05
    # without factors it is plain OLS with an intercept
    x1 = rng.uniform(size=50)
    beta1, _ = stats.fixed_effects_fit(2.0 * x1 + 1.0, x1, {})
    assert beta1 == pytest.approx(2.0)


def test_fixed_effects_fit_refuses_unidentified_fits():
    with pytest.raises(ValueError, match="degrees of freedom"):
        stats.fixed_effects_fit([1.0, 2.0, 4.0], [0.0, 1.0, 3.0], {"g": ["a", "b", "b"]})
    with pytest.raises(ValueError, match="not identified"):
        stats.fixed_effects_fit([1.0, 2.0, 3.0, 5.0], [1.0, 1.0, 2.0, 2.0], {"g": ["a", "a", "b", "b"]})
    with pytest.raises(ValueError, match="factor 'g'"):
        stats.fixed_effects_fit([1.0, 2.0], [1.0, 2.0], {"g": ["a"]})
