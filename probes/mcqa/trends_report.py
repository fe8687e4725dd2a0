"""The MCQA statistics across checkpoints: whether the two letter space strategies rank
checkpoints alike (the space-tokenization trap paper, section 3.3), and how far accuracy follows
parsability across wrappers (arXiv:2607.09665, section 5.2, eq. 5). Absent keys are absent data."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from bytecanary import stats
from bytecanary.probes.mcqa import keys
from bytecanary.probes.mcqa.keys import MERGED, SEPARATE
from bytecanary.records import Record
from bytecanary.report.analysis import Checkpoint, Curve, checkpoints, make_curve

MIN_POINTS = 3  # fewer checkpoints (or cells) than this: no tau or fit
PARSABILITY_KEYS = ("acc_parsable_r", "parsability_beta", "parsability_beta_se")  # over all wrapper cells


def mcqa_tasks(cps: Sequence[Checkpoint]) -> list[str]:
    """Every MCQA task the checkpoints hold, sorted."""
    return keys.tasks(k for c in cps for k in c.metrics)


def _sep_merged_tau(cps: Sequence[Checkpoint], task: str, notes: dict[str, str]) -> float:
    """Do the two letter strategies rank the checkpoints alike? Kendall tau-b over checkpoints."""
    key = keys.mcqa_task(task, "kendall_tau_sep_merged")
    sep_key, merged_key = keys.mcqa(task, SEPARATE, "acc"), keys.mcqa(task, MERGED, "acc")
    pairs = [(c.value(sep_key), c.value(merged_key)) for c in cps]
    both = [(sep, merged) for sep, merged in pairs if sep is not None and merged is not None]
    if len(both) < MIN_POINTS:
        notes[key] = f"{len(both)} checkpoints with both letter accuracies, fewer than {MIN_POINTS}"
        return math.nan
    sep, merged = zip(*both, strict=True)
    tau = stats.kendall_tau_b(sep, merged)
    if math.isnan(tau):
        constant = "separate" if len(set(sep)) == 1 else "merged"
        notes[key] = f"{constant}-letter accuracy is the same at every checkpoint"
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


def _same_in_every_cell(values: dict[str, Sequence[float]]) -> str | None:
    """Why a statistic over the wrapper cells is undefined: the named values never change."""
    flat = [name for name, v in values.items() if len(set(v)) == 1]
    if not flat:
        return None
    return f"{' and '.join(flat)} {'is' if len(flat) == 1 else 'are'} the same in every wrapper cell"


def _parsability(cells: list[tuple[str, str, str, float, float]], notes: dict[str, str]) -> dict[str, float]:
    """Does accuracy follow parsability across wrappers? Pearson r over cells, and the slope
    of A = beta * P + alpha_checkpoint + gamma_task + delta_wrapper with its SE."""
    r_key, beta_key, se_key = (keys.mcqa_task("all", k) for k in PARSABILITY_KEYS)
    out = {
        keys.mcqa_task("all", "cells"): float(len(cells)),
        **dict.fromkeys((r_key, beta_key, se_key), math.nan),
    }
    if len(cells) < MIN_POINTS:
        why = f"{len(cells)} wrapper cells (checkpoint, task, wrapper), fewer than {MIN_POINTS}"
        notes.update(dict.fromkeys((r_key, beta_key, se_key), why))
        return out
    ckpt, task, family, acc, parsable = zip(*cells, strict=True)
    out[r_key] = stats.pearson_r(parsable, acc)
    if math.isnan(out[r_key]):
        notes[r_key] = _same_in_every_cell({"accuracy": acc, "parsability": parsable}) or "undefined"
    try:
        out[beta_key], out[se_key] = stats.fixed_effects_fit(
            acc, parsable, {"checkpoint": ckpt, "task": task, "wrapper": family}
        )
    except ValueError as err:
        fit = str(err).removeprefix("fixed_effects_fit: ").replace("x is", "parsability is")
        notes.update(dict.fromkeys((beta_key, se_key), _same_in_every_cell({"parsability": parsable}) or fit))
    return out


def mcqa_series(probe_records: Iterable[Record], notes: dict[str, str] | None = None) -> dict[str, float]:
    """MCQA statistics across checkpoints as flat ``probe/mcqa/...`` keys: per task
    ``kendall_tau_sep_merged``; over all wrapper cells ``all/acc_parsable_r``, ``all/parsability_beta``
    (and ``_se``), ``all/cells``. An unsupported statistic is NaN, its reason in ``notes``.
    """
    notes = {} if notes is None else notes
    cps = checkpoints(probe_records)
    out = {}
    for task in mcqa_tasks(cps):
        letter = (keys.mcqa(task, SEPARATE, "acc"), keys.mcqa(task, MERGED, "acc"))
        if any(k in c.metrics for c in cps for k in letter):
            out[keys.mcqa_task(task, "kendall_tau_sep_merged")] = _sep_merged_tau(cps, task, notes)
    return out | _parsability(wrapper_cells(cps), notes)


def series(probe_records: list[Record], notes: dict[str, str]) -> dict[str, float]:
    """``mcqa_series`` where the records hold an MCQA task, else nothing."""
    return mcqa_series(probe_records, notes) if mcqa_tasks(checkpoints(probe_records)) else {}


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
