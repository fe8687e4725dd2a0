"""Convergence verdicts and ratio on fabricated runs, and cross-checkpoint MCQA statistics
against direct recomputations."""

import itertools
import math

import numpy as np
import pytest

from bytecanary import display, records, settling, stats
from bytecanary.errors import BytecanaryError
from bytecanary.io import read_jsonl
from bytecanary.probes.mcqa import trends_report as mcqa_trends
from bytecanary.probes.mcqa.keys import CLOZE, mcqa
from bytecanary.report import analysis

from .runs import (
    FAMILIES,
    FLIPS,
    HEADLINE_KEY,
    P_VALID_KEY,
    P_VALID_KEYS,
    PPL_AT,
    TASKS,
    TOKENS,
    VALIDITY_AT,
    VALIDITY_KEYS,
    N,
    make_run,
    p_valid_se,
    record,
)


def _convergence(run):
    return analysis.convergence(read_jsonl(run / "metrics.jsonl"), records.read(run / "probes.jsonl"))


def test_convergence_points_and_ratio_with_its_ci(tmp_path):
    conv = _convergence(make_run(tmp_path))
    assert conv.ppl.converged_at == PPL_AT and conv.ppl.se is None and conv.ppl.log
    curves = [*conv.validity.values(), *conv.p_valid.values()]
    assert all(c.state == stats.CONVERGED and c.converged_at == VALIDITY_AT for c in curves)
    for r in (conv.ratio, conv.ratios[P_VALID_KEY]):
        assert r.value == pytest.approx(2.0)
        assert r.lo <= 2.0 <= r.hi and r.hi - r.lo < 0.5
        assert r.both_converged > 0.9
    assert set(conv.validity) == set(VALIDITY_KEYS) and set(conv.p_valid) == set(P_VALID_KEYS)
    headline = conv.validity[HEADLINE_KEY]
    assert headline.values[-1] == pytest.approx(0.9, abs=0.02)  # the failed record (0.0) is ignored
    # each point's SE: the binomial one of the n the probe recorded, or the scatter of the
    # checkpoints around it where that is larger
    binomial = [stats.proportion_se(v, 4096) for v in headline.values]
    assert binomial[-1] == pytest.approx(math.sqrt(0.9 * 0.1 / 4096), rel=0.05)
    scatter = stats.local_noise(headline.tokens, headline.values)
    assert headline.se == pytest.approx(np.maximum(binomial, scatter))
    assert headline.noise_from == analysis.FROM_GREEDY
    p_valid = conv.p_valid[P_VALID_KEY]
    assert p_valid.se == pytest.approx([p_valid_se(int(t), "all", "converges") for t in p_valid.tokens])


@pytest.mark.parametrize(
    ("shape", "state", "words"),
    [
        ("flat", stats.NO_CHANGE, "validity shows no change beyond noise"),
        ("rising", stats.MOVING, "validity is still moving at the end of the run"),
    ],
)
def test_no_ratio_from_a_curve_that_did_not_converge(tmp_path, shape, state, words):
    conv = _convergence(make_run(tmp_path, validity=shape))
    assert conv.ppl.converged_at == PPL_AT and conv.validity[HEADLINE_KEY].state == state
    assert conv.ratio is None and conv.ratio_to_ppl(conv.validity[HEADLINE_KEY]) is None
    assert conv.explain() == f"No validity/perplexity ratio: {words}"
    assert conv.p_valid[P_VALID_KEY].state == state and conv.ratios[P_VALID_KEY] is None
    p_valid_words = words.replace("validity", "p_valid", 1)
    assert conv.explain(P_VALID_KEY) == f"No p_valid/perplexity ratio: {p_valid_words}"


def test_too_few_points_have_no_convergence_point():
    rows = [{"tokens_seen": t, "val/ppl": 9.0 - t} for t in (1, 2, 3)] + [{"tokens_seen": 0, "val/ppl": 1.0}]
    conv = analysis.convergence(rows, [])
    assert conv.ppl.tokens == [1.0, 2.0, 3.0]  # a point at 0 tokens has no place on a log axis
    assert conv.ppl.converged_at is None and conv.ratio is None
    assert conv.ppl.describe == "has too few points (3 < 4)"
    assert (
        conv.explain()
        == "No validity/perplexity ratio: val/ppl has too few points (3 < 4); no validity records"
    )
    assert conv.explain(P_VALID_KEY).endswith("(3 < 4); no p_valid records")
    assert conv.validity == {} and conv.p_valid == {}


