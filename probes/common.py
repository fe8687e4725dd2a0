"""What every probe shares: DDP sharding and merging, model and tokenizer lookups, eval-set
files, the parameter groups probe configs are built from, and building probes from
``{name: ..., <parameters>, cadence: ...}`` specs (``cadence``, when the training callback
fires the probe, is ``bytecanary.probes.cadence``'s).

A spec's parameters and its cadence are dataclasses (the probe's ``Config``, ``Cadence``),
read by ``typed`` through jsonargparse, the reader LightningCLI uses for the rest of a
training config, before any probe is built: a misspelt or mistyped parameter in a YAML is one
line naming the file, the probe and the parameter, before a training step runs. A spec stays
flat: a ``Config`` inherits its fields from the groups below.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import jsonargparse

from bytecanary.errors import BytecanaryError
from bytecanary.io import output_problem
from bytecanary.probes.cadence import Cadence
from bytecanary.probes.registry import Probe, probe_class

DEFAULT_DATA_DIR = Path("data/default")  # what `bytecanary prepare` writes for the default config


def at_least(name: str, value: int, low: int) -> None:
    """A config check: ``ValueError`` naming the field when ``value`` < ``low``."""
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value!r}")


def within(name: str, value: float, low: float, high: float, low_open: bool = False) -> None:
    """A config check: ``ValueError`` naming the field unless ``value`` is a finite number in
    [low, high] ((low, high] with ``low_open``)."""
    ok = math.isfinite(value) and (low < value if low_open else low <= value) and value <= high
    if not ok:
        bracket = "(" if low_open else "["
        raise ValueError(f"{name} must be a number in {bracket}{low:g}, {high:g}], got {value!r}")


@dataclass(frozen=True)
class Checked:
    """Base of the parameter groups: each checks its own fields in ``__post_init__`` and then
    calls the next one's, so a config built from several groups checks every field."""

    def __post_init__(self) -> None:
        """Nothing left to check."""


@dataclass(frozen=True)
class Sizes(Checked):
    """How much of its eval set a probe reads, in which batches, drawn with which seed."""

    trial: bool = False
    """A quick look: a fixed, seeded subset of each eval set; False: all of it (the measurement)."""
    batch_size: int = 256
    """Samples per forward pass; metrics depend on it (sampling draws, float rounding)."""
    seed: int = 0
    """The seed of every random draw: the trial subset, sampled tokens, bootstrap resamples."""

    def __post_init__(self) -> None:
        at_least("batch_size", self.batch_size, 1)
        super().__post_init__()


@dataclass(frozen=True)
class GenerationSettings(Checked):
    """How a probe generates after each prompt."""

    max_new_tokens: int = 5
    """Tokens generated after each prompt (at most)."""
    temperature: float = 0.0
    """Sampling temperature; 0 is greedy."""
    top_k: int = 0
    """Sample among the k likeliest tokens only; 0: all of them."""

    def __post_init__(self) -> None:
        at_least("max_new_tokens", self.max_new_tokens, 1)
        within("temperature", self.temperature, 0, math.inf)
        at_least("top_k", self.top_k, 0)
        super().__post_init__()


@dataclass(frozen=True)
class PerSample(Checked):
    """Where a probe writes one line per sample (not in the fingerprint: it changes no metric)."""

    records: str | None = None
    """Append one JSON line per sample to this file."""

    def __post_init__(self) -> None:
        problem = output_problem(self.records) if self.records is not None else None
        if problem:
            raise ValueError(f"records: {problem}")
        super().__post_init__()


def context_size(model: Any) -> int:
    """The model's context in tokens (0: unknown, no limit applied)."""
    config = model.config
    return getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None) or 0


def sliding_window(model: Any) -> int | None:
    """The model's attention window where it has one in use (Mistral, Qwen2 with
    ``use_sliding_window``, Gemma-2/3's local layers), else None."""
    cfg = model.config.get_text_config()
    window = getattr(cfg, "sliding_window", None)
    return int(window) if window and getattr(cfg, "use_sliding_window", True) else None


def output_size(model: Any) -> int:
    """The ids the model's head scores: the tokenizer's, or more where the embedding is padded."""
    return int(model.get_output_embeddings().weight.shape[0])


def pad_id(tokenizer: Any) -> int:
    """The padding id: the tokenizer's own, else eos (masked out either way), else 0."""
    for token_id in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if token_id is not None:
            return int(token_id)
    return 0


def evalsets_dir(data_dir: Path | None) -> Path:
    """Where `bytecanary prepare` put the eval sets of ``data_dir``."""
    return Path(data_dir or DEFAULT_DATA_DIR) / "evalsets"


