"""How a probe's keys are shown (fields, W&B charts, summary table), as the probe declares it.

The core never names a probe: a probe class sets ``display``; one that sets none gets the generic display.
"""

from __future__ import annotations

import functools
import importlib.metadata
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from bytecanary import keys


def aggregates(key: keys.ProbeKey) -> bool:
    """The generic headline: a probe's keys over every field."""
    return key.aggregate


@dataclass(frozen=True)
class Table:
    """A probe's table in the summary: ``(column, key)`` headline pairs, then a column per
    language its keys name (``per_language(lang)``, when given)."""

    title: str
    columns: tuple[tuple[str, str], ...]
    per_language: Callable[[str], str] | None = None


@dataclass(frozen=True)
class RatioCurve:
    """A judged curve whose convergence the report states as a ratio to perplexity's."""

    name: str
    """Short, in the report's lines and W&B keys (``report/<name>_ppl_ratio``)."""
    what: str
    """What the curve is, in a sentence."""
    note: str = ""
    """Said beside its ratio, e.g. what a paper reports."""
    label: str = ""
    """Its short column name in a comparison of runs (default ``name``)."""
    panel: str = ""
    """Its panel's title in a comparison of runs (default ``what``)."""


@dataclass(frozen=True)
class Judged:
    """A curve the report judges for convergence beside perplexity, with where its noise comes
    from: ``greedy``, the larger of the binomial SE of the sample count in ``noise_key`` and
    the scatter of the checkpoints around each point; ``se``, the SE in ``noise_key``."""

    key: str
    noise: Literal["greedy", "se"]
    noise_key: str
    ratio: RatioCurve | None = None


@dataclass(frozen=True)
class Perplexity:
    """A perplexity a probe records, judged where a run has no ``val/ppl`` of its own."""

    key: str
    name: str
    """In the report's sentences, e.g. ``held-out perplexity (ppl probe)``."""
    label: str
    """A table column's header."""
    bpb: str | None = None
    """Its bits per byte, comparable between runs whose tokenizers differ."""


@dataclass(frozen=True)
class Display:
    """What a probe declares about its keys."""

    fields: tuple[str, ...] = ("group",)
    """The fields between ``probe/<name>/`` and the metric, e.g. (language, tier, k)."""
    headline: Callable[[keys.ProbeKey], bool] = aggregates
    """Which of its keys W&B charts as scalars (the rest go to its detail table)."""
    table: Table | None = None
    """Its summary table (None: its headline keys, ``keys.generic_headline``)."""
    metrics: tuple[keys.Metric, ...] = ()
    """Its own metric names, with which way is better and how they aggregate."""
    smooth: tuple[str, ...] = ()
    """Its metric names that no argmax enters (``keys.SMOOTH``)."""
    derived: Callable[[dict[str, float]], dict[str, float]] | None = None
    """Keys computed from a record's metrics that are shown (charted, tabled) but not
    recorded, e.g. means over a group of tasks."""
    ppl_table: Table | None = None
    """Its columns in the report's first table, beside perplexity at each checkpoint (the
    title names them)."""
    judged: tuple[Judged, ...] = ()
    """Curves the report judges for convergence beside perplexity."""
    perplexity: Perplexity | None = None
    """A perplexity it records, the report's where a run logs none."""
    sections: tuple[str, ...] = ()
    """Its report sections, as ``module:attribute`` import strings the report room imports
    when it writes a report (``bytecanary.report.sections``)."""
    report_table: bool = True
    """Whether the report adds a table of its columns per checkpoint."""
    own: bool = True
    """Declared by the probe (False: the generic view of a probe that declares none)."""


GENERIC = Display(own=False)
DECLARED: dict[str, Display] = {}
ENTRY_POINTS = "bytecanary.probes"  # the entry-point group naming every installed probe's module