def test_greedy_flips_are_its_noise_and_p_valid_is_judged_on_its_own_se(tmp_path):
    """Issue 25: from VALIDITY_AT on, greedy validity flips between two values from one
    checkpoint to the next, in every language at once, while p_valid (with a small
    p_valid_se) settles at VALIDITY_AT and perplexity at PPL_AT."""
    conv = _convergence(make_run(tmp_path, validity="flips"))
    assert conv.ppl.converged_at == PPL_AT
    for key, curve in conv.validity.items():
        low, high = FLIPS[display.metric(key).name]
        flipping = [i for i, t in enumerate(curve.tokens) if t >= VALIDITY_AT]
        amplitude = float(np.std([curve.values[i] for i in flipping]))
        assert amplitude == pytest.approx((high - low) / 2, rel=0.02)  # alternating: half the jump
        # on its binomial SE alone (5-30x smaller) the detector takes the flips for movement
        binomial = [stats.proportion_se(v, N[display.language_of(key)]) for v in curve.values]
        assert max(binomial[i] for i in flipping) < amplitude / 5
        assert stats.detect_convergence(curve.tokens, curve.values, binomial).state == stats.MOVING
        # the report's SE of every flipping point covers the flips...
        assert min(curve.se[i] for i in flipping) >= amplitude
        # ...so the curve is judged on its level: it rose from near 0 (beyond noise) to the
        # middle of the flips and stays there. The scatter is pooled over the 7 nearest
        # checkpoints, so the flips' noise reaches up to LOCAL_HALF checkpoints back into
        # the rise, and the flat tail may start that much before the flips.
        assert curve.state == stats.CONVERGED, key
        start, flips_at = curve.tokens.index(curve.converged_at), curve.tokens.index(VALIDITY_AT)
        assert flips_at - stats.LOCAL_HALF <= start <= flips_at
    # p_valid is judged on the SE its probe recorded, and converges where it settles
    for key, curve in conv.p_valid.items():
        lang = display.language_of(key)
        assert curve.se == pytest.approx([p_valid_se(int(t), lang, "converges") for t in curve.tokens])
        assert max(curve.se) < 0.01 and curve.noise_from == analysis.FROM_P_VALID_SE
        assert curve.state == stats.CONVERGED and curve.converged_at == VALIDITY_AT
    r = conv.ratios[P_VALID_KEY]
    assert r.value == pytest.approx(VALIDITY_AT / PPL_AT) and r.lo <= r.value <= r.hi
    assert conv.explain(P_VALID_KEY) == (
        f"Level 0 expected validity (all, p_valid) converges after 2.00x the tokens of perplexity "
        f"(95% CI {r.lo:.2f}-{r.hi:.2f}; 200,000 vs 100,000 tokens seen)"
    )
    # the headline stays V_partial's, uncertain by the flips
    headline = conv.ratio
    assert headline.value == pytest.approx(conv.headline.converged_at / PPL_AT)
    assert headline.lo <= headline.value <= headline.hi and headline.hi - headline.lo > r.hi - r.lo


def _tau_by_pair_count(x: list[float], y: list[float]) -> float:
    concordant = discordant = tied_x = tied_y = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
        tied_x += dx == 0
        tied_y += dy == 0
        concordant += dx * dy > 0
        discordant += dx * dy < 0
    pairs = len(x) * (len(x) - 1) // 2
    return (concordant - discordant) / math.sqrt((pairs - tied_x) * (pairs - tied_y))


