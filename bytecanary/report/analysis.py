"""The numbers behind ``bytecanary report``.

Pure functions over the rows of ``metrics.jsonl`` and ``probes.jsonl``: when validation
perplexity and Level 0 validity each converge, with one rule for both curves
(``stats.convergence_point``). "Beyond Perplexity: UTF-8 Validity in Byte-aware LMs"
(arXiv:2606.14122, abstract and section 1) finds that validity needs about twice the
tokens perplexity needs (4.2B vs 2.1B). And how the MCQA protocols behave across
checkpoints: whether the two letter space strategies rank checkpoints alike (the
space-tokenization trap paper, section 3.3, saw them reorder models), and how far accuracy
follows parsability across wrappers ("Format Sensitivity Index: Token-Controlled Prompt
Wrapper Robustness and Schema Compliance in LLM Benchmarks", arXiv:2607.09665, section 5.2,
eq. 5). Absent keys are absent data, never zeros.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from bytecanary import keys, stats
from bytecanary.data.languages import LANGUAGES

HEADLINE_KEY = keys.level0()  # V_partial over all languages and tiers
VALIDITY_KEYS = tuple(
    keys.level0(lang, "all", m) for lang in ("all", *LANGUAGES) for m in ("partial", "strict")
)
MIN_POINTS = 3  # fewer checkpoints (or cells) than this: no convergence point, tau or fit
SEPARATE, MERGED, CLOZE, DASHED = keys.SEPARATE, keys.MERGED, keys.CLOZE, keys.DASHED


def finite(value: Any) -> float | None:
    """A finite float, or None for a missing, null, NaN or non-numeric value."""
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    return None


@dataclass(frozen=True)
class Checkpoint:
    """One probed checkpoint: the metrics of all its successful probe records merged."""

    key: str
    step: int | None
    tokens_seen: int | None
    metrics: dict[str, Any]

    def value(self, key: str) -> float | None:
        return finite(self.metrics.get(key))


def checkpoints(probe_rows: Iterable[dict[str, Any]]) -> list[Checkpoint]:
    """Checkpoints in training order; a later record of the same (checkpoint, probe) wins,
    as a rerun's would. Failed records are ignored."""
    merged: dict[str, Checkpoint] = {}
    for row in probe_rows:
        if row.get("status") != "ok":
            continue
        key = row.get("checkpoint") or f"step={row.get('step')} tokens={row.get('tokens_seen')}"
        old = merged.get(key)
        metrics = {**(old.metrics if old else {}), **(row.get("metrics") or {})}
        merged[key] = Checkpoint(key, row.get("step"), row.get("tokens_seen"), metrics)
    return sorted(
        merged.values(),
        key=lambda c: (c.tokens_seen is None, c.tokens_seen or 0, c.step is None, c.step or 0),
    )


@dataclass(frozen=True)
class Curve:
    """A metric against tokens seen and where it converges (None: it did not, or too few points)."""

    key: str
    tokens: list[float]
    values: list[float]
    converged_at: float | None

    @property
    def describe(self) -> str:
        """Where it converges, or why it has no convergence point."""
        if len(self.tokens) < MIN_POINTS:
            return f"has too few points ({len(self.tokens)} < {MIN_POINTS})"
        if self.converged_at is None:
            return "has not converged (its last point is outside the band)"
        return f"converges at {self.converged_at:,.0f} tokens seen"


def make_curve(key: str, points: Iterable[tuple[Any, Any]]) -> Curve:
    """A curve from (tokens_seen, value) pairs; points without either are dropped and a
    repeated x keeps its last value (a resumed run logs a step again)."""
    by_x: dict[float, float] = {}
    for x, y in points:
        if finite(x) is not None and finite(y) is not None:
            by_x[float(x)] = float(y)
    xs = sorted(by_x)
    ys = [by_x[x] for x in xs]
    converged = stats.convergence_point(xs, ys) if len(xs) >= MIN_POINTS else None
    return Curve(key, xs, ys, converged)


