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


# checkpoints of a 1,500-step tiny run: steps 1, 2, 4, ..., 128, then every 50; 4,096 tokens a step
TOKENS = np.array(sorted({2**i for i in range(8)} | set(range(50, 1501, 50)))) * 4096.0
N_SAMPLES = 1024


def _binomial_se(p: np.ndarray) -> np.ndarray:
    return np.sqrt(p * (1 - p) / N_SAMPLES)


def _noisy(mean: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A validity curve as a probe measures it: each point off by its binomial noise."""
    y = mean + np.random.default_rng(seed).normal(0, _binomial_se(mean))
    return TOKENS, y, _binomial_se(y)


@pytest.mark.parametrize("seed", range(5))
def test_flat_noise_is_no_change(seed):
    verdict = stats.detect_convergence(*_noisy(np.full(len(TOKENS), 0.87), seed))
    assert verdict.state == stats.NO_CHANGE and verdict.converged_at is None
    assert verdict.describe().startswith("shows no change beyond noise (noise 0.01")


@pytest.mark.parametrize("seed", range(5))
def test_a_rise_still_going_at_the_end_is_still_moving(seed):
    """0.1 per decade of tokens to the end: the last checkpoints alone look flat (a short
    span on a log axis), yet they are not evidence the rise has stopped."""
    verdict = stats.detect_convergence(*_noisy(0.3 + 0.1 * np.log10(TOKENS / TOKENS[0]), seed))
    assert verdict.state == stats.MOVING and verdict.converged_at is None
    assert verdict.slope == pytest.approx(0.1, abs=3 * verdict.slope_se)
    assert verdict.describe().startswith("is still moving at the end of the run")


@pytest.mark.parametrize("seed", range(5))
def test_sigmoid_rise_then_plateau_converges_where_it_flattens(seed):
    mean = 0.3 + 0.6 / (1 + np.exp(-(np.log10(TOKENS) - np.log10(4e5)) / 0.08))
    # where the rise left to go first falls under twice the noise of a point
    expected = int(np.argmax(0.9 - mean < 2 * _binomial_se(mean)))
    verdict = stats.detect_convergence(*_noisy(mean, seed))
    assert verdict.state == stats.CONVERGED
    assert abs(list(TOKENS).index(verdict.converged_at) - expected) <= 1
    assert abs(verdict.slope) <= 2 * verdict.slope_se and verdict.moved > 10


def _log_ppl(knee: float, seed: int) -> np.ndarray:
    """Log perplexity falling linearly in tokens to 20 at ``knee``, then flat, with jitter."""
    ppl = np.where(knee <= TOKENS, 20.0, 20.0 + 2000.0 * (knee - TOKENS) / knee)
    return np.log(ppl) + np.random.default_rng(seed).normal(0, 0.01, len(TOKENS))


def test_perplexity_noise_comes_from_the_curve():
    assert stats.curve_noise(TOKENS, _log_ppl(1e6, 0)) == pytest.approx(0.01, rel=0.35)
    line = 3.0 - 0.5 * np.log10(TOKENS)
    assert stats.curve_noise(TOKENS, line) == pytest.approx(0.0, abs=1e-12)  # a trend is not noise
    verdict = stats.detect_convergence(TOKENS, _log_ppl(1e6, 0))
    assert verdict.state == stats.CONVERGED and verdict.converged_at == pytest.approx(1e6, rel=0.25)


def test_proportion_se_is_never_zero():
    assert stats.proportion_se(0.0, 100) == pytest.approx(math.sqrt(1 / 102 * 101 / 102 / 100))
    assert stats.proportion_se(0.5, None) is None and stats.proportion_se(0.5, 0) is None


def _local_noise_by_loop(x: np.ndarray, y: np.ndarray, pooled: int = 7) -> list[float]:
    """Per point, the root mean over the ``pooled`` inner points nearest to it of
    r^2 / (1 + w^2 + (1 - w)^2), r the residual from the line through the point's two
    neighbours in log10 x and w its position between them."""
    lx = [math.log10(v) for v in x]
    scaled = {}
    for i in range(1, len(y) - 1):
        w = (lx[i] - lx[i - 1]) / (lx[i + 1] - lx[i - 1])
        r = y[i] - ((1 - w) * y[i - 1] + w * y[i + 1])
        scaled[i] = r * r / (1 + w * w + (1 - w) ** 2)
    out = []
    for i in range(len(y)):
        nearest = sorted(scaled, key=lambda j: (abs(j - i), j))[:pooled]
        out.append(math.sqrt(sum(scaled[j] for j in nearest) / len(nearest)))
    return out


def test_local_noise_equals_a_loop_over_the_nearest_checkpoints():
    y = 0.3 + 0.1 * np.log10(TOKENS) + np.random.default_rng(3).normal(0, 0.02, len(TOKENS))
    assert stats.local_noise(TOKENS, y) == pytest.approx(_local_noise_by_loop(TOKENS, y), rel=1e-12)
    assert stats.local_noise(TOKENS[:5], y[:5]) == pytest.approx(_local_noise_by_loop(TOKENS[:5], y[:5]))
    line = 3.0 - 0.5 * np.log10(TOKENS)
    assert stats.local_noise(TOKENS, line) == pytest.approx(np.zeros(len(TOKENS)), abs=1e-12)
    with pytest.raises(ValueError, match="three points"):
        stats.local_noise(TOKENS[:2], y[:2])


def test_local_noise_follows_the_phase_of_a_greedy_curve():
    """Quiet (binomial noise) up to checkpoint 20, then flipping between 0.6 and 0.9 at every
    checkpoint: each phase gets its own noise, where one number for the curve (curve_noise)
    fits neither."""
    quiet = np.full(len(TOKENS), 0.75) + np.random.default_rng(4).normal(0, 0.01, len(TOKENS))
    y = np.where(np.arange(len(TOKENS)) < 20, quiet, np.where(np.arange(len(TOKENS)) % 2, 0.6, 0.9))
    noise = stats.local_noise(TOKENS, y)
    # at least 7 points away from the flips: the quiet noise (0.01), give or take what 7
    # residuals can tell, and far under the flips'
    assert np.median(noise[:15]) == pytest.approx(0.01, rel=0.35) and noise[:15].max() < 0.03
    assert (noise[20:] >= 0.15).all()  # 0.15: the flips' standard deviation, np.std(y[20:])
    assert np.std(y[20:]) == pytest.approx(0.15, rel=0.01)
    assert 3 * 0.01 < stats.curve_noise(TOKENS, y) < 0.15
    # judged on the binomial SE alone the flips are movement; on the larger of the two, the
    # curve shows no change (it started at the flips' mean)
    binomial = _binomial_se(y)
    assert stats.detect_convergence(TOKENS, y, binomial).state == stats.MOVING
    assert stats.detect_convergence(TOKENS, y, np.maximum(binomial, noise)).state == stats.NO_CHANGE


def _step_validity(knee: float, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    mean = np.where(knee <= TOKENS, 0.9, 0.3 + 0.5 * TOKENS / knee)
    return _noisy(mean, seed)


def test_ratio_and_its_ci_on_a_known_pair():
    validity, ppl = _step_validity(2 * 614_400, 1), (TOKENS, _log_ppl(614_400, 1), None)
    estimate = stats.convergence_ratio(validity, ppl, n_resamples=300)
    assert estimate.value == pytest.approx(2.0)
    assert estimate.lo <= 2.0 <= estimate.hi and estimate.hi - estimate.lo < 0.5
    assert estimate.both_converged > 0.9
    flat = _noisy(np.full(len(TOKENS), 0.87), 0)
    assert stats.convergence_ratio(flat, ppl) is None  # no ratio from a curve that did not move


def test_a_ratio_is_bootstrapped_once_per_curves_whatever_their_container():
    """The report and its summary ask for the same ratio: the second answer is the first, and
    lists or arrays of the same values are the same curves."""
    validity, ppl = _step_validity(2 * 614_400, 2), (TOKENS, _log_ppl(614_400, 2), None)
    first = stats.convergence_ratio(validity, ppl, n_resamples=50)
    as_lists = tuple(None if a is None else list(a) for a in validity)
    assert stats.convergence_ratio(as_lists, (list(TOKENS), list(ppl[1]), None), n_resamples=50) is first
    assert stats.convergence_ratio(validity, ppl, n_resamples=50, seed=1) is not first  # another bootstrap
    other = (validity[0], validity[1] + 1e-9, validity[2])
    assert stats.convergence_ratio(other, ppl, n_resamples=50) is not first


def test_detector_refuses_unusable_input():
    for x, y in (
        ([1.0, 2.0, 3.0], [1.0, 2.0, 3.0]),
        ([0.0, 1.0, 2.0, 3.0], [1.0] * 4),
        ([1.0] * 4, [1.0] * 3),
    ):
        with pytest.raises(ValueError):
            stats.detect_convergence(x, y)


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


def _clusters(rng, n_clusters, mean, sizes=(1, 2, 3, 4)):
    """Clustered samples: each cluster's samples share its own level (correlated prompts)."""
    levels = rng.normal(mean, 0.2, n_clusters)
    counts = rng.choice(sizes, n_clusters).astype(float)
    samples = [levels[i] + rng.normal(0, 0.1, int(c)) for i, c in enumerate(counts)]
    sums = np.array([[s.sum(), (s > mean).sum()] for s in samples])
    return (sums, counts), samples


def test_clustered_gaps_equal_a_plain_loop_over_the_same_draws():
    rng = np.random.default_rng(3)
    a = [_clusters(rng, n, 0.6) for n in (7, 12)]
    b = [_clusters(rng, n, 0.5) for n in (9, 5)]
    got = stats.clustered_gaps([s for s, _ in a], [s for s, _ in b], n_resamples=300, seed=11)
    # the point: means over the raw samples of each side
    flat = {name: [x for _, raw in sides for cl in raw for x in cl] for name, sides in (("a", a), ("b", b))}
    assert got[0].value == pytest.approx(np.mean(flat["a"]) - np.mean(flat["b"]), abs=1e-12)
    above = [
        np.mean([x > m for _, raw in sides for cl in raw for x in cl]) for m, sides in ((0.6, a), (0.5, b))
    ]
    assert got[1].value == pytest.approx(above[0] - above[1], abs=1e-12)  # columns stay apart
    # the CI: the same draws (strata of side a, then b, in order), each resample a plain loop
    draws_rng = np.random.default_rng(11)
    draws = [[draws_rng.integers(0, len(s[1]), (300, len(s[1]))) for s, _ in side] for side in (a, b)]
    boot = []
    for r in range(300):
        means = []
        for side, side_draws in zip((a, b), draws, strict=True):
            picked = [x for (_, raw), d in zip(side, side_draws, strict=True) for i in d[r] for x in raw[i]]
            means.append(np.mean(picked))
        boot.append(means[0] - means[1])
    lo, hi = np.percentile(boot, [2.5, 97.5])
    assert (got[0].lo, got[0].hi) == (pytest.approx(lo, abs=1e-12), pytest.approx(hi, abs=1e-12))


def test_clustered_gaps_are_paired_over_calls_and_shift_with_the_data():
    rng = np.random.default_rng(4)
    a, b = [_clusters(rng, 10, 0.7)[0]], [_clusters(rng, 8, 0.4)[0]]
    first = stats.clustered_gaps(a, b, seed=5)
    assert first == stats.clustered_gaps(a, b, seed=5)
    shifted = [(a[0][0] + 0.25 * a[0][1][:, None], a[0][1])]  # every sample of side a + 0.25
    moved = stats.clustered_gaps(shifted, b, seed=5)[0]
    assert (moved.value, moved.lo, moved.hi) == pytest.approx(
        (first[0].value + 0.25, first[0].lo + 0.25, first[0].hi + 0.25), abs=1e-12
    )
    with pytest.raises(ValueError, match="at least one cluster"):
        stats.clustered_gaps(a, [(np.zeros((0, 2)), np.zeros(0))])


def test_clustered_gap_ci_covers_the_true_gap_in_at_least_90_percent_of_runs():
    rng = np.random.default_rng(6)
    covered = 0
    for _ in range(200):
        (a, _), (b, _) = _clusters(rng, 40, 0.6), _clusters(rng, 30, 0.5)
        gap = stats.clustered_gaps([a], [b], n_resamples=400, seed=int(rng.integers(1 << 30)))[0]
        covered += gap.lo <= 0.1 <= gap.hi
    assert covered >= 180