def test_mcqa_series_equals_direct_recomputation(tmp_path):
    rows = records.read(make_run(tmp_path) / "probes.jsonl")
    ok = [r for r in rows if r.ok and r.probe == "mcqa"]
    notes: list[str] = []
    got = mcqa_trends.mcqa_series(rows, notes)
    assert notes == []
    for task in TASKS:
        sep = [r.metrics[f"probe/mcqa/{task}/letter_separate/acc"] for r in ok]
        merged = [r.metrics[f"probe/mcqa/{task}/letter_merged/acc"] for r in ok]
        assert got[f"probe/mcqa/{task}/kendall_tau_sep_merged"] == pytest.approx(
            _tau_by_pair_count(sep, merged)
        )
    cells = [
        (
            i,
            task,
            family,
            r.metrics[f"{p}/wrapper_{family}/acc"],
            r.metrics[f"{p}/wrapper_{family}/parsable"],
        )
        for i, r in enumerate(ok)
        for task in TASKS
        for family in FAMILIES
        for p in [f"probe/mcqa/{task}"]
    ]
    ckpt, task, family, acc, parsable = (np.array(v) for v in zip(*cells, strict=True))
    assert got["probe/mcqa/all/cells"] == len(cells) == 20 * 8 * 5
    assert got["probe/mcqa/all/acc_parsable_r"] == pytest.approx(np.corrcoef(acc, parsable)[0, 1])
    dummies = np.column_stack([np.equal.outer(f, np.unique(f)) for f in (ckpt, task, family)]).astype(float)
    coef, *_ = np.linalg.lstsq(np.column_stack([parsable, dummies]), acc, rcond=None)
    resid_x = parsable - dummies @ np.linalg.lstsq(dummies, parsable, rcond=None)[0]
    rss = np.sum((acc - np.column_stack([parsable, dummies]) @ coef) ** 2)
    dof = len(acc) - np.linalg.matrix_rank(dummies) - 1
    assert got["probe/mcqa/all/parsability_beta"] == pytest.approx(coef[0], rel=1e-9)
    assert got["probe/mcqa/all/parsability_beta"] == pytest.approx(0.5, abs=0.05)
    assert got["probe/mcqa/all/parsability_beta_se"] == pytest.approx(
        math.sqrt(rss / dof / (resid_x @ resid_x))
    )
    assert "probe/mcqa/all/kendall_tau_sep_merged" not in got  # "all" is the probe's average, not a task


def test_mcqa_series_skips_what_the_data_cannot_support():
    rows = [
        record(
            t,
            "mcqa",
            {
                "probe/mcqa/wordcomp_en/letter_separate/acc": 0.5,
                "probe/mcqa/wordcomp_en/letter_merged/acc": 0.25,
                "probe/mcqa/wordcomp_en/wrapper_json/acc": 0.5,
                "probe/mcqa/wordcomp_en/wrapper_json/parsable": 1.0,
            },
        )
        for t in TOKENS[:2]
    ]
    notes: dict[str, str] = {}
    got = mcqa_trends.mcqa_series(rows, notes)
    assert math.isnan(got["probe/mcqa/wordcomp_en/kendall_tau_sep_merged"])
    assert got["probe/mcqa/all/cells"] == 2
    assert all(math.isnan(got[f"probe/mcqa/all/{k}"]) for k in ("acc_parsable_r", "parsability_beta"))
    tau = "probe/mcqa/wordcomp_en/kendall_tau_sep_merged"
    assert notes == {
        tau: "2 checkpoints with both letter accuracies, fewer than 3",
        **dict.fromkeys(
            [f"probe/mcqa/all/{k}" for k in mcqa_trends.PARSABILITY_KEYS],
            "2 wrapper cells (checkpoint, task, wrapper), fewer than 3",
        ),
    }
    empty = mcqa_trends.mcqa_series([])
    assert empty["probe/mcqa/all/cells"] == 0 and math.isnan(empty["probe/mcqa/all/parsability_beta_se"])


def test_task_groups_and_their_mean_curve():
    """Embedded groups first, a benchmark alone; a group's mean covers the tasks that have the metric."""
    metrics = [
        {"probe/mcqa/mmlu/cloze/acc": 0.4, "probe/mcqa/nonsenseqa_ja/cloze/acc": 0.2},
        {"probe/mcqa/wordcomp_en/cloze/acc": 0.5, "probe/mcqa/wordcomp_ja/cloze/acc": 0.7},
    ]
    cps = analysis.checkpoints(record(t, "mcqa", m) for t, m in zip((4096, 8192), metrics, strict=True))
    groups = mcqa_trends.task_groups(cps)
    assert list(groups.items()) == [
        ("wordcomp", ["wordcomp_en", "wordcomp_ja"]),
        ("nonsenseqa", ["nonsenseqa_ja"]),
        ("mmlu", ["mmlu"]),
    ]
    curve = mcqa_trends.group_mean_curve(cps, groups["wordcomp"], "acc", CLOZE)
    assert curve.tokens == [8192.0] and curve.values == [pytest.approx(0.6)]
    assert curve.key == mcqa("<wordcomp_en,wordcomp_ja>", "cloze", "acc")
    fsi = mcqa_trends.group_mean_curve(cps, groups["mmlu"], "fsi")
    assert fsi.tokens == [] and fsi.key == "probe/mcqa/<mmlu>/fsi"


