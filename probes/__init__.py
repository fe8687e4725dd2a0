"""Probes run on any checkpoint; each registers itself from the module its entry point names
(``bytecanary.probes`` in pyproject.toml), bytecanary's own as any plugin's."""

from bytecanary.probes.registry import PROBES, Probe, load_probes, register_probe
from bytecanary.probes.specs import build_probes, get_probe, validate_specs

__all__ = ["PROBES", "Probe", "build_probes", "get_probe", "load_probes", "register_probe", "validate_specs"]
