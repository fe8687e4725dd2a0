"""What ``bytecanary prepare`` may replace in its out folder (a stage folder whose ``stage.json`` lists
its files, so a file a user added is never deleted), and one prepare per folder, under a lock.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bytecanary.checkpoints import process_gone
from bytecanary.errors import BytecanaryError
from bytecanary.io import read_json, write_json

STAGE_FILE = "stage.json"
HOLDER = ".prepare.json"
HOLDER_WAIT = 2.0  # seconds a refused prepare waits for the holder's file, written just after its lock


def contents(folder: Path) -> list[str]:
    """Every file and folder below ``folder``, as ``stage.json`` lists what its stage wrote."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))


def _not_ours(stage_dir: Path) -> str | None:
    """Why ``stage_dir`` is not prepare's to replace, or None: it is absent, or it is a stage
    folder holding only what the stage wrote (a torn ``stage.json`` or one from before the list
    was kept cannot tell: the folder counts as the stage's)."""
    if not stage_dir.exists() and not stage_dir.is_symlink():
        return None
    whole = f"bytecanary prepare replaces {stage_dir.name}/ whole"
    away = "move it away or give another --out"
    if not stage_dir.is_dir():
        return f"{stage_dir}: not a folder, and {whole}: {away}"
    if not (stage_dir / STAGE_FILE).is_file():
        return f"{stage_dir}: has no {STAGE_FILE}, so bytecanary prepare did not make it: {away}"
    try:
        meta = read_json(stage_dir / STAGE_FILE)
    except BytecanaryError:
        return None
    listed = meta.get("contents") if isinstance(meta, dict) else None
    if not isinstance(listed, list):
        return None
    added = sorted(set(contents(stage_dir)) - set(listed) - {STAGE_FILE})
    if added:
        return f"{stage_dir / added[0]}: not written by bytecanary prepare, and {whole}: move it out"
    return None


def check_stages(out: Path, stages: tuple[str, ...]) -> None:
    """Refuse, before any work, an out folder whose entries named as ``stages`` are not all prepare's."""
    trouble = next(filter(None, (_not_ours(out / stage) for stage in stages)), None)
    if trouble:
        raise BytecanaryError(trouble)


def _holder(out: Path) -> str:
    """`` (pid N on HOST)`` of the prepare holding ``out``, or nothing once it has not said
    within ``HOLDER_WAIT`` (a file a killed prepare left names a process gone from this host)."""
    deadline = time.monotonic() + HOLDER_WAIT
    while time.monotonic() < deadline:
        try:
            found = json.loads((out / HOLDER).read_bytes())
            pid, host = int(found["pid"]), str(found["host"])
        except (OSError, ValueError, TypeError, KeyError):
            pid, host = None, None
        if pid is not None and not process_gone(host, pid):
            return f" (pid {pid} on {host})"
        time.sleep(0.1)
    return ""


@contextmanager
def hold(out: Path) -> Iterator[None]:
    """Hold ``out`` for this prepare (an advisory lock on the folder itself, released when the
    process ends however it ends): a second prepare of it is refused in one line naming the
    first, before it changes a file, rather than racing it over the stages' tasks."""
    fd = os.open(out, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BytecanaryError(
                f"{out}: another bytecanary prepare is preparing this folder{_holder(out)}; "
                "wait for it to end, or give another --out"
            ) from None
        write_json(out / HOLDER, {"pid": os.getpid(), "host": socket.gethostname()})
        try:
            yield
        finally:
            (out / HOLDER).unlink(missing_ok=True)
    finally:
        os.close(fd)
