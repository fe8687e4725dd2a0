"""Time to tolerance (issue 36) on fabricated curves whose true T(eps) is known: a power law
with an asymptote, saturating exponentials with a 2x lag, greedy validity flipping between
two values while p_valid moves smoothly, and a curve flat from the start. Against the truth
(within one checkpoint), against a brute-force reading of the rule, and the bootstrap CI's
coverage over 200 seeded runs."""

import math
import statistics

import numpy as np
import pytest

from bytecanary import settling

SPACING = 250_000.0
TOKENS = SPACING * np.arange(1, 61)  # 60 checkpoints to 15M, evenly spaced like the CPU runs
EPS_P, EPS_V = math.log1p(0.02), 0.01  # perplexity within 2% (on its log), validity within 0.01
TAU = 1e6  # perplexity's time constant; validity's is twice it
A_P = 0.5  # perplexity starts e^0.5 = 1.65x above its asymptote...
A_V = A_P * EPS_V / EPS_P  # ...validity as far below its own in units of its tolerance: T_v = 2 T_p


def log_ppl(t):
    return 5.0 + A_P * np.exp(-t / TAU)


def validity(t):
    return 0.8 - A_V * np.exp(-t / (2 * TAU))


def crossing(amplitude: float, tau: float, eps: float, end: float = TOKENS[-1]) -> float:
    """Where A exp(-t / tau) comes within eps of its value at ``end``, in continuous time."""
    return -tau * math.log(eps / amplitude + math.exp(-end / tau))


def on_grid(t: float, tokens=TOKENS) -> float:
    """The first checkpoint at or after t: the true T(eps) of a curve sampled at ``tokens``."""
    return float(tokens[np.searchsorted(tokens, t)])


T_P = on_grid(crossing(A_P, TAU, EPS_P))  # 3.25M
T_V = on_grid(crossing(A_V, 2 * TAU, EPS_V))  # 6.5M


def noisy(f: np.ndarray, sd: float, seed: int) -> np.ndarray:
    return f + np.random.default_rng(seed).normal(0.0, sd, len(f))


def test_the_known_answers():
    assert (T_P, T_V) == (3_250_000, 6_500_000)
    # the lag is 2x in continuous time, up to what is left of each curve at the end
    assert crossing(A_V, 2 * TAU, EPS_V) / crossing(A_P, TAU, EPS_P) == pytest.approx(2.0, rel=0.01)


@pytest.mark.parametrize("seed", range(10))
def test_saturating_exponentials_recover_their_t_and_the_2x_lag(seed):
    """Noise a third of (perplexity) or under (validity) what either curve moves between
    neighbouring checkpoints where it crosses its tolerance."""
    p = settling.time_to_tolerance(TOKENS, noisy(log_ppl(TOKENS), 0.001, seed), EPS_P)
    v = settling.time_to_tolerance(TOKENS, noisy(validity(TOKENS), 0.0004, 100 + seed), EPS_V)
    assert p.state == v.state == settling.WITHIN
    assert abs(p.at - T_P) <= SPACING and abs(v.at - T_V) <= SPACING
    assert v.at / p.at == pytest.approx(2.0, abs=(T_V + SPACING) / (T_P - SPACING) - 2)
    assert p.final == pytest.approx(5.0, abs=0.001) and v.final == pytest.approx(0.8, abs=0.001)


@pytest.mark.parametrize("seed", range(10))
def test_a_power_law_with_an_asymptote(seed):
    """log ppl = log 20 + 1.5 (t / t0)^-0.7: still falling at the end of the run, so the final
    level is the end of the run's, not the asymptote."""
    tokens = TOKENS[:40]
    clean = math.log(20) + 1.5 * (tokens / tokens[0]) ** -0.7
    left = 1.5 * (tokens[-1] / tokens[0]) ** -0.7  # what the curve has still to fall at the end
    truth = on_grid(tokens[0] * ((EPS_P + left) / 1.5) ** (-1 / 0.7), tokens)
    assert truth == 8_000_000
    step = 0.003  # what it falls between neighbouring checkpoints there
    s = settling.time_to_tolerance(tokens, noisy(clean, 0.3 * step, seed), EPS_P)
    assert s.state == settling.WITHIN and abs(s.at - truth) <= SPACING