def probe_curve(cps: Sequence[Checkpoint], key: str) -> Curve:
    return make_curve(key, ((c.tokens_seen, c.metrics.get(key)) for c in cps))


@dataclass(frozen=True)
class Convergence:
    """Perplexity and validity curves with their convergence points."""

    ppl: Curve
    validity: dict[str, Curve]  # by metric key; only keys some checkpoint has

    def ratio_to_ppl(self, tokens: float | None) -> float | None:
        """tokens / perplexity's convergence tokens; None when either is missing."""
        base = self.ppl.converged_at
        return tokens / base if tokens is not None and base else None

    @property
    def validity_tokens(self) -> float | None:
        headline = self.validity.get(HEADLINE_KEY)
        return headline.converged_at if headline else None

    @property
    def ratio(self) -> float | None:
        """The headline: validity (``all/all/partial``) over perplexity convergence tokens."""
        return self.ratio_to_ppl(self.validity_tokens)

    def explain(self) -> str:
        """The headline ratio, or why there is none, in one line."""
        if self.ratio is not None:
            return (
                f"Level 0 validity converges after {self.ratio:.2f}x the tokens of perplexity "
                f"({self.validity_tokens:,.0f} vs {self.ppl.converged_at:,.0f} tokens seen)"
            )
        headline = self.validity.get(HEADLINE_KEY)
        validity = headline.describe if headline else "has no records"
        return f"No validity/perplexity ratio: val/ppl {self.ppl.describe}, Level 0 validity {validity}"


def convergence(metrics_rows: Iterable[dict[str, Any]], probe_rows: Iterable[dict[str, Any]]) -> Convergence:
    """Convergence of ``val/ppl`` and of Level 0 partial/strict validity (all, en, ja, ko,
    zh) against tokens seen, all by the same relative-band rule."""
    ppl = make_curve(keys.val_ppl(), ((r.get(keys.TOKENS_SEEN), r.get(keys.val_ppl())) for r in metrics_rows))
    cps = checkpoints(probe_rows)
    present = {k for c in cps for k in c.metrics}
    validity = {key: probe_curve(cps, key) for key in VALIDITY_KEYS if key in present}
    return Convergence(ppl, validity)


def mcqa_tasks(cps: Sequence[Checkpoint]) -> list[str]:
    """Every MCQA task the checkpoints hold, sorted."""
    return keys.mcqa_tasks(k for c in cps for k in c.metrics)


def _sep_merged_tau(cps: Sequence[Checkpoint], task: str, notes: list[str]) -> float:
    """Do the two letter strategies rank the checkpoints alike? Kendall tau-b over checkpoints."""
    sep_key, merged_key = keys.mcqa(task, SEPARATE, "acc"), keys.mcqa(task, MERGED, "acc")
    pairs = [(c.value(sep_key), c.value(merged_key)) for c in cps]
    both = [(sep, merged) for sep, merged in pairs if sep is not None and merged is not None]
    if len(both) < MIN_POINTS:
        notes.append(f"{task}: Kendall tau needs {MIN_POINTS} checkpoints with both letter accuracies")
        return math.nan
    tau = stats.kendall_tau_b(*zip(*both, strict=True))
    if math.isnan(tau):
        notes.append(f"{task}: Kendall tau undefined (an accuracy is constant across checkpoints)")
    return tau


def wrapper_cells(cps: Sequence[Checkpoint]) -> list[tuple[str, str, str, float, float]]:
    """(checkpoint, task, wrapper family, acc, parsable) for every cell that has both."""
    cells = []
    for c in cps:
        for key in sorted(c.metrics):
            cell = keys.wrapper_cell(key)
            if cell is None:
                continue
            task, family = cell
            acc, parsable = c.value(key), c.value(keys.mcqa(task, f"{keys.WRAPPER}{family}", "parsable"))
            if acc is not None and parsable is not None:
                cells.append((c.key, task, family, acc, parsable))
    return cells


