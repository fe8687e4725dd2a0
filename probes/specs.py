"""Probes built from ``{name: ..., <parameters>, cadence: ...}`` specs, each checked against
its probe's ``Config`` and ``Cadence`` before any probe is built, so a bad parameter is one line
naming the file, the probe and the field before a training step runs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bytecanary.config import typed
from bytecanary.display import discover
from bytecanary.errors import BytecanaryError
from bytecanary.probe_options import ProbeSpec
from bytecanary.probes.cadence import Cadence
from bytecanary.probes.registry import PROBES, Probe, probe_class


def probes_where(source: str | Path | None) -> str:
    """How an error in a list of probes begins: ``configs/x.yaml: probes``."""
    return f"{source}: probes" if source else "probes"


def spec_where(source: str | Path | None, name: str) -> str:
    """Where a probe's spec lives, as its errors begin: ``configs/x.yaml: probes: level0``."""
    return f"{probes_where(source)}: {name}"


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
    return [_validate(spec, probes_where(source)) for spec in specs]


def default_specs() -> list[ProbeSpec]:
    """The probes ``bytecanary probe`` runs unasked (``Probe.by_default``)."""
    discover()
    return [ProbeSpec(name) for name, cls in PROBES.items() if cls.by_default]


def build_probes(
    specs: Sequence[ProbeSpec | Mapping[str, Any] | Probe], source: str | Path | None = None
) -> list[Probe]:
    """Probe instances from specs, each validated here once (a ``ProbeSpec`` names the file it
    was read from); instances are kept."""
    built = []
    for spec in specs:
        if isinstance(spec, Probe):
            built.append(spec)
            continue
        where = probes_where(spec.source or source) if isinstance(spec, ProbeSpec) else probes_where(source)
        params = _validate(spec.spec if isinstance(spec, ProbeSpec) else spec, where)
        name = params.pop("name")
        cadence = Cadence(**params.pop("cadence", {}))
        probe = probe_class(name)(**params)
        probe.cadence = cadence
        built.append(probe)
    return built


def get_probe(name: str, **params: Any) -> Probe:
    """One probe by name, validated like a YAML spec."""
    return build_probes([{"name": name, **params}])[0]