def eval_set_files(eval_sets: list[str] | None, data_dir: Path | None, pattern: str) -> list[Path]:
    """The files given, else the data folder's eval sets matching ``pattern``."""
    if eval_sets:
        missing = [p for p in eval_sets if not Path(p).is_file()]
        if missing:
            raise BytecanaryError(f"eval_sets: {missing[0]}: no such file")
        return [Path(p) for p in eval_sets]
    folder = evalsets_dir(data_dir)
    files = sorted(folder.glob(pattern))
    if not files:
        raise BytecanaryError(
            f"{folder}: no eval sets ({pattern}); run `bytecanary prepare` or pass the eval-set files"
        )
    return files


def _where(source: str | Path | None) -> str:
    return f"{source}: probes" if source else "probes"


def _type_error(err: Exception, cls: type, value: Mapping[str, Any]) -> str:
    """jsonargparse's multi-line complaint as one line: the parameter, its type, the value."""
    found = re.search(r'Parser key "([^".]+)', str(err))
    key = found.group(1) if found else None
    if key not in value:
        return str(err).strip().splitlines()[0]
    annotation = {f.name: f.type for f in dataclasses.fields(cls)}[key]
    expected = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", annotation)
    return f"parameter {key!r}: expected {expected}, got {value[key]!r}"


def typed(cls: type, value: Any, where: str) -> Any:
    """``value`` (a mapping read from YAML) as the dataclass ``cls``; an unknown key, a wrong
    type or a value the class's own checks refuse is one ``BytecanaryError`` ``where: problem``."""
    if not isinstance(value, Mapping):
        raise BytecanaryError(f"{where}: expected a mapping of {cls.__name__} fields, got {value!r}")
    accepted = [f.name for f in dataclasses.fields(cls)]
    for key in value:
        if key not in accepted:
            near = difflib.get_close_matches(str(key), accepted, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise BytecanaryError(f"{where}: unknown parameter {key!r}{hint}")
    parser = jsonargparse.ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(cls)
    try:
        fields = parser.parse_object(dict(value)).as_dict()
    except jsonargparse.ArgumentError as err:
        raise BytecanaryError(f"{where}: {_type_error(err, cls, value)}") from None
    try:
        return cls(**fields)
    except (TypeError, ValueError) as err:  # the class's own checks (protocols, prefix, ranges)
        raise BytecanaryError(f"{where}: {err}") from None


def _validate(spec: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``spec`` checked, with every default filled in."""
    if not isinstance(spec, Mapping) or not isinstance(spec.get("name"), str):
        raise BytecanaryError(f"{where}: expected a {{name: ..., <parameters>}} mapping, got {spec!r}")
    name = spec["name"]
    try:
        cls = probe_class(name)
    except BytecanaryError as err:
        raise BytecanaryError(f"{where}: {err}") from None
    params = {k: v for k, v in spec.items() if k not in ("name", "cadence")}
    if cls.Config is None and params:
        raise BytecanaryError(f"{where}: {name}: takes no parameters, got {sorted(params)}")
    config = typed(cls.Config, params, f"{where}: {name}") if cls.Config is not None else None
    out = {"name": name, **(asdict(config) if config is not None else {})}
    if "cadence" in spec:
        out["cadence"] = asdict(typed(Cadence, spec["cadence"], f"{where}: {name}: cadence"))
    return out


def validate_specs(
    specs: Sequence[Mapping[str, Any]], source: str | Path | None = None
) -> list[dict[str, Any]]:
    """Each ``{name: ..., **params}`` checked against its probe's constructor and returned with
    every default filled in; a bad one raises ``BytecanaryError`` naming ``source`` (a YAML
    path, when given), the probe and the parameter."""
    return [_validate(spec, _where(source)) for spec in specs]


def build_probes(specs: Sequence[Mapping[str, Any] | Probe], source: str | Path | None = None) -> list[Probe]:
    """Probe instances from specs (validated as ``validate_specs``); instances are kept."""
    built = []
    for spec in specs:
        if isinstance(spec, Probe):
            built.append(spec)
            continue
        params = _validate(spec, _where(source))
        name = params.pop("name")
        cadence = Cadence(**params.pop("cadence", {}))
        probe = probe_class(name)(**params)
        probe.cadence = cadence
        built.append(probe)
    return built


def get_probe(name: str, **params: Any) -> Probe:
    """One probe by name, validated like a YAML spec."""
    return build_probes([{"name": name, **params}])[0]
