"""Probes as a plug-in set: ``@register_probe("name")`` on a ``Probe`` subclass. Training's callback
and ``bytecanary probe`` call the same classes the same way (prepare -> compute -> aggregate),
so DDP results equal a single process, and ``version``/``fingerprint`` decide what reruns.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import hashlib
import json
from pathlib import Path
from typing import Any, ClassVar

from bytecanary.display import Display, declare, discover
from bytecanary.errors import BytecanaryError
from bytecanary.io import warn
from bytecanary.probes.cadence import Cadence
from bytecanary.records import Context

PROBES: dict[str, type[Probe]] = {}
NO_CONTEXT = Context(None, None, None)  # a measurement outside any run


class Probe:
    """Base class. Subclasses get ``name`` from the decorator, set ``version`` (bump it when
    outputs change for the same parameters) and list the files they read in ``eval_files``.
    A probe's parameters are one flat dataclass, its ``Config``: a spec's keys are its fields."""

    name: ClassVar[str] = ""
    version: ClassVar[int] = 1
    Config: ClassVar[type | None] = None
    """The probe's parameters as a flat dataclass (validated in its ``__post_init__``); the
    probe is built from one instance or from its fields by name, and reads ``self.config``.
    None: a probe without parameters."""
    # not hashed into the fingerprint: where per-sample lines go changes no metric. (batch_size
    # is hashed: batches set the per-batch sampling seeds and the float rounding.)
    unhashed: ClassVar[tuple[str, ...]] = ("records",)
    config: Any
    """The ``Config`` instance of a probe that has one."""
    params: dict[str, Any]
    """The probe's parameters, defaults filled in: the ``Config``'s fields."""
    by_default: ClassVar[bool] = False
    """Run when ``bytecanary probe`` names no probes and no config."""
    display: ClassVar[Display | None] = None
    """How its keys are shown (their fields, the W&B headline, its summary table); None: the
    generic display (``bytecanary.display``)."""
    cadence: Cadence = Cadence()
    """Which checkpoints of a training run it fires at (the spec's ``cadence``); changes
    no metric, so it is not in the fingerprint."""

    def __init__(self, config: Any = None, **fields: Any) -> None:
        """``config`` (an instance of the probe's ``Config``) or its fields by name; a probe
        without a ``Config`` takes no parameters."""
        if self.Config is None:
            if config is not None or fields:
                raise TypeError(f"{type(self).__name__} takes no parameters")
            self.params = {}
            return
        if config is None:
            config = self.Config(**fields)  # an unknown field raises TypeError
        elif fields or not isinstance(config, self.Config):
            raise TypeError(f"{type(self).__name__} takes a {self.Config.__name__} or its fields by name")
        self.config = config
        self.params = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}

    def validate(self, data_dir: Path | None) -> None:
        """Read the probe's inputs and raise a one-line error on a bad one, before any model
        is loaded (probes with inputs override this)."""

    def measures(self) -> dict[str, Any]:
        """What the probe measures (which keys), as opposed to how (sizes, seeds, decoding): records with
        equal measures are one curve, the newest kept; others add their keys (``records.merge``).
        Override where a parameter changes the keys.
        """
        return {}

    def measure(self) -> str:
        """A short hash of ``measures``: every record carries it."""
        blob = json.dumps(self.measures(), sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def eval_files(self, data_dir: Path | None) -> list[Path]:
        """The files whose contents the metrics depend on (eval sets, task files)."""
        return []

    def fingerprint(self, data_dir: Path | None, dtype: str = "float32") -> str:
        """Short hash of the parameters, of the eval files' contents and of the ``dtype`` the
        model computes in: two records with the same version and fingerprint came from the same
        setup. (float32 is left out of the hash, so the default adds nothing to it.)"""
        params = {k: v for k, v in self.params.items() if k not in self.unhashed}
        files = [hashlib.sha256(Path(f).read_bytes()).hexdigest() for f in self.eval_files(data_dir)]
        setup = {"params": params, "files": files} | ({"dtype": dtype} if dtype != "float32" else {})
        blob = json.dumps(setup, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    @property
    def batch_size(self) -> int | None:
        """Samples per forward pass (None: a probe without batches)."""
        return self.params.get("batch_size")

    def resized(self, batch_size: int) -> Probe:
        """This probe at another batch size, everything else alike (``prepare``'s samples
        included): what runs when the configured batches do not fit in memory."""
        clone = copy.copy(self)
        clone.config = dataclasses.replace(self.config, batch_size=batch_size)
        clone.params = {**self.params, "batch_size": batch_size}
        return clone

    def prepare(self, tokenizer: Any, data_dir: Path | None) -> Any:
        """Build the samples (deterministic: every rank builds the same)."""
        raise NotImplementedError

    def compute(self, model: Any, tokenizer: Any, prepared: Any, rank: int = 0, world: int = 1) -> Any:
        """This rank's share of the work, returned as a picklable payload."""
        raise NotImplementedError

    def aggregate(self, prepared: Any, payloads: list[Any], context: Context) -> dict[str, float]:
        """Metrics from every rank's payload; ``context`` (checkpoint, step, tokens_seen) starts
        every per-sample line the probe writes."""
        raise NotImplementedError

    def run(
        self, model: Any, tokenizer: Any, data_dir: Path | None = None, context: Context = NO_CONTEXT
    ) -> dict[str, float]:
        """Single process: prepare, compute everything, aggregate."""
        prepared = self.prepare(tokenizer, data_dir)
        return self.aggregate(prepared, [self.compute(model, tokenizer, prepared)], context)


def load_probes() -> None:
    """Register every probe, bytecanary's and other packages', so their displays are declared
    before records are shown (``bytecanary report``, the summary)."""
    for failure in discover():
        warn(f"probe plugin not loaded: {failure}")


def register_probe(name: str):
    """Class decorator adding a probe to the registry under ``name``."""

    def wrap(cls: type[Probe]) -> type[Probe]:
        if not issubclass(cls, Probe):
            raise TypeError(f"{cls.__name__} must subclass bytecanary.probes.registry.Probe")
        if name in PROBES:
            raise ValueError(f"probe {name!r} is already registered by {PROBES[name].__name__}")
        if cls.display is not None:  # first: a display that conflicts registers nothing
            declare(name, cls.display)
        cls.name = name
        PROBES[name] = cls
        return cls

    return wrap


def probe_class(name: str) -> type[Probe]:
    """The probe registered as ``name``: bytecanary's own, or one another installed package
    registers (its module named under the entry-point group ``bytecanary.probes``, loaded the
    first time a name is not found); unknown names suggest the nearest one."""
    failed = discover() if name not in PROBES else ()
    if name not in PROBES:
        near = difflib.get_close_matches(name, PROBES, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        broken = f"; probe plugins that failed to load: {'; '.join(failed)}" if failed else ""
        raise BytecanaryError(f"unknown probe {name!r}{hint}; known: {', '.join(sorted(PROBES))}{broken}")
    return PROBES[name]
