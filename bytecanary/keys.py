"""The grammar of a metric key, ``probe/<name>/<fields...>/<metric>``, and what each metric
means: writers build keys and readers parse them with these functions, so they never disagree.
Each probe declares its own metric names and key builders beside it (``bytecanary.display``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

TOKENS_SEEN = "tokens_seen"
STEP = "step"

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
        _m("ppl", False, "exp_mean"),  # perplexity
        _m("bpb", False, "mean"),  # bits per UTF-8 byte of the text: comparable across tokenizers
        _m("tokens", None, "count"),  # tokens scored
        _m("bytes", None, "count"),  # UTF-8 bytes of the text scored
        _m("n", None, "count"),  # samples or items
        # performance
        _m("tokens_per_s", True, "mean"),  # training tokens per second
        _m("samples_per_s", True, "mean"),  # training samples per second
        _m("mfu", True, "mean"),  # model FLOPs utilisation
        _m("probe_seconds", False, "mean"),  # wall seconds of one probe at one checkpoint
        _m("wall_seconds", None, "last"),  # wall seconds since training started (resumes added)
    )
}
SUFFIXES = ("_lo", "_hi", "_normalised", "_matched")  # CI bounds and variants keep their base's sense
# metrics that no argmax and no greedy path enters: decided by the weights and the prompts alone,
# so two computations of one model that differ only in rounding (batch shape, threads, CPU
# kernels) agree within a tolerance, where a greedy metric flips at a near tie; probes add theirs
SMOOTH = {"n"}


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
    """``probe/toy/ja/k1/logprob`` -> ``ProbeKey("toy", ("ja", "k1"), "logprob")``; None for a
    key that is not a probe's."""
    p = key.split("/")
    return ProbeKey(p[1], tuple(p[2:-1]), p[-1]) if len(p) > 2 and p[0] == "probe" else None


def root_of(key: str) -> str:
    """What a key is about: ``train``, ``val``, ``probe``, ``perf``, or the key itself (the axes)."""
    return key.split("/", 1)[0]


def metric_of(key: str) -> str:
    """The metric name a key ends with."""
    return key.rsplit("/", 1)[-1]


def probe_of(key: str) -> str | None:
    """``toy`` for ``probe/toy/...``; None for other keys."""
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