def _parsability(cells: list[tuple[str, str, str, float, float]], notes: list[str]) -> dict[str, float]:
    """Does accuracy follow parsability across wrappers? Pearson r over cells, and the slope
    of A = beta * P + alpha_checkpoint + gamma_task + delta_wrapper with its SE."""
    out = {keys.mcqa_task("all", "cells"): float(len(cells))}
    r = beta = se = math.nan
    if len(cells) < MIN_POINTS:
        notes.append(f"wrappers: {len(cells)} (checkpoint, task, wrapper) cells, need {MIN_POINTS}")
    else:
        ckpt, task, family, acc, parsable = zip(*cells, strict=True)
        r = stats.pearson_r(parsable, acc)
        if math.isnan(r):
            notes.append("wrappers: Pearson r undefined (accuracy or parsability is constant)")
        try:
            beta, se = stats.fixed_effects_fit(
                acc, parsable, {"checkpoint": ckpt, "task": task, "wrapper": family}
            )
        except ValueError as err:
            notes.append(f"wrappers: no fixed-effects fit ({str(err).removeprefix('fixed_effects_fit: ')})")
    out |= {
        keys.mcqa_task("all", "acc_parsable_r"): r,
        keys.mcqa_task("all", "parsability_beta"): beta,
        keys.mcqa_task("all", "parsability_beta_se"): se,
    }
    return out


def mcqa_series(probe_rows: Iterable[dict[str, Any]], notes: list[str] | None = None) -> dict[str, float]:
    """MCQA statistics across checkpoints, as flat ``probe/mcqa/...`` keys.

    Per task with letter accuracies, ``<task>/kendall_tau_sep_merged``; over all
    (checkpoint, task, wrapper_<family>) cells, ``all/acc_parsable_r``,
    ``all/parsability_beta``, ``all/parsability_beta_se`` and ``all/cells``. A statistic
    the data cannot support is NaN, and the reason is appended to ``notes``.
    """
    notes = [] if notes is None else notes
    cps = checkpoints(probe_rows)
    out = {}
    for task in mcqa_tasks(cps):
        letter = (keys.mcqa(task, SEPARATE, "acc"), keys.mcqa(task, MERGED, "acc"))
        if any(k in c.metrics for c in cps for k in letter):
            out[keys.mcqa_task(task, "kendall_tau_sep_merged")] = _sep_merged_tau(cps, task, notes)
    return out | _parsability(wrapper_cells(cps), notes)


def task_groups(cps: Sequence[Checkpoint]) -> dict[str, list[str]]:
    """MCQA tasks by group, the embedded groups (word completion, NonsenseQA) first."""
    groups: dict[str, list[str]] = {}
    for task in mcqa_tasks(cps):
        groups.setdefault(keys.task_group(task), []).append(task)
    order = {group: i for i, group in enumerate(keys.TASK_GROUPS)}
    return dict(sorted(groups.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0])))


def mcqa_key(task: str, metric: str, protocol: str | None = None) -> str:
    """One protocol's metric on a task, or (no ``protocol``) the task's own, e.g. ``fsi``."""
    return keys.mcqa(task, protocol, metric) if protocol else keys.mcqa_task(task, metric)


def group_mean_curve(
    cps: Sequence[Checkpoint], tasks: Sequence[str], metric: str, protocol: str | None = None
) -> Curve:
    """Mean over ``tasks`` of one MCQA metric at each checkpoint, over the tasks that have
    it there; the curve's key names the group as ``<task,task,...>``."""
    points = []
    for c in cps:
        values = [v for t in tasks if (v := c.value(mcqa_key(t, metric, protocol))) is not None]
        points.append((c.tokens_seen, sum(values) / len(values) if values else None))
    return make_curve(mcqa_key(f"<{','.join(tasks)}>", metric, protocol), points)
