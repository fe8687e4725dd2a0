"""A kill in the middle of the first full training state: the weights file of the first
scheduled step is written, the full state ``step<N>.ckpt`` is half written to its temp file,
then the process is SIGKILLed, as a preemption there would.

Imported only by the training subprocesses of the fault tests (``prelude=``)."""

import os
import signal
import tempfile
from pathlib import Path

from bytecanary.train.checkpointing import AtomicCheckpointIO


def _save_and_die(self, checkpoint, path, storage_options=None) -> None:
    path = Path(path)
    fd, _ = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.write(fd, b"half a training state")
    os.fsync(fd)
    os.kill(os.getpid(), signal.SIGKILL)


AtomicCheckpointIO.save_checkpoint = _save_and_die