@pytest.mark.parametrize("seed", range(5))
def test_greedy_validity_flips_while_p_valid_moves_smoothly(seed):
    """From 2M tokens on, greedy validity flips between 0.6 and 0.9 (a seeded coin per
    checkpoint, as prompts flip together); p_valid settles smoothly. p_valid's T is recovered,
    greedy validity is too noisy to tell any tolerance of the grid, not 'within' by luck."""
    rng = np.random.default_rng(seed)
    greedy = np.where(TOKENS < 2e6, 0.3 + 0.3 * TOKENS / 2e6, rng.choice([0.6, 0.9], len(TOKENS)))
    for eps in (0.005, 0.01, 0.02):
        assert settling.time_to_tolerance(TOKENS, greedy, eps).state == settling.TOO_NOISY
    p_valid = settling.time_to_tolerance(TOKENS, noisy(validity(TOKENS), 0.0004, seed), EPS_V)
    assert p_valid.state == settling.WITHIN and abs(p_valid.at - T_V) <= SPACING


@pytest.mark.parametrize("seed", range(5))
def test_a_curve_flat_from_the_start_is_within_from_its_first_checkpoint(seed):
    flat_p = settling.time_to_tolerance(TOKENS, noisy(np.full(60, 5.0), 0.003, seed), EPS_P)
    flat_v = settling.time_to_tolerance(TOKENS, noisy(np.full(60, 0.8), 0.002, seed), EPS_V)
    assert flat_p.at == flat_v.at == TOKENS[0]
    # the final level: the mean of many of the last checkpoints, within its SE of the truth
    assert min(flat_p.final_points, flat_v.final_points) >= 10
    assert abs(flat_p.final - 5.0) < 3 * flat_p.final_se and abs(flat_v.final - 0.8) < 3 * flat_v.final_se
    r = settling.tolerance_ratios(
        (TOKENS, noisy(np.full(60, 0.8), 0.002, seed), None),
        (TOKENS, noisy(np.full(60, 5.0), 0.003, seed), None),
        [EPS_V],
        [EPS_P],
        n_resamples=200,
    )[(EPS_V, EPS_P)]
    assert r.value == r.lo == r.hi == 1.0 and r.defined == 1.0


def test_one_noisy_point_neither_ends_nor_extends_the_stay():
    clean = log_ppl(TOKENS)
    base = settling.time_to_tolerance(TOKENS, clean, EPS_P)
    assert base.at == T_P
    k = int(np.searchsorted(TOKENS, T_P))
    late_spike, early_luck = clean.copy(), clean.copy()
    late_spike[45] += 5 * EPS_P  # far outside, long after T
    early_luck[k - 3] = clean[-1]  # exactly at the final level, three checkpoints before T
    assert settling.time_to_tolerance(TOKENS, late_spike, EPS_P).at == T_P
    assert settling.time_to_tolerance(TOKENS, early_luck, EPS_P).at == T_P
    # two neighbours out of the band are a real excursion: the stay starts after them
    excursion = clean.copy()
    excursion[45:47] += 5 * EPS_P
    assert settling.time_to_tolerance(TOKENS, excursion, EPS_P).at == TOKENS[47]
    # ...and when that is too close to the end, the curve is not within before it
    excursion[57:59] += 5 * EPS_P
    assert settling.time_to_tolerance(TOKENS, excursion, EPS_P).state == settling.NOT_WITHIN


def _brute_noise(x, y, se=None):
    """settling.tolerance_noise by hand: per point, the median of the 13 scaled squared residuals
    (each inner point off the line through its neighbours, in log x) nearest to it."""
    lx, n = [math.log10(v) for v in x], len(y)
    scaled = []
    for i in range(1, n - 1):
        w = (lx[i] - lx[i - 1]) / (lx[i + 1] - lx[i - 1])
        scaled.append((y[i] - (1 - w) * y[i - 1] - w * y[i + 1]) ** 2 / (1 + w**2 + (1 - w) ** 2))
    size = min(13, len(scaled))
    out = []
    for j in range(n):
        start = min(max(j - 1 - 6, 0), len(scaled) - size)
        noise = math.sqrt(statistics.median(scaled[start : start + size]) / 0.45494)
        out.append(max(noise, se[j] if se is not None else 0.0, 1e-9 * (1 + max(abs(v) for v in y))))
    return out