@functools.cache
def discover() -> tuple[str, ...]:
    """Import every probe module the entry points name, once, so that each registers and
    declares its display even where nothing imported the probes (a report read as a
    library); what failed to import, one ``name (module): error`` each."""
    failed = []
    for entry in importlib.metadata.entry_points(group=ENTRY_POINTS):
        try:
            entry.load()
        except Exception as err:  # a broken plugin: named by whoever needs it, not fatal here
            failed.append(f"{entry.name} ({entry.value}): {type(err).__name__}: {err}")
    return tuple(failed)


def declare(name: str, display: Display) -> None:
    """Probe ``name`` shows its keys as ``display`` (called when the probe registers); its
    metrics join ``keys.METRICS``, where a name may mean one thing only."""
    for m in display.metrics:  # all checked before any is added
        if keys.METRICS.get(m.name, m) != m:
            raise ValueError(
                f"probe {name!r}: metric {m.name!r} is already declared as {keys.METRICS[m.name]}"
            )
    keys.METRICS.update({m.name: m for m in display.metrics})
    keys.SMOOTH.update(display.smooth)
    DECLARED[name] = display


def declared() -> dict[str, Display]:
    """Every installed probe's display, by probe name in sorted order."""
    discover()
    return dict(sorted(DECLARED.items()))


def display_of(probe: str) -> Display:
    """What ``probe`` declared, else the generic display."""
    if probe not in DECLARED:
        discover()
    return DECLARED.get(probe, GENERIC)


def shown(probe: str, metrics: dict[str, float]) -> dict[str, float]:
    """A record's metrics with the keys its probe derives for display."""
    derive = display_of(probe).derived
    return {**metrics, **derive(metrics)} if derive is not None else metrics


def language_of(key: str) -> str | None:
    """The language field of a key whose probe declares a field ``language`` (``all`` for the
    aggregate); None for any other key."""
    parsed = keys.read(key)
    if parsed is None:
        return None
    fields = display_of(parsed.probe).fields
    at = fields.index("language") if "language" in fields else None
    return parsed.fields[at] if at is not None and at < len(parsed.fields) else None


def languages_in(names: Iterable[str], probe: str) -> list[str]:
    """The languages (not ``all``) that ``probe``'s keys among ``names`` name, sorted."""
    return sorted({lang for k in names if keys.probe_of(k) == probe and (lang := language_of(k))} - {"all"})


def columns(probe: str, names: Iterable[str]) -> tuple[str, list[tuple[str, str]]]:
    """The title and ``(label, key)`` columns of ``probe``'s table over the keys ``names``:
    its declared table with a column per language, else its headline keys."""
    table = display_of(probe).table
    if table is None:
        return probe, [(keys.generic_label(k), k) for k in keys.generic_headline(probe, names)]
    langs = languages_in(names, probe) if table.per_language is not None else []
    return table.title, [*table.columns, *((lang, table.per_language(lang)) for lang in langs)]


def metric(key: str) -> keys.Metric | None:
    """The metric a key ends with (``.../partial@t3`` -> ``partial@t``: a name declared with a
    trailing ``@t`` or ``_`` stands for every name it begins)."""
    discover()
    name = keys.metric_of(key)
    prefixed = [m for m in keys.METRICS if m.endswith(("@t", "_")) and name.startswith(m)]
    if prefixed:
        return keys.METRICS[prefixed[0]]
    if name not in keys.METRICS and key.startswith("perf/probe_seconds/"):
        return keys.METRICS["probe_seconds"]
    while name not in keys.METRICS:
        base = next((name.removesuffix(s) for s in keys.SUFFIXES if name.endswith(s)), None)
        if base is None:
            return None
        name = base
    return keys.METRICS[name]


def smooth(key: str) -> bool:
    """Whether ``key``'s metric is continuous in the weights (declared ``smooth``): the keys that
    computations of one model in other batch shapes, threads or processes can be held to."""
    discover()
    return keys.metric_of(key) in keys.SMOOTH


def higher_is_better(key: str) -> bool | None:
    """True or False where a direction is declared, None for the rest (or unknown keys)."""
    m = metric(key)
    if m is None or key.endswith(("_lo", "_hi")):
        return None
    return m.higher_is_better
