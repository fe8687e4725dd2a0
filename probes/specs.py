"""Probes built from ``{name: ..., <parameters>, cadence: ...}`` specs (``cadence``, when the
training callback fires the probe, is ``bytecanary.probes.cadence``'s).

A spec's parameters and its cadence are dataclasses (the probe's ``Config``, ``Cadence``),
read by ``bytecanary.config.typed``, the one config reader, before any probe is built: a
misspelt or mistyped parameter in a YAML is one line naming the file, the probe and the
parameter, before a training step runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from jsonargparse.typing import register_type

from bytecanary.config import typed
from bytecanary.errors import BytecanaryError
from bytecanary.probes.cadence import Cadence
from bytecanary.probes.registry import Probe, probe_class


def _where(source: str | Path | None) -> str:
    return f"{source}: probes" if source else "probes"


def spec_where(source: str | Path | None, name: str) -> str:
    """Where a probe's spec lives, as its errors begin: ``configs/x.yaml: probes: level0``."""
    return f"{_where(source)}: {name}"


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


class ProbeSpec:
    """One entry of a ``probes:`` list, checked against the ``Config`` its ``name`` picks: the
    type of training's ``--probes`` (registered with jsonargparse), so a bad field is an error
    of the parser that reads the rest of the config, in the words ``bytecanary probe`` uses."""

    def __init__(self, spec: Mapping[str, Any]) -> None:
        self.spec = dict(spec)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ProbeSpec) and other.spec == self.spec

    def __repr__(self) -> str:
        return f"ProbeSpec({self.spec!r})"


def _read_spec(value: Any) -> ProbeSpec:
    """A spec checked as ``validate_specs`` checks it; the error is jsonargparse's ValueError."""
    try:
        validate_specs([value])
    except BytecanaryError as err:
        raise ValueError(str(err)) from None
    return ProbeSpec(value)


register_type(ProbeSpec, serializer=lambda s: s.spec, deserializer=_read_spec)


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
