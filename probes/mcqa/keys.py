"""The MCQA probe's keys, protocols and metrics: ``probe/mcqa/<task>/<protocol>/<metric>`` for one
protocol on one task, ``probe/mcqa/<task>/<metric>`` across protocols (``all``: across tasks)."""

from __future__ import annotations

from collections.abc import Iterable

from bytecanary import keys
from bytecanary.keys import Metric

MCQA = "mcqa"  # the probe's registered name
# scored by likelihood, or by generation (the space-tokenization trap, Matched-and-Dashed, Format
# Sensitivity Index arXiv:2607.09665)
SEPARATE, MERGED, CLOZE, DASHED = "letter_separate", "letter_merged", "cloze", "dashed"
WRAPPER = "wrapper_"  # + family: one protocol per prompt wrapper
SCORED_PROTOCOLS = (SEPARATE, MERGED, CLOZE)
WRAPPER_FAMILIES = ("plain", "json", "structured", "structured_delim", "deliberate")
GENERATED_PROTOCOLS = (DASHED, *(f"{WRAPPER}{f}" for f in WRAPPER_FAMILIES))
MCQA_PROTOCOLS = SCORED_PROTOCOLS + GENERATED_PROTOCOLS
PROTOCOL_LABELS = {
    SEPARATE: "letter, separate",
    MERGED: "letter, merged",
    CLOZE: "cloze",
    DASHED: "M&D (dashed)",
    **{f"{WRAPPER}{f}": f"wrapper {f}" for f in WRAPPER_FAMILIES},
}
WRAPPER_INDICES = ("fsi", "psi", "nfsi")  # per task, across the wrapper protocols
# task groups that pool over languages; any other task (a benchmark) stands alone
TASK_GROUPS = {"wordcomp": "word completion (embedded)", "nonsenseqa": "NonsenseQA"}


def mcqa(task: str, protocol: str, metric: str) -> str:
    """``probe/mcqa/<task>/<protocol>/<metric>``."""
    return f"{keys.probe_root(MCQA)}/{task}/{protocol}/{metric}"


def mcqa_task(task: str, metric: str) -> str:
    """``probe/mcqa/<task>/<metric>``: across protocols (``task="all"``: across tasks)."""
    return f"{keys.probe_root(MCQA)}/{task}/{metric}"


def task_of(key: str) -> str | None:
    parsed = keys.read(key)
    return parsed.fields[0] if parsed is not None and parsed.probe == MCQA and parsed.fields else None


def tasks(names: Iterable[str]) -> list[str]:
    """Every MCQA task the keys name, sorted (``all`` holds the probe's own averages)."""
    return sorted({t for k in names if (t := task_of(k))} - {"all"})


def task_group(task: str) -> str:
    """``wordcomp_<lang>`` and ``nonsenseqa_<lang>`` pool over languages; a benchmark stands alone."""
    head = task.split("_")[0]
    return head if head in TASK_GROUPS else task


def wrapper_cell(key: str) -> tuple[str, str] | None:
    """(task, family) of a ``probe/mcqa/<task>/wrapper_<family>/acc`` key, else None."""
    parsed = keys.read(key)
    if parsed is None or parsed.probe != MCQA or len(parsed.fields) != 2 or parsed.metric != "acc":
        return None
    task, protocol = parsed.fields
    return (task, protocol.removeprefix(WRAPPER)) if protocol.startswith(WRAPPER) and task != "all" else None


METRICS = (
    # per protocol
    Metric("acc", True, "rate"),  # accuracy
    Metric("acc_norm", True, "rate"),  # accuracy, log-likelihood per character (lm-eval)
    Metric("acc_bytes", True, "rate"),  # accuracy, log-likelihood per UTF-8 byte
    Metric("ece", False, "mean"),  # expected calibration error (10 equal-mass bins)
    Metric("brier", False, "mean"),  # Brier score of the option softmax
    Metric("acc_perm_spread", False, "spread"),  # max - min accuracy over option rotations
    Metric("parsable", True, "rate"),  # share of answers in the wrapper's exact format
    Metric("acc_normalised", True, "rate"),  # accuracy after lenient extraction
    Metric("parsable_normalised", True, "rate"),  # parsable after lenient extraction
    Metric("matched", True, "rate"),  # share of M&D answers matched to an option
    Metric("acc_matched", True, "rate"),  # M&D accuracy among matched answers
    Metric("rule_", None, "rate"),  # how often an M&D extraction rule fired (rule_<name>)
    Metric("prompt_tokens", None, "mean"),  # prompt length in tokens
    Metric("chance_gap", None, "mean"),  # NonsenseQA: accuracy - 1/choices
    Metric("chance_distance", False, "mean"),  # NonsenseQA: |accuracy - 1/choices|
    Metric("win", None, "rate"),  # 1 if this wrapper had the task's best accuracy
    Metric("wins", None, "count"),  # tasks a wrapper won
    # per task across protocols
    Metric("mcnemar_p", None, "test"),  # McNemar exact p, separate vs merged
    Metric("fsi", False, "index"),  # format sensitivity index over the wrappers
    Metric("psi", False, "index"),  # parsability sensitivity index
    Metric("nfsi", False, "index"),  # FSI normalised by accuracy
    Metric("delta_tok_median", None, "mean"),  # median relative prompt-length spread across wrappers
    Metric("matched_share", None, "rate"),  # share of items in the token-matched subset
    # across checkpoints (the report's trends)
    Metric("kendall_tau_sep_merged", None, "test"),  # Kendall tau-b of checkpoint rankings, sep vs merged
    Metric("acc_parsable_r", None, "test"),  # Pearson r of accuracy and parsability over wrapper cells
    Metric("parsability_beta", None, "test"),  # fixed-effects slope of accuracy on parsability
    Metric("parsability_beta_se", None, "test"),  # standard error of that slope
    Metric("cells", None, "count"),  # (checkpoint, task, wrapper) cells
)
SMOOTH = ("brier",)  # no argmax enters it
