"""Per-protocol MCQA metrics from per-item choice log-likelihoods (the space-tokenization trap
MCQA paper, section 1; lm-evaluation-harness): ``acc``, ``ece``, ``brier`` for letters;
``acc``, ``acc_norm``, ``acc_bytes`` for cloze (per character vs per byte differ for CJK).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bytecanary import stats
from bytecanary.probes.mcqa.dashed import RULES


def _softmax(ll: np.ndarray) -> np.ndarray:
    z = np.exp(ll - ll.max())
    return z / z.sum()


def letter_metrics(ll: Sequence[np.ndarray], answers: Sequence[int], n_bins: int = 10) -> dict[str, float]:
    probs = [_softmax(np.asarray(x, dtype=np.float64)) for x in ll]
    correct = np.array([int(np.argmax(p)) == a for p, a in zip(probs, answers, strict=True)])
    confidence = np.array([p.max() for p in probs])
    brier = np.mean([((p - np.eye(len(p))[a]) ** 2).sum() for p, a in zip(probs, answers, strict=True)])
    return {
        "acc": float(correct.mean()),
        "ece": stats.ece(confidence, correct, n_bins),
        "brier": float(brier),
    }


def letter_correct(ll: Sequence[np.ndarray], answers: Sequence[int]) -> np.ndarray:
    """Per-item correctness, for McNemar between two strategies on the same items."""
    return np.array([int(np.argmax(x)) == a for x, a in zip(ll, answers, strict=True)])


def cloze_metrics(
    ll: Sequence[np.ndarray], answers: Sequence[int], choices: Sequence[Sequence[str]]
) -> dict[str, float]:
    acc, norm, by_bytes = [], [], []
    for x, a, texts in zip(ll, answers, choices, strict=True):
        x = np.asarray(x, dtype=np.float64)
        acc.append(int(np.argmax(x)) == a)
        norm.append(int(np.argmax(x / np.array([len(t) for t in texts]))) == a)
        by_bytes.append(int(np.argmax(x / np.array([len(t.encode("utf-8")) for t in texts]))) == a)
    return {
        "acc": float(np.mean(acc)),
        "acc_norm": float(np.mean(norm)),
        "acc_bytes": float(np.mean(by_bytes)),
    }


def generated_metrics(
    pred: np.ndarray,
    answers: np.ndarray,
    normalised: np.ndarray | None = None,
    rules: np.ndarray | None = None,
) -> dict[str, float]:
    """Generative protocols from (items, seeds) predicted options (-1: none): ``acc``; wrappers add
    ``parsable`` and the ``_normalised`` pair, M&D each rule's share (``rule_<name>``), ``matched``
    and ``acc_matched``.
    """
    answers = np.asarray(answers)[:, None]
    out = {"acc": float((pred == answers).mean())}
    if normalised is not None:
        out["parsable"] = float((pred >= 0).mean())
        out["acc_normalised"] = float((normalised == answers).mean())
        out["parsable_normalised"] = float((normalised >= 0).mean())
    if rules is not None:
        out.update({f"rule_{r}": float((rules == r).mean()) for r in RULES})
        matched = pred >= 0
        out["matched"] = float(matched.mean())
        out["acc_matched"] = float((pred == answers)[matched].mean()) if matched.any() else float("nan")
    return out
