"""What ``bytecanary probe`` is asked beyond which checkpoints: its flags as one typed object
(jsonargparse builds them from it), which the runner reads as given and checks once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from jsonargparse.typing import register_type

from bytecanary.errors import BytecanaryError
from bytecanary.tracking import DEFAULT_PROJECT

DEFAULT_LEASE = 120.0  # seconds a claim on a pair holds without renewal
MAX_LEASE = 86_400.0  # a day: beyond any one pair's computation; threading's waits overflow far above
DEFAULT_IDLE_LIMIT = 600.0  # seconds a watched training may show no sign of life
MAX_SECONDS = 86_400.0  # a day: the longest --series.interval or --series.idle_limit


class ProbeSpec:
    """One entry of a ``probes:`` list (``NAME``, or ``{name: NAME, trial: true}``): the
    type of ``--probes`` in ``train`` and ``probe``. ``source`` is the config file it was read
    from (None: the command line), which a bad entry's error names."""

    def __init__(self, spec: str | Mapping[str, Any], source: str | None = None) -> None:
        if isinstance(spec, str):
            spec = {"name": spec}
        if not isinstance(spec, Mapping) or not isinstance(spec.get("name"), str):
            raise ValueError(f"expected a probe name or a {{name: ..., <parameters>}} mapping, got {spec!r}")
        self.spec = dict(spec)
        self.source = source

    @property
    def name(self) -> str:
        return self.spec["name"]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ProbeSpec) and other.spec == self.spec

    def __repr__(self) -> str:
        return f"ProbeSpec({self.spec!r})"


def _config_file() -> str | None:
    """The config file jsonargparse is reading (None: a command-line value), which a bad spec's
    error names: jsonargparse's own errors name no file, its private stack of files does."""
    from jsonargparse import _util

    stack = getattr(_util, "config_load_stack", None)  # absent in another release: no file named
    loading = stack.get() if stack is not None else ()
    return loading[-1][1] if loading else None


def _read_spec(value: Any) -> ProbeSpec:
    """The shape alone; its parameters are checked once, when the probe is built
    (``bytecanary.probes.specs.build_probes``), before any model loads or any step runs."""
    source = _config_file()
    try:
        return ProbeSpec(value, source)
    except ValueError as err:
        raise ValueError(f"{source}: probes: {err}" if source else str(err)) from None


register_type(ProbeSpec, serializer=lambda s: s.spec, deserializer=_read_spec)


@dataclass
class ProbeSeries:
    """How a watched run is followed.

    Attributes:
        interval: seconds between looks with --watch
        idle_limit: with --watch: seconds its training may show no sign of life (no heartbeat;
            for a run without heartbeat.json, no changed file) before the watch ends with an error;
            also how long a --watch folder may take to appear
    """

    interval: float = 30.0
    idle_limit: float = DEFAULT_IDLE_LIMIT


@dataclass
class ProbeWorker:
    """Several workers on one --out (torchrun, srun, array jobs, a second launch).

    Attributes:
        name: this worker's name (unset: its launcher's rank, else host:pid); a worker
            restarted under its name takes back its own pairs at once
        lease: seconds a claim on a pair holds without renewal: how soon another worker takes
            over the pair of a killed one (unset: 120 seconds; at
            most a day)
    """

    name: str | None = None
    lease: float | None = None


@dataclass
class ProbeOptions:
    """Which probes run on which checkpoints, and where their results go.

    Attributes:
        probes: a list of probe names or {name, parameters} entries, e.g. '[NAME, NAME]' or
            '[{name: NAME, trial: true}]'; with --config, the names pick its entries (unset:
            every probe of --config, else those that run by default, docs/utf8-probes.md)
        config: a training config (the run's config.yaml, configs/tiny.yaml): its probes: list,
            read as bytecanary train reads it
        trial: trial sets (M per language) instead of full
        eval_sets: an eval-set file per probe name, for the probes that read eval sets, e.g.
            --eval_sets.NAME=FILE (unset: the sets of the checkpoint's data)
        out: records file
        watch: probe each checkpoint of this run folder (or its checkpoints/) as it lands, until the
            run finishes (then exit 0), its training stops without finishing (one error line,
            exit 2) or Ctrl-C
        revision: with a model id: revisions to probe, e.g. '[step1000, step2000]'
        device: cpu, cuda, cuda:1, mps: one this machine has (unset: cuda when available)
        dtype: what the model computes in (auto: bfloat16 on CUDA, else float32); each its own records
        threads: torch CPU threads (unset: torch's default, which OMP_NUM_THREADS sets); give
            each of several jobs sharing a machine its share of the cores
        wandb: log to W&B (offline without credentials: WANDB_API_KEY or wandb login); false: the
            records file only
        wandb_project: W&B project (a training run's folder: that run's)
        wandb_group: W&B group, e.g. one per experiment comparing series (a training run's
            folder: that run's group)
        tokens_per_step: tokens per training step of a series whose checkpoints know only their
            step (hub revisions, HF folders): their tokens_seen is step x this, in the records and
            W&B (Pythia's is 2,097,152 = 1024 x 2048); unset: W&B charts them against the step
        series: how a watched run is followed
        workers: several workers on one --out
    """

    probes: list[ProbeSpec] | None = None
    config: str | None = None
    trial: bool = False
    eval_sets: dict[str, str] = field(default_factory=dict)
    out: str = "probes.jsonl"
    watch: str | None = None
    revision: list[str] | None = None
    device: str | None = None
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    threads: int | None = None
    wandb: bool = True
    wandb_project: str = DEFAULT_PROJECT
    wandb_group: str | None = None
    tokens_per_step: int | None = None
    series: ProbeSeries = field(default_factory=ProbeSeries)
    workers: ProbeWorker = field(default_factory=ProbeWorker)

    @property
    def lease(self) -> float:
        return DEFAULT_LEASE if self.workers.lease is None else self.workers.lease

    @property
    def project(self) -> str | None:
        """The W&B project of the launch's run; None: no W&B run."""
        return self.wandb_project if self.wandb else None

    def check(self) -> None:
        """Flags that cannot work are one error line, before any work."""
        for flag in ("probes", "revision"):
            if getattr(self, flag) == []:  # not the same as unset: refused, not taken for the defaults
                raise BytecanaryError(f"probe: --{flag} is an empty list: name at least one, or leave it out")
        bounds = [
            ("--series.interval", self.series.interval, MAX_SECONDS),
            ("--series.idle_limit", self.series.idle_limit, MAX_SECONDS),
            ("--workers.lease", self.lease, MAX_LEASE),
        ]
        for flag, value, most in bounds:
            if not 0 < value <= most:
                raise BytecanaryError(
                    f"probe: {flag} must be more than 0 and at most {most:g} seconds, got {value!r}"
                )
        if self.tokens_per_step is not None and self.tokens_per_step <= 0:
            raise BytecanaryError(f"probe: --tokens_per_step must be more than 0, got {self.tokens_per_step}")
