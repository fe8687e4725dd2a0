"""Whether the training a sidecar (``bytecanary probe --watch``) follows is on its way, and
what the sidecar waits for, said at a bounded rate: read from the training's heartbeat
(``heartbeat.json``), or for a run from before heartbeats, from its files changing.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

from bytecanary.checkpoints import Heartbeat, last_change, process_gone
from bytecanary.probes.claims import clock
from bytecanary.probes.targets import Target

RESTART_GRACE = 120.0  # seconds a training that exited or died has to start again before the watch ends
NOTE_EVERY = 60.0  # seconds between two same "waiting" lines


class Rate:
    """The lines of a waiting process: one on a new ``topic`` at once, on the same topic at most
    once per ``period`` seconds, so a log says what it waits for without flooding."""

    def __init__(self, period: float) -> None:
        self.period, self.topic, self.at = period, None, -math.inf

    def say(self, line: str, topic: str | None = None) -> None:
        topic = line if topic is None else topic
        now = time.monotonic()
        if topic != self.topic or now - self.at >= self.period:
            print(line, flush=True)
            self.topic, self.at = topic, now


def stopped(folder: Path, beat: Heartbeat | None, since: float, idle_limit: float) -> str | None:
    """Why the training of ``folder``'s run counts as stopped now, or None while it may be on its
    way. The watch's start (``since``) counts as a sign of life, so a training launched beside
    the sidecar, or restarted, has time to start."""
    now = time.time()
    if beat is None:  # a run from before heartbeats, or not started yet
        quiet, limit = now - max(since, last_change(folder)), idle_limit
        if quiet < limit:
            return None
        return f"no heartbeat.json and nothing new for {limit:g} s (--series.idle_limit)"
    who = f"training (pid {beat.pid} on {beat.host})"
    quiet, grace = now - max(since, beat.updated), min(idle_limit, RESTART_GRACE)
    if beat.ended is not None:
        limit, why = grace, f"{who} exited at {clock(beat.ended)}"
    elif now - beat.updated > 2 * beat.every and process_gone(beat.host, beat.pid):  # and a beat missed
        limit, why = grace, f"{who} is gone (killed?) since its last beat at {clock(beat.updated)}"
    else:
        limit = max(idle_limit, 3 * beat.every)
        why = f"{who} has not beaten since {clock(beat.updated)}, {limit:g} s (--series.idle_limit)"
    return why if quiet >= limit else None


def waiting_line(folder: Path, step: int | None, beat: Heartbeat | None, targets: list[Target]) -> str:
    """What the sidecar waits for, in words that change only when the state does."""
    if step is not None:
        return f"waiting: the run finished at step {step}; its weights file is not in {folder} yet"
    newest = f"newest: step {targets[-1].step_hint}" if targets else "none yet"
    if beat is None:
        training = "no heartbeat.json: a run from before heartbeats, or not started"
    elif beat.ended is not None:
        training = f"training (pid {beat.pid} on {beat.host}) exited at {clock(beat.ended)}, not finished"
    else:
        training = f"training: pid {beat.pid} on {beat.host}, attempt {beat.attempt}"
    return f"waiting for the next checkpoint of {folder} ({newest}; {training})"
