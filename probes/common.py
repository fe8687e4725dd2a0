"""What every probe shares: DDP sharding and merging, model and tokenizer lookups, eval-set
files, and building probes from ``{name: ..., <parameters>, cadence: ...}`` specs
(``cadence``, when the training callback fires the probe, is ``bytecanary.probes.cadence``'s).

Specs are checked against the probe's constructor signature (jsonargparse) before any
probe is built, so a misspelt or mistyped parameter in a YAML is one line naming the
file, the probe and the parameter, before a training step runs.
"""

from __future__ import annotations

import difflib
import inspect
import re
from collections.abc import Mapping, Sequence, Sized
from dataclasses import asdict
from pathlib import Path
from typing import Any

import jsonargparse
import numpy as np
from bytecanary.probes.cadence import parse_cadence
from bytecanary.probes.registry import Probe, probe_class

from bytecanary.errors import BytecanaryError

DEFAULT_DATA_DIR = Path("data/default")  # what `bytecanary prepare` writes for the default config


def shard_indices(n: int, batch_size: int, rank: int, world: int) -> np.ndarray:
    """Indices of the samples in this rank's batches: whole batches dealt round-robin,
    so every batch is the same in a DDP run as in a single process."""
    starts = range(rank * batch_size, n, world * batch_size)
    return np.array([i for s in starts for i in range(s, min(s + batch_size, n))], dtype=np.int64)


def merge_shards(payloads: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Every rank's per-sample arrays (rows keyed by ``index``), back in sample order."""
    merged = {k: np.concatenate([p[k] for p in payloads]) for k in payloads[0]}
    order = np.argsort(merged["index"], kind="stable")
    return {k: v[order] for k, v in merged.items()}


def context_size(model: Any) -> int:
    """The model's context in tokens (0: unknown, no limit applied)."""
    config = model.config
    return getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None) or 0


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


def _type_error(err: Exception, cls: type[Probe], params: Mapping[str, Any]) -> str:
    """jsonargparse's multi-line complaint as one line: the parameter, its type, the value."""
    found = re.search(r'Parser key "([^".]+)', str(err))
    key = found.group(1) if found else None
    if key not in params:
        return str(err).strip().splitlines()[0]
    annotation = inspect.signature(cls.__init__).parameters[key].annotation
    expected = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", annotation)
    return f"parameter {key!r}: expected {expected}, got {params[key]!r}"


def _validate(spec: Mapping[str, Any], where: str) -> dict[str, Any]:
    if not isinstance(spec, Mapping) or not isinstance(spec.get("name"), str):
        raise BytecanaryError(f"{where}: expected a {{name: ..., <parameters>}} mapping, got {spec!r}")
    name = spec["name"]
    try:
        cls = probe_class(name)
    except BytecanaryError as err:
        raise BytecanaryError(f"{where}: {err}") from None
    try:
        cadence = parse_cadence(spec.get("cadence"))
    except ValueError as err:
        raise BytecanaryError(f"{where}: {name}: {err}") from None
    params = {k: v for k, v in spec.items() if k not in ("name", "cadence")}
    accepted = list(inspect.signature(cls.__init__).parameters)[1:]
    for key in params:
        if key not in accepted:
            near = difflib.get_close_matches(key, accepted, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise BytecanaryError(f"{where}: {name}: unknown parameter {key!r}{hint}")
    parser = jsonargparse.ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(cls)
    try:
        parsed = parser.parse_object(params)
    except jsonargparse.ArgumentError as err:
        raise BytecanaryError(f"{where}: {name}: {_type_error(err, cls, params)}") from None
    extra = {"cadence": asdict(cadence)} if "cadence" in spec else {}
    return {"name": name, **parsed.as_dict(), **extra}


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
        cadence = parse_cadence(params.pop("cadence", None))
        try:
            probe = probe_class(name)(**params)
        except (TypeError, ValueError) as err:  # the constructor's own checks (protocols, prefix)
            raise BytecanaryError(f"{_where(source)}: {name}: {err}") from None
        probe.cadence = cadence
        built.append(probe)
    return built


def get_probe(name: str, **params: Any) -> Probe:
    """One probe by name, validated like a YAML spec."""
    return build_probes([{"name": name, **params}])[0]


def prepare_probe(
    probe: Probe, tokenizer: Any, data_dir: Path | None, source: str | Path | None = None
) -> tuple[Any, str]:
    """(prepared samples, fingerprint) of ``probe``; a missing, unreadable or empty eval set
    is one ``BytecanaryError`` naming ``source`` (a YAML path, when given) and the probe."""
    where = _where(source)
    try:
        prepared = probe.prepare(tokenizer, data_dir)
        params = probe.fingerprint(data_dir)
    except BytecanaryError as err:
        raise BytecanaryError(f"{where}: {probe.name}: {err}") from None
    except OSError as err:
        raise BytecanaryError(f"{where}: {probe.name}: {err.filename}: {err.strerror}") from None
    samples = getattr(prepared, "samples", prepared)  # the UTF-8 probes' Prepared, or a list
    if isinstance(samples, Sized) and len(samples) == 0:
        raise BytecanaryError(f"{where}: {probe.name}: the eval set has no samples (data {data_dir})")
    return prepared, params
