"""The metric-key schema: every key bytecanary writes, and what each metric means.

Training and the probes build their keys with these functions; the report, its figures,
the summary tables and the W&B view (``bytecanary.tracking``) read them back through the
same functions, so a writer and a reader can never disagree, and a rename happens here
only. The key shapes are the user-facing contract:

    tokens_seen, step                                         the axes of every row
    train/<metric>                                            loss, lr
    val/loss, val/ppl, val/<lang>/ppl                         validation
    probe/level0/<lang>/<tier>[/<k>]/<metric>                 lang, tier may be "all"
    probe/level1/<lang>[/<k>]/<metric>                        lang may be "all"
    probe/ppl/<split>/<lang>/<metric>                         held-out text; lang may be "all"
    probe/mcqa/<task>/<protocol>/<metric>                     one protocol on one task
    probe/mcqa/<task>/<metric>                                across protocols (fsi, mcnemar_p)
    perf/<name>, perf/probe_seconds/<probe>                   throughput

``<k>`` is ``k1``.. (the prompt holds the first k bytes of the character) or ``kfull``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

TOKENS_SEEN = "tokens_seen"
STEP = "step"

# MCQA protocols: scored by likelihood, or by generation (the space-tokenization trap, Matched-and-Dashed,
# Format Sensitivity Index arXiv:2607.09665)
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
# MCQA task groups that pool over languages; any other task (a benchmark) stands alone
TASK_GROUPS = {"wordcomp": "word completion (embedded)", "nonsenseqa": "NonsenseQA"}

Aggregation = Literal["mean", "rate", "exp_mean", "spread", "count", "test", "index", "last"]


@dataclass(frozen=True)
class Metric:
    """One metric name (the last part of a key): which way is better and how it aggregates."""

    name: str
    higher_is_better: bool | None  # None: neither (a count, a p-value, a share)
    aggregation: Aggregation
    """How per-item values become the metric: mean of a score, rate of a yes/no, exp of
    a mean NLL, max - min over views, a count, a test statistic, an index, the last value."""


def _m(name: str, up: bool | None, aggregation: Aggregation) -> Metric:
    return Metric(name, up, aggregation)


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        # training
        _m("loss", False, "mean"),  # cross-entropy per token
        _m("lr", None, "mean"),  # learning rate
        # UTF-8 probes (arXiv:2606.14122 section 3.2)
        _m("partial", True, "mean"),  # V_partial at the last generation step
        _m("strict", True, "rate"),  # share of streams that are complete, valid UTF-8
        _m("soft", True, "mean"),  # share of bytes inside complete valid characters
        _m("cumulative", True, "mean"),  # V_partial averaged over the steps
        _m("ema", True, "mean"),  # exponential moving average of V_partial over the steps
        _m("partial@t", True, "mean"),  # V_partial after t generated tokens (partial@t1..)
        # expected validity from the model's distribution along the greedy path (smooth in the weights)
        _m("p_valid", True, "mean"),  # mass on tokens that keep the stream valid UTF-8, first step
        _m("p_valid_se", None, "mean"),  # standard error of p_valid over the samples
        _m("p_valid@t", True, "mean"),  # mass on tokens that keep the stream valid at step t (p_valid@t1..)
        _m("p_complete", True, "mean"),  # mass on tokens completing the prompt's pending character, step 1
        _m("p_complete@t", True, "mean"),  # mass on tokens completing the pending character at step t
        _m("gold_win_rate", True, "rate"),  # share of samples where the gold remainder beats the output
        _m("delta_ll_mean", True, "mean"),  # mean of LL(gold remainder) - LL(generated)
        _m("delta_ll_median", True, "mean"),  # median of LL(gold remainder) - LL(generated)
        _m("delta_ll_std", None, "mean"),  # standard deviation of Delta_LL
        _m("ppl", False, "exp_mean"),  # perplexity
        _m("bpb", False, "mean"),  # bits per UTF-8 byte of the text: comparable across tokenizers
        _m("tokens", None, "count"),  # tokens scored
        _m("bytes", None, "count"),  # UTF-8 bytes of the text scored
        _m("pure_share", None, "rate"),  # share of outputs made of byte tokens only
        _m("partial_pure", True, "mean"),  # V_partial of pure byte-token outputs
        _m("partial_mixed", True, "mean"),  # V_partial of outputs with a multi-byte token
        _m("term_match", True, "rate"),  # exactly the remainder, then a character boundary
        # the paper's tier gap: a metric of common minus rare characters, with _lo/_hi, the 95%
        # bootstrap CI over characters
        *(_m(f"tier_gap_{m}", None, "mean") for m in ("partial", "strict", "p_valid")),
        _m("n", None, "count"),  # samples or items
        # MCQA, per protocol
        _m("acc", True, "rate"),  # accuracy
        _m("acc_norm", True, "rate"),  # accuracy, log-likelihood per character (lm-eval)
        _m("acc_bytes", True, "rate"),  # accuracy, log-likelihood per UTF-8 byte
        _m("ece", False, "mean"),  # expected calibration error (10 equal-mass bins)
        _m("brier", False, "mean"),  # Brier score of the option softmax
        _m("acc_perm_spread", False, "spread"),  # max - min accuracy over option rotations
        _m("parsable", True, "rate"),  # share of answers in the wrapper's exact format
        _m("acc_normalised", True, "rate"),  # accuracy after lenient extraction
        _m("parsable_normalised", True, "rate"),  # parsable after lenient extraction
        _m("matched", True, "rate"),  # share of M&D answers matched to an option
        _m("acc_matched", True, "rate"),  # M&D accuracy among matched answers
        _m("rule", None, "rate"),  # how often an M&D extraction rule fired (rule_<name>)
        _m("prompt_tokens", None, "mean"),  # prompt length in tokens
        _m("chance_gap", None, "mean"),  # NonsenseQA: accuracy - 1/choices
        _m("chance_distance", False, "mean"),  # NonsenseQA: |accuracy - 1/choices|
        _m("win", None, "rate"),  # 1 if this wrapper had the task's best accuracy
        _m("wins", None, "count"),  # tasks a wrapper won
        # MCQA, per task across protocols
        _m("mcnemar_p", None, "test"),  # McNemar exact p, separate vs merged
        _m("fsi", False, "index"),  # format sensitivity index over the wrappers
        _m("psi", False, "index"),  # parsability sensitivity index
        _m("nfsi", False, "index"),  # FSI normalised by accuracy
        _m("delta_tok_median", None, "mean"),  # median relative prompt-length spread across wrappers
        _m("matched_share", None, "rate"),  # share of items in the token-matched subset
        _m("kendall_tau_sep_merged", None, "test"),  # Kendall tau-b of checkpoint rankings, sep vs merged
        _m("acc_parsable_r", None, "test"),  # Pearson r of accuracy and parsability over wrapper cells
        _m("parsability_beta", None, "test"),  # fixed-effects slope of accuracy on parsability
        _m("parsability_beta_se", None, "test"),  # standard error of that slope
        _m("cells", None, "count"),  # (checkpoint, task, wrapper) cells
        # performance
        _m("tokens_per_s", True, "mean"),  # training tokens per second
        _m("samples_per_s", True, "mean"),  # training samples per second
        _m("mfu", True, "mean"),  # model FLOPs utilisation
        _m("probe_seconds", False, "mean"),  # wall seconds of one probe at one checkpoint
        _m("wall_seconds", None, "last"),  # wall seconds since training started (resumes added)
    )
}
_SUFFIXES = ("_lo", "_hi", "_normalised", "_matched")  # CI bounds and variants keep their base's sense
# metrics that no argmax and no greedy path enters: decided by the weights and the prompts alone,
# so two computations of one model that differ only in rounding (batch shape, threads, CPU
# kernels) agree within a tolerance, where a greedy metric flips at a near tie
SMOOTH = frozenset(
    {"p_valid", "p_valid_se", "p_valid@t1", "p_complete", "p_complete@t1", "brier", "n"}
    | {f"tier_gap_p_valid{bound}" for bound in ("", "_lo", "_hi")}
)


def metric(key: str) -> Metric | None:
    """The metric a key ends with (``probe/level0/all/all/partial@t3`` -> ``partial@t``)."""
    name = metric_of(key)
    for stepped in ("partial@t", "p_valid@t", "p_complete@t"):
        if name.startswith(stepped):
            return METRICS[stepped]
    if name.startswith("rule_"):
        return METRICS["rule"]
    if name not in METRICS and key.startswith("perf/probe_seconds/"):
        return METRICS["probe_seconds"]
    while name not in METRICS:
        base = next((name.removesuffix(s) for s in _SUFFIXES if name.endswith(s)), None)
        if base is None:
            return None
        name = base
    return METRICS[name]


def smooth(key: str) -> bool:
    """Whether ``key``'s metric is continuous in the weights (``SMOOTH``): the keys that
    computations of one model in other batch shapes, threads or processes can be held to."""
    return metric_of(key) in SMOOTH


def higher_is_better(key: str) -> bool | None:
    """True or False where a direction is declared, None for the rest (or unknown keys)."""
    m = metric(key)
    if m is None or key.endswith(("_lo", "_hi")):
        return None
    return m.higher_is_better


# ---- key builders ---------------------------------------------------------------------------


def train(metric: str) -> str:
    """``train/<metric>``: a training step's ``loss``, ``lr``."""
    return f"train/{metric}"


