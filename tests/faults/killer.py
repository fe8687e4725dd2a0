"""A probe that SIGKILLs its own process, as a preemption in the middle of the probes would.

Imported by the subprocesses of the fault tests, and registered in pytest only for the test
that asks for the ``sigkill_probe`` fixture (the probe battery never sees it)."""

import os
import signal
from dataclasses import dataclass
from pathlib import Path

from bytecanary.probes.registry import Probe, register_probe


@register_probe("sigkill")
class SigkillProbe(Probe):
    @dataclass(frozen=True)
    class Config:
        marker: str
        """File that remembers the kill, so a restarted run is not killed again."""
        at: int = 2
        """Kill on this call of ``compute`` in the process."""

    def __init__(self, config=None, **fields) -> None:
        super().__init__(config, **fields)
        self.calls = 0

    def prepare(self, tokenizer, data_dir):
        return [None]  # one sample: not an empty eval set

    def compute(self, model, tokenizer, prepared, rank=0, world=1):
        self.calls += 1
        if self.calls == self.config.at and not Path(self.config.marker).exists():
            Path(self.config.marker).touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return {}

    def aggregate(self, prepared, payloads, context):
        return {"probe/sigkill/alive": 1.0}
