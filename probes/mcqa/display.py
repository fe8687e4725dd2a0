"""How the MCQA probe's keys are shown: ``probe/mcqa/<task>/<protocol>/<metric>``, and the
few W&B charts that carry the paper's findings (``bytecanary.display``)."""

from __future__ import annotations

from bytecanary import keys
from bytecanary.display import Display, Table
from bytecanary.probes.mcqa import keys as mkeys
from bytecanary.probes.mcqa.keys import CLOZE, DASHED, MERGED, SEPARATE

HEADLINE_ACROSS_TASKS = ("fsi", "fsi_lo", "fsi_hi", "psi", "psi_lo", "psi_hi")  # over tasks (``all``)


def headline(k: keys.ProbeKey) -> bool:
    """Across tasks, FSI and PSI; per task group (derived) and per benchmark, accuracy; per
    task, cloze accuracy; NonsenseQA's distance from chance."""
    if len(k.fields) == 1:
        return k.fields[0] == "all" and k.metric in HEADLINE_ACROSS_TASKS
    if len(k.fields) != 2:
        return False
    task, protocol = k.fields
    if k.metric == "acc":
        return task in mkeys.TASK_GROUPS or protocol == mkeys.CLOZE or mkeys.task_group(task) == task != "all"
    return k.metric == "chance_gap" and task == "nonsenseqa"


GROUPED = ("acc", "chance_gap")  # averaged over each task group for display


def group_means(metrics: dict[str, float]) -> dict[str, float]:
    """Accuracy and distance from chance averaged over each task group
    (``probe/mcqa/wordcomp/cloze/acc`` over ``wordcomp_<lang>``): shown, not recorded."""
    sums: dict[str, list[float]] = {}
    for key, value in metrics.items():
        k = keys.read(key)
        if k is not None and k.probe == mkeys.MCQA and len(k.fields) == 2 and k.metric in GROUPED:
            group = mkeys.task_group(k.fields[0])
            if group in mkeys.TASK_GROUPS:
                sums.setdefault(mkeys.mcqa(group, k.fields[1], k.metric), []).append(value)
    return {k: sum(v) / len(v) for k, v in sums.items()}


# accuracy averaged over the embedded (word) and NonsenseQA (nonsense) tasks, and the wrapper indices
TABLE = Table(
    "MCQA (accuracy, mean over tasks)",
    (
        ("word sep", mkeys.mcqa("wordcomp", SEPARATE, "acc")),
        ("word mrg", mkeys.mcqa("wordcomp", MERGED, "acc")),
        ("word cloze", mkeys.mcqa("wordcomp", CLOZE, "acc")),
        ("word M&D", mkeys.mcqa("wordcomp", DASHED, "acc")),
        ("nons sep", mkeys.mcqa("nonsenseqa", SEPARATE, "acc")),
        ("nons M&D", mkeys.mcqa("nonsenseqa", DASHED, "acc")),
        ("FSI", mkeys.mcqa_task("all", "fsi")),
        ("PSI", mkeys.mcqa_task("all", "psi")),
    ),
)

DISPLAY = Display(
    fields=("task", "protocol"),
    headline=headline,
    table=TABLE,
    metrics=mkeys.METRICS,
    smooth=mkeys.SMOOTH,
    derived=group_means,
    sections=("bytecanary.probes.mcqa.report:MCQA_SECTION",),
    report_table=False,
)
