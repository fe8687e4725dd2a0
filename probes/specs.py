"""Probes built from ``{name: ..., <parameters>, cadence: ...}`` specs (``cadence``, when the
training callback fires the probe, is ``bytecanary.probes.cadence``'s).

A spec's parameters and its cadence are dataclasses (the probe's ``Config``, ``Cadence``),
read by ``typed`` through jsonargparse, the reader LightningCLI uses for the rest of a
training config, before any probe is built: a misspelt or mistyped parameter in a YAML is one
line naming the file, the probe and the parameter, before a training step runs.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import jsonargparse

from bytecanary.errors import BytecanaryError
from bytecanary.probes.cadence import Cadence
from bytecanary.probes.registry import Probe, probe_class


def _where(source: str | Path | None) -> str:
    return f"{source}: probes" if source else "probes"


def spec_where(source: str | Path | None, name: str) -> str:
    """Where a probe's spec lives, as its errors begin: ``configs/x.yaml: probes: level0``."""
    return f"{_where(source)}: {name}"


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
