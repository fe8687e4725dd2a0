"""MCQA metrics from per-view log-likelihoods and graded answers: per task and protocol, across
protocols (McNemar, FSI / PSI / nFSI), and across tasks with a bootstrap CI ("Format
Sensitivity Index", arXiv 2607.09665, table 2); every key from ``bytecanary.keys``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from bytecanary import stats
from bytecanary.probes.mcqa import keys, metrics, wrappers
from bytecanary.probes.mcqa.generation import Grades
from bytecanary.probes.mcqa.views import View

MATCHED_DELTA_TOK = 0.05  # an item is token-matched when its wrappers' lengths differ by <= 5%


@dataclass
class TaskMetrics:
    """One task's metrics: per protocol, and across protocols."""

    protocols: dict[str, dict[str, float]] = field(default_factory=dict)  # protocol -> metric -> value
    task: dict[str, float] = field(default_factory=dict)  # mcnemar_p, fsi, ..., n

    def keyed(self, task: str) -> dict[str, float]:
        out = {keys.mcqa(task, p, m): float(v) for p, ms in self.protocols.items() for m, v in ms.items()}
        out.update({keys.mcqa_task(task, m): float(v) for m, v in self.task.items()})
        return out


def generative_metrics(
    grades: Mapping[str, Grades], views: Sequence[View], base: list[int]
) -> dict[str, dict[str, float]]:
    """Per generative protocol, the metrics of the views ``base``."""
    answers = np.array([views[i].item.answer for i in base])
    out = {}
    for p, g in grades.items():
        if p == keys.DASHED:
            out[p] = metrics.generated_metrics(g.predicted[base], answers, rules=g.rule[base])
        else:
            out[p] = metrics.generated_metrics(g.predicted[base], answers, normalised=g.normalised[base])
            out[p]["prompt_tokens"] = float(g.prompt_tokens[base].mean())
    return out


def wrapper_indices(
    grades: Mapping[str, Grades], views: Sequence[View], base: list[int], families: list[str], seed: int
) -> dict[str, float]:
    """FSI / PSI / nFSI of one task: strict with bootstrap CIs, normalised, and on the
    token-matched subset with its own CIs; the median Delta_tok and the matched share."""
    answers = np.array([views[i].item.answer for i in base])[:, None, None]
    strict = np.stack([grades[f].predicted[base] for f in families], axis=1)  # (items, wrappers, seeds)
    normalised = np.stack([grades[f].normalised[base] for f in families], axis=1)
    tokens = np.stack([grades[f].prompt_tokens[base] for f in families], axis=1)
    m = wrappers.sensitivity(strict == answers, strict >= 0, seed=seed)
    loose = wrappers.sensitivity(normalised == answers, normalised >= 0, n_resamples=0)
    m.update({f"{k}_normalised": loose[k] for k in keys.WRAPPER_INDICES})
    dtok = wrappers.delta_tok(tokens)
    matched = dtok <= MATCHED_DELTA_TOK
    m["delta_tok_median"], m["matched_share"] = float(np.median(dtok)), float(matched.mean())
    if matched.any():
        sub = wrappers.sensitivity((strict == answers)[matched], (strict >= 0)[matched], seed=seed)
        m.update({k.replace("fsi", "fsi_matched").replace("psi", "psi_matched"): v for k, v in sub.items()})
    return {k: float(v) for k, v in m.items()}


def wrapper_wins(
    grades: Mapping[str, Grades], views: Sequence[View], base: list[int], families: list[str]
) -> dict[str, float]:
    """1.0 for each wrapper protocol with the task's best strict accuracy, else 0.0."""
    answers = np.array([views[i].item.answer for i in base])[:, None, None]
    strict = np.stack([grades[f].predicted[base] for f in families], axis=1)
    acc = (strict == answers).mean(axis=(0, 2))
    return {f: float(a == acc.max()) for f, a in zip(families, acc, strict=True)}