def test_probe_cost_sums_logged_probe_seconds_against_the_last_wall_time():
    rows = [
        {"step": 1, "tokens_seen": 10, "perf/probe_seconds/level0": 1.5, "perf/probe_seconds/mcqa": 4.0},
        {"step": 2, "tokens_seen": 20, "perf/wall_seconds": 30.0, "train/loss": 2.0},
        {"step": 4, "tokens_seen": 40, "perf/probe_seconds/level0": 0.5, "perf/probe_seconds/mcqa": None},
        {"step": 4, "tokens_seen": 40, "perf/wall_seconds": 60.0},
    ]
    cost = analysis.probe_cost(rows)
    assert cost.seconds == {"level0": 2.0, "mcqa": 4.0} and cost.wall == 60.0
    assert cost.share == pytest.approx(0.1)
    assert cost.describe() == "6 s of 60 s of training (10.0%): level0 2 s, mcqa 4 s"
    assert analysis.probe_cost(rows[:1]) is None  # no wall time logged: no share invented


def test_time_to_tolerance_of_the_fabricated_curves(tmp_path):
    """Issue 36 on the flipping run: perplexity is within 2% from PPL_AT, p_valid within 0.01
    from VALIDITY_AT, so p_valid's ratio is 2 within this run, with a CI around it; greedy
    validity flips by 0.3 and is too noisy to tell 0.01, which the headline says instead of
    a number."""
    conv = _convergence(make_run(tmp_path, validity="flips"))
    assert conv.settling(conv.ppl).at == PPL_AT
    p_valid = conv.p_valid[P_VALID_KEY]
    assert conv.settling(p_valid).at == VALIDITY_AT
    assert conv.settling(conv.headline).state == settling.TOO_NOISY
    r = conv.tolerance_ratio(P_VALID_KEY)
    assert r.value == pytest.approx(2.0) and r.lo <= 2.0 <= r.hi and r.defined > 0.5
    assert conv.explain_tolerance(P_VALID_KEY) == (
        "Within this run, Level 0 expected validity (all, p_valid) comes within ±0.01 of its final "
        "level after 2.00x the tokens perplexity needs to come within ±2% of its own "
        f"(95% CI {settling.ci_text(r)}; 200,000 vs 100,000 tokens seen)"
    )
    assert conv.tolerance_ratio() is None
    assert conv.explain_tolerance().startswith(
        "No validity/perplexity time-to-tolerance ratio (±0.01 vs ±2%): "
        "validity too noisy to tell ±0.01 (noise"
    )
    # the grid: every pair of tolerances, the defaults among them
    grid = conv.tolerance_grids[P_VALID_KEY]
    assert set(grid) == {(v, p) for v in (0.005, 0.01, 0.02) for p in (0.01, 0.02, 0.05)}
    assert all(grid[(v, 0.02)].value == pytest.approx(2.0) for v in (0.005, 0.01, 0.02))
    assert all(cell is None for cell in conv.tolerance_grids[HEADLINE_KEY].values())


def test_tolerances_are_settings(tmp_path):
    run = make_run(tmp_path)
    rows, probes = read_jsonl(run / "metrics.jsonl"), records.read(run / "probes.jsonl")
    tolerance = settling.Tolerance(ppl_tolerance=0.05, validity_tolerance=0.03, ci_resamples=200)
    conv = analysis.convergence(rows, probes, tolerance)
    assert conv.tolerance.grid(True) == (0.01, 0.02, 0.05) and conv.tolerance.grid(False) == (
        0.005,
        0.01,
        0.02,
        0.03,
    )
    assert conv.settling(conv.ppl).eps == pytest.approx(math.log1p(0.05))  # perplexity: within a factor 1.05
    assert (0.03, 0.05) in conv.tolerance_grids[P_VALID_KEY]
    assert conv.explain_tolerance(P_VALID_KEY).startswith(
        "Within this run, Level 0 expected validity (all, p_valid) comes within ±0.03 of its final level"
    )
    for bad, flag in (
        (settling.Tolerance(ppl_tolerance=2.0), "--ppl_tolerance"),
        (settling.Tolerance(validity_grid=()), "--validity_grid"),
        (settling.Tolerance(ci_resamples=10), "--ci_resamples"),
    ):
        with pytest.raises(BytecanaryError, match=flag):
            analysis.convergence(rows, probes, bad)
