"""How a probe's keys are shown, as the probe declares it: the fields its keys carry, which
of them W&B charts, and its table in the printed summary.

The core never names a probe: a probe class sets ``display`` and registering it declares it
here (``bytecanary.probes.registry``). A probe that declares none gets the generic display:
one ``group`` field, its aggregate keys charted and tabled.
"""

from __future__ import annotations

import functools
import importlib.metadata
from collections.abc import Callable, Iterable
from dataclasses import dataclass

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
class Display:
    """What a probe declares about its keys."""

    fields: tuple[str, ...] = ("group",)
    """The fields between ``probe/<name>/`` and the metric, e.g. (language, tier, k)."""
    headline: Callable[[keys.ProbeKey], bool] = aggregates
    """Which of its keys W&B charts as scalars (the rest go to its detail table)."""
    table: Table | None = None
    """Its summary table (None: its headline keys, ``keys.generic_headline``)."""
    metrics: tuple[keys.Metric, ...] = ()
    """Its own metric names, with which way is better and how they aggregate (the core
    declares the UTF-8 and MCQA ones in ``keys.METRICS``)."""
    derived: Callable[[dict[str, float]], dict[str, float]] | None = None
    """Keys computed from a record's metrics that are shown (charted, tabled) but not
    recorded, e.g. means over a group of tasks."""
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
    DECLARED[name] = display


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
