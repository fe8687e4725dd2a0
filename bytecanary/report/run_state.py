"""Whether a run's training has finished, as its folder says (``finished.json`` of the attempt
that trained last, ``heartbeat.json``), in words a report puts first."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from bytecanary.checkpoints import finished_step, process_gone, read_heartbeat, reported


def unfinished(run_dir: Path, metrics: list[dict[str, Any]], on_bad: Callable[[str], None]) -> str | None:
    """One line saying that the run's training has not finished (no ``finished.json`` of the
    attempt that trained last) and what its heartbeat says of it, so a report of a run still
    on its way is not read as final; None for a finished run."""
    if finished_step(run_dir, on_bad) is not None:
        return None
    beat = reported(read_heartbeat, run_dir, on_bad)
    if beat is None:
        why = "its training has not reached its last step (no finished.json)"
    else:
        who = f"its training (pid {beat.pid} on {beat.host})"
        if beat.ended is not None:
            why = f"{who} exited before its last step"
        elif process_gone(beat.host, beat.pid):
            why = f"{who} is gone (killed?) before its last step"
        else:
            why = f"{who} is still running"
    steps = [row["step"] for row in metrics if isinstance(row.get("step"), int)]
    upto = f"; this report covers it up to step {max(steps)}" if steps else ""
    return f"note: {run_dir} is unfinished: {why}{upto}"
