"""How the MCQA probe's keys are shown: ``probe/mcqa/<task>/<protocol>/<metric>``, and the
few W&B charts that carry the paper's findings (``bytecanary.display``)."""

from __future__ import annotations

from bytecanary import keys
from bytecanary.display import Display

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
        return task in keys.TASK_GROUPS or protocol == keys.CLOZE or keys.task_group(task) == task != "all"
    return k.metric == "chance_gap" and task == "nonsenseqa"


DISPLAY = Display(fields=("task", "protocol"), headline=headline)
