"""Convergence points and cross-checkpoint MCQA statistics, against direct recomputations."""

import itertools
import json
import math

import numpy as np
import pytest

from bytecanary import keys
from bytecanary.io import read_jsonl
from bytecanary.report import analysis

from .runs import FAMILIES, PPL_AT, TASKS, TOKENS, VALIDITY_AT, make_run, ppl, record, validity


def _converges_at(xs: list[float], ys: list[float], rtol: float = 0.05, tail: float = 0.1) -> float | None:
    """The convergence rule written out: walk back from the end while points stay in the band."""
    plateau = sum(ys[-math.ceil(tail * len(ys)) :]) / math.ceil(tail * len(ys))
    first = None
    for x, y in reversed(list(zip(xs, ys, strict=True))):
        if abs(y - plateau) > rtol * abs(plateau):
            break
        first = x
    return first


def test_convergence_ratio_equals_a_recomputation(tmp_path):
    run = make_run(tmp_path)
    conv = analysis.convergence(read_jsonl(run / "metrics.jsonl"), read_jsonl(run / "probes.jsonl"))
    want_ppl = _converges_at(TOKENS, [ppl(t) for t in TOKENS])
    want_validity = _converges_at(TOKENS, [validity(t, 0.9) for t in TOKENS])
    assert (want_ppl, want_validity) == (PPL_AT, VALIDITY_AT)
    assert conv.ppl.converged_at == want_ppl
    assert conv.validity_tokens == want_validity
    assert conv.ratio == pytest.approx(want_validity / want_ppl) == pytest.approx(2.0)
    assert set(conv.validity) == set(analysis.VALIDITY_KEYS)
    assert conv.validity[analysis.HEADLINE_KEY].values[-1] == 0.9  # the failed record is ignored


def test_too_few_points_have_no_convergence_point():
    conv = analysis.convergence([{"tokens_seen": 1, "val/ppl": 5.0}, {"tokens_seen": 2, "val/ppl": 4.0}], [])
    assert conv.ppl.converged_at is None and conv.ratio is None
    assert "too few points" in conv.ppl.describe
    assert conv.validity == {}


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
    rows = [json.loads(line) for line in (make_run(tmp_path) / "probes.jsonl").read_text().splitlines()]
    ok = [r for r in rows if r["status"] == "ok" and r["probe"] == "mcqa"]
    notes: list[str] = []
    got = analysis.mcqa_series(rows, notes)
    assert notes == []
    for task in TASKS:
        sep = [r["metrics"][f"probe/mcqa/{task}/letter_separate/acc"] for r in ok]
        merged = [r["metrics"][f"probe/mcqa/{task}/letter_merged/acc"] for r in ok]
        assert got[f"probe/mcqa/{task}/kendall_tau_sep_merged"] == pytest.approx(
            _tau_by_pair_count(sep, merged)
        )
    cells = [
        (
            i,
            task,
            family,
            r["metrics"][f"{p}/wrapper_{family}/acc"],
            r["metrics"][f"{p}/wrapper_{family}/parsable"],
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
    notes: list[str] = []
    got = analysis.mcqa_series(rows, notes)
    assert math.isnan(got["probe/mcqa/wordcomp_en/kendall_tau_sep_merged"])
    assert got["probe/mcqa/all/cells"] == 2
    assert all(math.isnan(got[f"probe/mcqa/all/{k}"]) for k in ("acc_parsable_r", "parsability_beta"))
    assert len(notes) == 2 and "Kendall tau needs 3 checkpoints" in notes[0]
    empty = analysis.mcqa_series([])
    assert empty["probe/mcqa/all/cells"] == 0 and math.isnan(empty["probe/mcqa/all/parsability_beta_se"])


def test_task_groups_and_their_mean_curve():
    """Embedded groups first, a benchmark alone; a group's mean covers the tasks that have the metric."""
    metrics = [
        {"probe/mcqa/mmlu/cloze/acc": 0.4, "probe/mcqa/nonsenseqa_ja/cloze/acc": 0.2},
        {"probe/mcqa/wordcomp_en/cloze/acc": 0.5, "probe/mcqa/wordcomp_ja/cloze/acc": 0.7},
    ]
    cps = analysis.checkpoints(record(t, "mcqa", m) for t, m in zip((1000, 2000), metrics, strict=True))
    groups = analysis.task_groups(cps)
    assert list(groups.items()) == [
        ("wordcomp", ["wordcomp_en", "wordcomp_ja"]),
        ("nonsenseqa", ["nonsenseqa_ja"]),
        ("mmlu", ["mmlu"]),
    ]
    curve = analysis.group_mean_curve(cps, groups["wordcomp"], "acc", analysis.CLOZE)
    assert curve.tokens == [2000.0] and curve.values == [pytest.approx(0.6)]
    assert curve.key == keys.mcqa("<wordcomp_en,wordcomp_ja>", "cloze", "acc")
    fsi = analysis.group_mean_curve(cps, groups["mmlu"], "fsi")
    assert fsi.tokens == [] and fsi.key == "probe/mcqa/<mmlu>/fsi"
