"""Probes run on any checkpoint: importing this package registers every probe."""

from bytecanary.probes import level0, level1, ppl  # noqa: F401  (registration by import)
from bytecanary.probes.mcqa import probe as _mcqa_probe  # noqa: F401
from bytecanary.probes.registry import PROBES, Probe, register_probe
from bytecanary.probes.specs import build_probes, get_probe, validate_specs

__all__ = ["PROBES", "Probe", "build_probes", "get_probe", "register_probe", "validate_specs"]