def val(metric: str, lang: str | None = None) -> str:
    """``val/<metric>``, or ``val/<lang>/<metric>`` for one language (``all``: the former)."""
    return f"val/{metric}" if lang in (None, "all") else f"val/{lang}/{metric}"


def val_ppl(lang: str | None = None) -> str:
    return val("ppl", lang)


def probe_root(probe: str) -> str:
    """``probe/<probe>``: what every key of one probe starts with."""
    return f"probe/{probe}"


def level0(lang: str = "all", tier: str = "all", metric: str = "partial", k: str | None = None) -> str:
    """``probe/level0/<lang>/<tier>[/<k>]/<metric>``; "all" is the aggregate."""
    return f"probe/level0/{lang}/{tier}/{k}/{metric}" if k else f"probe/level0/{lang}/{tier}/{metric}"


def tier_gap(lang: str = "all", metric: str = "partial", bound: str = "") -> str:
    """``probe/level0/<lang>/all/tier_gap_<metric>[_lo|_hi]``: common minus rare characters."""
    return level0(lang, "all", f"tier_gap_{metric}{bound}")


def level1(lang: str = "all", metric: str = "term_match", k: str | None = None) -> str:
    """``probe/level1/<lang>[/<k>]/<metric>``; "all" is the aggregate."""
    return f"probe/level1/{lang}/{k}/{metric}" if k else f"probe/level1/{lang}/{metric}"


