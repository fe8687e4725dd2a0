"""Probes as a plug-in set: ``@register_probe("name")`` on a ``Probe`` subclass.

A probe turns a model and its tokenizer into a flat dict of metrics. The callback and
``bytecanary probe`` call the same classes the same way; under DDP the work is split as
``prepare`` (same on every rank) -> ``compute`` (this rank's share) -> ``aggregate``
(rank 0, over every rank's payload), so results equal a single-process run.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, ClassVar

from bytecanary.errors import BytecanaryError

PROBES: dict[str, type[Probe]] = {}


class Probe:
    """Base class. Subclasses set ``name`` (via the decorator), ``version`` (bumped when
    outputs change) and ``higher_is_better`` for their metric names."""

    name: ClassVar[str] = ""
    version: ClassVar[int] = 1
    higher_is_better: ClassVar[dict[str, bool]] = {}

    def prepare(self, tokenizer: Any, data_dir: Path | None) -> Any:
        """Build the samples (deterministic: every rank builds the same)."""
        raise NotImplementedError

    def compute(self, model: Any, tokenizer: Any, prepared: Any, rank: int = 0, world: int = 1) -> Any:
        """This rank's share of the work, returned as a picklable payload."""
        raise NotImplementedError

    def aggregate(self, prepared: Any, payloads: list[Any]) -> dict[str, float]:
        """Metrics from every rank's payload."""
        raise NotImplementedError

    def run(self, model: Any, tokenizer: Any, data_dir: Path | None = None) -> dict[str, float]:
        """Single process: prepare, compute everything, aggregate."""
        prepared = self.prepare(tokenizer, data_dir)
        return self.aggregate(prepared, [self.compute(model, tokenizer, prepared)])


def register_probe(name: str):
    """Class decorator adding a probe to the registry under ``name``."""

    def wrap(cls: type[Probe]) -> type[Probe]:
        if not issubclass(cls, Probe):
            raise TypeError(f"{cls.__name__} must subclass probes.registry.Probe")
        if name in PROBES:
            raise ValueError(f"probe {name!r} is already registered by {PROBES[name].__name__}")
        cls.name = name
        PROBES[name] = cls
        return cls

    return wrap


def get_probe(name: str, **params: Any) -> Probe:
    """An instance of the probe ``name``; unknown names suggest the nearest one."""
    import probes  # noqa: F401  (importing the package registers every probe)

    if name not in PROBES:
        near = difflib.get_close_matches(name, PROBES, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise BytecanaryError(f"unknown probe {name!r}{hint}; known: {', '.join(sorted(PROBES))}")
    try:
        return PROBES[name](**params)
    except (TypeError, ValueError) as err:  # an unknown or invalid argument: the user's config
        raise BytecanaryError(f"probe {name!r}: {err}") from None
