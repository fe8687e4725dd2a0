"""A probe that SIGKILLs its own process, as a preemption in the middle of the probes would.

Imported only by the training subprocesses of the fault tests (never by pytest itself, so
the probe battery over every registered probe does not see it)."""

import os
import signal
from pathlib import Path

from bytecanary.probes.registry import Probe, register_probe


@register_probe("sigkill")
class SigkillProbe(Probe):
    def __init__(self, marker: str, at: int = 2) -> None:
        """
        Args:
            marker: file that remembers the kill, so a restarted run is not killed again.
            at: kill on this call of ``compute`` in the process.
        """
        self.marker, self.at, self.calls = marker, at, 0

    def prepare(self, tokenizer, data_dir):
        return [None]  # one sample: not an empty eval set

    def compute(self, model, tokenizer, prepared, rank=0, world=1):
        self.calls += 1
        if self.calls == self.at and not Path(self.marker).exists():
            Path(self.marker).touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return {}

    def aggregate(self, prepared, payloads):
        return {"probe/sigkill/alive": 1.0}