def heldout(lang: str = "all", metric: str = "ppl", split: str = "val") -> str:
    """``probe/ppl/<split>/<lang>/<metric>``: the ``ppl`` probe on a data folder's held-out text."""
    return f"probe/ppl/{split}/{lang}/{metric}"


def mcqa(task: str, protocol: str, metric: str) -> str:
    """``probe/mcqa/<task>/<protocol>/<metric>``."""
    return f"probe/mcqa/{task}/{protocol}/{metric}"


def mcqa_task(task: str, metric: str) -> str:
    """``probe/mcqa/<task>/<metric>``: across protocols (``task="all"``: across tasks)."""
    return f"probe/mcqa/{task}/{metric}"


def perf(name: str) -> str:
    return f"perf/{name}"


def probe_seconds(probe: str) -> str:
    return f"perf/probe_seconds/{probe}"


# ---- key readers ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ProbeKey:
    """A probe's key read back: ``probe/<probe>/<fields...>/<metric>``."""

    probe: str
    fields: tuple[str, ...]
    metric: str

    @property
    def aggregate(self) -> bool:
        """Over every field (``probe/<probe>/<metric>``, or each field ``all``)."""
        return all(f == "all" for f in self.fields)


def read(key: str) -> ProbeKey | None:
    """``probe/level0/ja/rare/k1/strict`` -> ``ProbeKey("level0", ("ja", "rare", "k1"),
    "strict")``; None for a key that is not a probe's."""
    p = key.split("/")
    return ProbeKey(p[1], tuple(p[2:-1]), p[-1]) if len(p) > 2 and p[0] == "probe" else None


def root_of(key: str) -> str:
    """What a key is about: ``train``, ``val``, ``probe``, ``perf``, or the key itself (the axes)."""
    return key.split("/", 1)[0]


def metric_of(key: str) -> str:
    """The metric name a key ends with."""
    return key.rsplit("/", 1)[-1]


def probe_of(key: str) -> str | None:
    """``level0`` for ``probe/level0/...``; None for other keys."""
    parsed = read(key)
    return parsed.probe if parsed is not None else None


GENERIC_COLUMNS = 8  # a probe without tables of its own: at most this many headline columns


def generic_headline(probe: str, names: object) -> list[str]:
    """The headline of a probe without tables of its own, among its keys ``names``: its
    aggregates (``probe/<probe>/<metric>``, or every field ``all``), else its first keys,
    sorted, at most ``GENERIC_COLUMNS``."""
    own = sorted(k for k in names if probe_of(k) == probe)  # type: ignore[attr-defined]
    overall = [k for k in own if read(k).aggregate]  # type: ignore[union-attr]
    return (overall or own)[:GENERIC_COLUMNS]


def generic_label(key: str) -> str:
    """A generic headline key's column: its fields but ``all`` and the metric, at most 10
    characters (``probe/toy/all/logprob`` -> ``logprob``)."""
    parsed = read(key)
    assert parsed is not None, key
    return "/".join(f for f in (*parsed.fields, parsed.metric) if f != "all")[:10]


def mcqa_task_of(key: str) -> str | None:
    parsed = read(key)
    return parsed.fields[0] if parsed is not None and parsed.probe == "mcqa" and parsed.fields else None


def mcqa_tasks(keys: object) -> list[str]:
    """Every MCQA task the keys name, sorted (``all`` holds the probe's own averages)."""
    return sorted({t for k in keys if (t := mcqa_task_of(k))} - {"all"})


def task_group(task: str) -> str:
    """``wordcomp_<lang>`` and ``nonsenseqa_<lang>`` pool over languages; a benchmark stands alone."""
    head = task.split("_")[0]
    return head if head in TASK_GROUPS else task


def wrapper_cell(key: str) -> tuple[str, str] | None:
    """(task, family) of a ``probe/mcqa/<task>/wrapper_<family>/acc`` key, else None."""
    parsed = read(key)
    if parsed is None or parsed.probe != "mcqa" or len(parsed.fields) != 2 or parsed.metric != "acc":
        return None
    task, protocol = parsed.fields
    return (task, protocol.removeprefix(WRAPPER)) if protocol.startswith(WRAPPER) and task != "all" else None
