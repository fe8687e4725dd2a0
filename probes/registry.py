"""Probes as a plug-in set: ``@register_probe("name")`` on a ``Probe`` subclass.

A probe turns a model and its tokenizer into a flat dict of metrics, keyed as
``bytecanary.keys`` declares. The callback and ``bytecanary probe`` call the same classes
the same way; under DDP the work is split as ``prepare`` (same on every rank) ->
``compute`` (this rank's share) -> ``aggregate`` (rank 0, over every rank's payload), so
results equal a single-process run. A probe's ``version`` and ``fingerprint`` say which
setup produced a record, so a changed probe is rerun and an unchanged one is not.
"""

from __future__ import annotations

import difflib
import hashlib
import inspect
import json
from pathlib import Path
from typing import Any, ClassVar

from bytecanary.probes.cadence import Cadence

from bytecanary.errors import BytecanaryError

PROBES: dict[str, type[Probe]] = {}


class Probe:
    """Base class. Subclasses get ``name`` from the decorator, set ``version`` (bump it when
    outputs change for the same parameters) and list the files they read in ``eval_files``."""

    name: ClassVar[str] = ""
    version: ClassVar[int] = 1
    # not hashed into the fingerprint: where per-sample lines go changes no metric. (batch_size
    # is hashed: batches set the per-batch sampling seeds and the float rounding.)
    unhashed: ClassVar[tuple[str, ...]] = ("records",)
    params: dict[str, Any]
    """The constructor's arguments, defaults filled in (set before ``__init__`` runs)."""
    cadence: Cadence = Cadence()
    """Which checkpoints of a training run it fires at (the spec's ``cadence``); changes
    no metric, so it is not in the fingerprint."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Probe:
        """Keep the constructor's arguments, so no subclass has to store them for the fingerprint."""
        self = super().__new__(cls)
        signature = inspect.signature(cls.__init__)
        bound = signature.bind_partial(self, *args, **kwargs)  # an unknown argument raises TypeError
        bound.apply_defaults()
        self.params = dict(list(bound.arguments.items())[1:])  # without self
        return self

    def __init__(self) -> None:
        """A probe without parameters."""

    def validate(self, data_dir: Path | None) -> None:
        """Read the probe's inputs and raise a one-line error on a bad one, before any model
        is loaded (probes with inputs override this)."""

    def eval_files(self, data_dir: Path | None) -> list[Path]:
        """The files whose contents the metrics depend on (eval sets, task files)."""
        return []

    def fingerprint(self, data_dir: Path | None) -> str:
        """Short hash of the parameters and of the eval files' contents: two records with the
        same version and fingerprint came from the same setup."""
        params = {k: v for k, v in self.params.items() if k not in self.unhashed}
        files = [hashlib.sha256(Path(f).read_bytes()).hexdigest() for f in self.eval_files(data_dir)]
        blob = json.dumps({"params": params, "files": files}, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

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
            raise TypeError(f"{cls.__name__} must subclass bytecanary.probes.registry.Probe")
        if name in PROBES:
            raise ValueError(f"probe {name!r} is already registered by {PROBES[name].__name__}")
        cls.name = name
        PROBES[name] = cls
        return cls

    return wrap


def probe_class(name: str) -> type[Probe]:
    """The probe registered as ``name``; unknown names suggest the nearest one."""
    import bytecanary.probes  # noqa: F401  (importing the package registers every probe)

    if name not in PROBES:
        near = difflib.get_close_matches(name, PROBES, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise BytecanaryError(f"unknown probe {name!r}{hint}; known: {', '.join(sorted(PROBES))}")
    return PROBES[name]
