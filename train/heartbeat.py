"""Training's heartbeat: ``heartbeat.json`` names the process training the run, is renewed every few
seconds and records when it left training, so a sidecar (``bytecanary probe --watch``) tells a training
on its way from one killed, crashed or hung (docs/gpus.md#a-sidecar-beside-training)."""

from __future__ import annotations

import dataclasses
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bytecanary.checkpoints import HEARTBEAT, Heartbeat
from bytecanary.errors import BytecanaryError
from bytecanary.io import warn, write_json

BEAT_EVERY = 5.0  # seconds between beats: a sidecar counts a beat missing after a few of these


def _write(run_dir: Path, beat: Heartbeat, quiet: bool = False) -> bool:
    """Write ``beat``; a failed write (a full disk) is a warning unless ``quiet``, and training
    goes on. Returns whether it was written."""
    try:
        write_json(run_dir / HEARTBEAT, dataclasses.asdict(beat))
    except (OSError, BytecanaryError) as err:
        if not quiet:
            warn(f"{run_dir / HEARTBEAT}: not written ({err}); a sidecar may take the training for stopped")
        return False
    return True


@contextmanager
def beating(run_dir: Path, writes: bool = True, every: float = BEAT_EVERY) -> Iterator[str]:
    """Yield this training's attempt id (what ``finished.json`` carries) and, with ``writes``
    (the first rank), keep ``heartbeat.json`` current while the body runs, marking it ended
    when the body returns or raises."""
    now = time.time()
    beat = Heartbeat(os.getpid(), socket.gethostname(), uuid.uuid4().hex[:12], every, now, now)
    if not writes:
        yield beat.attempt
        return
    stop = threading.Event()

    def renew() -> None:
        failed = False
        while not stop.wait(every):  # one warning while writes fail, not one per beat
            failed = not _write(run_dir, dataclasses.replace(beat, updated=time.time()), quiet=failed)

    _write(run_dir, beat)
    thread = threading.Thread(target=renew, name="heartbeat", daemon=True)
    thread.start()
    try:
        yield beat.attempt
    finally:
        stop.set()
        thread.join()
        now = time.time()
        _write(run_dir, dataclasses.replace(beat, updated=now, ended=now))
