"""MCQA metrics against hand values and straightforward recomputation."""

import numpy as np
import pytest

from bytecanary import stats
from bytecanary.probes.mcqa.metrics import cloze_metrics, letter_correct, letter_metrics


def test_letter_metrics_hand_values():
    ll = [np.log([0.7, 0.1, 0.1, 0.1]), np.log([0.25, 0.25, 0.4, 0.1])]
    got = letter_metrics(ll, [0, 1])
    assert got["acc"] == 0.5
    # brier: (0.3^2 + 3 * 0.01) and (0.25^2 + 0.75^2 + 0.4^2 + 0.1^2), averaged
    assert got["brier"] == pytest.approx((0.09 + 0.03 + 0.0625 + 0.5625 + 0.16 + 0.01) / 2)
    assert got["ece"] == pytest.approx(stats.ece([0.7, 0.4], [1, 0]))


def test_cloze_normalisations_differ_for_cjk():
    # "abc": 3 characters, 3 bytes; "北京": 2 characters, 6 bytes (3 bytes a character)
    got = cloze_metrics([np.array([-3.0, -4.5])], [1], [["abc", "北京"]])
    # per character: -1 vs -2.25 picks "abc"; per byte: -1 vs -0.75 picks "北京"
    assert got == {"acc": 0.0, "acc_norm": 0.0, "acc_bytes": 1.0}


def test_mcnemar_between_strategies_from_per_item_correctness():
    rng = np.random.default_rng(0)
    ll_a = [rng.normal(size=4) for _ in range(200)]
    ll_b = [x + rng.normal(scale=0.8, size=4) for x in ll_a]
    answers = rng.integers(0, 4, 200)
    a, b = letter_correct(ll_a, answers), letter_correct(ll_b, answers)
    want = np.mean([np.argmax(x) == y for x, y in zip(ll_a, answers, strict=True)])
    assert a.mean() == want == letter_metrics(ll_a, answers)["acc"]
    assert 0 <= stats.mcnemar_exact(a, b) <= 1
