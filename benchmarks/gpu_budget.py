"""Each part of ``gpu_check.py`` runs its commands within a time budget: one slow part must not
eat the others' time on a GPU lent for minutes."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from gpu_compare import StepFailed

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Budget:
    """The part running now: its budget in seconds (None: no limit) and when it started."""

    seconds: float | None = None
    started: float = 0.0

    def left(self) -> float | None:
        return None if self.seconds is None else max(self.seconds - (time.perf_counter() - self.started), 0.0)


BUDGET = Budget()


def command(cmd: list[str]) -> float:
    """Run ``cmd`` within what is left of the part's budget; its wall seconds. Fails with its
    stderr's tail, or, past the budget, kills it with every process it started."""
    start = time.perf_counter()
    safe = os.environ | {"PYTHONSAFEPATH": "1"}  # not the cwd's bytecanary/: gpu_run.sh lays one out
    pipe = subprocess.PIPE
    proc = subprocess.Popen(
        cmd, stdout=pipe, stderr=pipe, text=True, cwd=ROOT, env=safe, start_new_session=True
    )
    try:
        _, stderr = proc.communicate(timeout=BUDGET.left())
    except subprocess.TimeoutExpired:
        stop(proc)
        raise StepFailed(
            f"`{' '.join(cmd[-3:])}` ran past the part's budget of {BUDGET.seconds} s: killed"
        ) from None
    if proc.returncode != 0:
        raise StepFailed(f"`{' '.join(cmd)}` exited {proc.returncode}:\n{stderr[-4000:]}")
    return round(time.perf_counter() - start, 1)


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM to ``proc``'s process group, which torchrun passes on to its workers (they run
    in sessions of their own), then SIGKILL; returns once the group is gone, pipes closed."""
    for sig, grace in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        deadline = time.monotonic() + grace
        with contextlib.suppress(ProcessLookupError):  # it may have ended meanwhile
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace)
        if group_gone(proc.pid, deadline):
            break
    for pipe in (proc.stdout, proc.stderr):
        pipe.close()


def group_gone(group: int, deadline: float) -> bool:
    """Whether the last process of ``group`` ends by ``deadline`` (``time.monotonic``): the
    leader's exit does not wait for the others, which may still be dying of the same signal."""
    while True:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
