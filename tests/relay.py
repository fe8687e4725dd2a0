"""A shell's ``bytecanary`` forked from a warm server (tests/warm.py): the tutorials' venv holds
a ``shim`` in its place, which runs this file with the real script and its arguments."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path

if __package__:
    from . import warm
else:  # run by a shim as a script: this folder is the first on sys.path
    import warm


def relay(script: str, args: list[str]) -> None:
    """``python SCRIPT ARGS`` as a command of its own for a shell: forked from the server
    ``BYTECANARY_WARM`` names, its signals passed on, its exit this process's."""
    if "BYTECANARY_WARM" not in os.environ:
        os.execv(sys.executable, [sys.executable, script, *args])
    process = warm.Popen([sys.executable, script, *args], tied=True)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda sig, _: process.send_signal(sig))
    code = process.wait()
    if code < 0:
        with contextlib.suppress(OSError):  # SIGKILL's disposition cannot be set
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


def shim(path: Path, script: Path) -> Path:
    """A command at ``path`` that runs ``script`` forked from the warm server ``BYTECANARY_WARM``
    names (spawned where none is named), for a shell that finds it first on its PATH."""
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{__file__}" "{script}" "$@"\n')
    path.chmod(0o755)
    return path


if __name__ == "__main__":
    relay(sys.argv[1], sys.argv[2:])