def task_metrics(
    task: str,
    views: Sequence[View],
    per_view: dict[str, list[np.ndarray]],
    grades: Mapping[str, Grades],
    permutations: bool,
    seed: int,
) -> TaskMetrics:
    """Every metric of one task (``per_view``: the scored protocols' log-likelihoods;
    ``grades``: the generative protocols')."""
    by_rotation: dict[int, list[int]] = {}
    for i, v in enumerate(views):
        if v.item.task == task:
            by_rotation.setdefault(v.rotation, []).append(i)
    base = by_rotation[0]
    answers = [views[i].item.answer for i in base]

    def scored(protocol: str, rows: list[int]) -> dict[str, float]:
        lls = [per_view[protocol][i] for i in rows]
        rows_answers = [views[i].item.answer for i in rows]
        if protocol == keys.CLOZE:
            return metrics.cloze_metrics(lls, rows_answers, [views[i].item.choices for i in rows])
        return metrics.letter_metrics(lls, rows_answers)

    out = TaskMetrics()
    present = [p for p in per_view if p in views[base[0]].encodings]  # a multiple-input task: cloze
    for p in present:
        out.protocols[p] = scored(p, base)
        if permutations:
            accs = [scored(p, rows)["acc"] for rows in by_rotation.values()]
            out.protocols[p]["acc_perm_spread"] = float(max(accs) - min(accs))
    with_answers = [i for i in base if views[i].prompts]
    if with_answers:
        out.protocols.update(generative_metrics(grades, views, with_answers))
    if task.startswith("nonsenseqa"):
        chance = float(np.mean([1 / len(views[i].item.choices) for i in base]))
        for m in out.protocols.values():
            m["chance_gap"] = m["acc"] - chance
            m["chance_distance"] = abs(m["chance_gap"])
    if {keys.SEPARATE, keys.MERGED} <= set(present):
        a = metrics.letter_correct([per_view[keys.SEPARATE][i] for i in base], answers)
        b = metrics.letter_correct([per_view[keys.MERGED][i] for i in base], answers)
        out.task["mcnemar_p"] = stats.mcnemar_exact(a, b)
    families = [p for p in grades if p.startswith(keys.WRAPPER)]
    if len(families) > 1 and with_answers:
        out.task.update(wrapper_indices(grades, views, with_answers, families, seed))
        for f, win in wrapper_wins(grades, views, with_answers, families).items():
            out.protocols[f]["win"] = win
    out.task["n"] = float(len(base))
    return out


def across_tasks(per_task: dict[str, TaskMetrics]) -> dict[str, float]:
    """``probe/mcqa/all/...``: FSI / PSI / nFSI averaged over tasks (bootstrap CI across
    tasks) and how many tasks each wrapper won."""
    agg: dict[str, float] = {}
    for name in keys.WRAPPER_INDICES:
        values = [t.task[name] for t in per_task.values() if name in t.task]
        if values:
            agg[keys.mcqa_task("all", name)] = float(np.mean(values))
            lo, hi = stats.bootstrap_ci(values)
            agg[keys.mcqa_task("all", f"{name}_lo")], agg[keys.mcqa_task("all", f"{name}_hi")] = lo, hi
    for t in per_task.values():
        for p, m in t.protocols.items():
            if "win" in m:
                key = keys.mcqa("all", p, "wins")
                agg[key] = agg.get(key, 0.0) + m["win"]
    return agg


def mcqa_metrics(
    views: Sequence[View],
    per_view: dict[str, list[np.ndarray]],
    grades: Mapping[str, Grades],
    permutations: bool,
    seed: int,
) -> dict[str, float]:
    """The probe's metric dict: every task's, then the averages across tasks."""
    tasks = sorted({v.item.task for v in views})
    per_task = {t: task_metrics(t, views, per_view, grades, permutations, seed) for t in tasks}
    out: dict[str, float] = {}
    for task, result in per_task.items():
        out.update(result.keyed(task))
    out.update(across_tasks(per_task))
    return out
