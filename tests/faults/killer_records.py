"""A kill right after the Nth record reaches the records file, before its cells reach the
metrics log, as a preemption between the two writes would: ``BYTECANARY_KILL_AT`` is N,
``BYTECANARY_KILL_MARKER`` a file that remembers the kill, so a restarted run is not killed again.

Imported only by the training subprocesses of the fault tests (``prelude=``)."""

import os
import signal
from pathlib import Path

from bytecanary import records

_append = records.append
_appended = 0


def _append_then_die(path, record) -> bool:
    global _appended
    added = _append(path, record)
    _appended += added
    marker = Path(os.environ["BYTECANARY_KILL_MARKER"])
    if added and _appended == int(os.environ["BYTECANARY_KILL_AT"]) and not marker.exists():
        marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return added


records.append = _append_then_die