def _brute_t(x, y, eps, se=None):
    """T(eps) by the words of the rule, one loop at a time: (state, x of T or None)."""
    n, noise = len(y), _brute_noise(x, y, se)
    lx = [math.log10(v) for v in x]
    # the final level: the last 3 checkpoints, grown back while the one added lies within
    # 3 noise of the mean after it and the weighted slope of the tail is within 2 SE of 0
    start = n - 3
    while start > 0:
        k, tail = start - 1, range(start, n)
        w = {j: 1 / noise[j] ** 2 for j in range(k, n)}
        mean_after = sum(w[j] * y[j] for j in tail) / sum(w[j] for j in tail)
        se_after = math.sqrt(1 / sum(w[j] for j in tail))
        sw = sum(w.values())
        xbar = sum(w[j] * lx[j] for j in w) / sw
        sxx = sum(w[j] * (lx[j] - xbar) ** 2 for j in w)
        slope = sum(w[j] * (lx[j] - xbar) * y[j] for j in w) / sxx
        if abs(y[k] - mean_after) > 3 * math.hypot(noise[k], se_after) or abs(slope) > 2 / math.sqrt(sxx):
            break
        start = k
    w = [1 / noise[j] ** 2 for j in range(n)]
    final = sum(w[j] * y[j] for j in range(start, n)) / sum(w[start:])
    # each point: the median of the narrowest window of 3, 5 or 7 that knows the level to eps / 3
    halves = []
    for j in range(n):
        ok = [h for h in (1, 2, 3) if 3 * math.sqrt(math.pi / 2) * noise[j] / math.sqrt(2 * h + 1) <= eps]
        halves.append(ok[0] if ok else None)
    within = []
    for j in range(n):
        h = halves[j] or 3
        lo = min(max(j - h, 0), n - (2 * h + 1))
        within.append(abs(statistics.median(y[lo : lo + 2 * h + 1]) - final) <= eps)
    k = next(k for k in range(n + 1) if all(within[k:]))
    stay = range(min(k, n - 3), n)
    if sum(halves[j] is None for j in stay) > len(stay) / 2:
        return settling.TOO_NOISY, None
    return (settling.WITHIN, x[k]) if k <= n - 3 else (settling.NOT_WITHIN, None)


@pytest.mark.parametrize("seed", range(12))
def test_time_to_tolerance_equals_a_brute_force_reading_of_the_rule(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(8, 40))
    x = np.cumsum(rng.uniform(1e5, 5e5, n))
    shape = seed % 4
    clean = [
        log_ppl(x),
        validity(x),
        np.where(x < x[n // 2], 0.3, 0.9),  # a step
        0.5 + 0.1 * np.sin(x / x[-1] * 6),  # never settles
    ][shape]
    y = clean + rng.normal(0, rng.choice([0.0005, 0.002, 0.01]), n)
    se = rng.uniform(0.001, 0.006, n) if seed % 3 == 0 else None
    for eps in (0.005, 0.01, 0.02, 0.05):
        got = settling.time_to_tolerance(x, y, eps, se)
        assert (got.state, got.at) == _brute_t(list(x), list(y), eps, se), (shape, eps)


def test_the_95_ci_covers_the_true_ratio_in_200_seeded_runs():
    """Validity (tau 2M) and perplexity (tau 1M) with noise of 0.003 a point (a third of
    validity's tolerance, a seventh of perplexity's), 200 bootstrap resamples each: the CI
    covers the true ratio T_v / T_p = 6.5M / 3.25M in at least 90% of 200 runs."""
    truth = T_V / T_P
    covered = reached = 0
    for seed in range(200):
        r = settling.tolerance_ratios(
            (TOKENS, noisy(validity(TOKENS), 0.003, seed), None),
            (TOKENS, noisy(log_ppl(TOKENS), 0.003, 1000 + seed), None),
            [EPS_V],
            [EPS_P],
            n_resamples=200,
            seed=seed,
        )[(EPS_V, EPS_P)]
        reached += r is not None
        covered += r is not None and r.lo <= truth <= r.hi
    assert reached >= 196 and covered >= 180, (reached, covered)
