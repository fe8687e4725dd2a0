"""``probes.jsonl``: one record per (checkpoint, probe), appended as soon as it exists.

{"checkpoint", "step", "tokens_seen", "probe", "version", "params", "status": "ok"|"failed",
 "error", "seconds", "threads", "metrics": {...}}. ``version`` is the probe's version and
``params`` its fingerprint (parameters and eval files), so a record says which setup made
it; ``threads`` (torch's intra-op threads while it ran) says what ``seconds`` were spent on. An
``ok`` record holds at least one metric. Appends are whole lines, flushed and fsynced,
under an advisory lock (``flock``) shared by every writer (the training callback, any
number of ``bytecanary probe`` processes): under it a torn last line left by a crash is cut
off, and a record whose (checkpoint, step, probe, version, params) already succeeded is
not appended again, so restarts and concurrent writers converge to each record once.
Readers skip a torn line.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Any

import torch

from bytecanary.io import named

NO_METRICS = "no metrics (empty eval set?)"


def make_record(
    checkpoint: str | None,
    step: int | None,
    tokens_seen: int | None,
    probe: str,
    metrics: dict[str, float] | None,
    seconds: float,
    error: str | None = None,
    *,
    version: int,
    params: str,
) -> dict[str, Any]:
    """A record; a run that raised nothing but measured nothing is a failure too."""
    error = error or (None if metrics else NO_METRICS)
    return {
        "checkpoint": checkpoint,
        "step": step,
        "tokens_seen": tokens_seen,
        "probe": probe,
        "version": version,
        "params": params,
        "status": "failed" if error else "ok",
        "error": error,
        "seconds": round(seconds, 3),
        "threads": torch.get_num_threads(),
        "metrics": metrics or {},
    }


def record_key(record: dict[str, Any]) -> tuple:
    """What makes two successful records the same result."""
    return tuple(record.get(k) for k in ("checkpoint", "step", "probe", "version", "params"))


def _parse(lines: list[bytes]) -> list[dict[str, Any]]:
    rows = []
    for line in lines:
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue  # a line torn by a crash
        if isinstance(row, dict):
            rows.append(row)
    return rows


def append_record(path: str | Path, record: dict[str, Any]) -> bool:
    """Append ``record`` unless an ``ok`` record of the same key is already there (another
    process finished it meanwhile); returns whether it was appended."""
    path = Path(path)
    key = record_key(record)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a+b") as f:
            fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes
            f.seek(0)
            data = f.read()
            whole = data.rfind(b"\n") + 1
            if whole < len(data):  # a writer died mid-line; under the lock nobody else writes
                f.truncate(whole)
            done = {record_key(r) for r in _parse(data[:whole].splitlines()) if r.get("status") == "ok"}
            if key in done:
                return False
            f.write((json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
    except OSError as err:
        raise named(err, path) from err
    return True


def read_records(path: str | Path) -> list[dict[str, Any]]:
    path = Path(path)
    return _parse(path.read_bytes().splitlines()) if path.exists() else []


def completed(path: str | Path) -> set[tuple[str, str, int, str]]:
    """(checkpoint, probe, version, params) of every successful record: a probe counts as
    done on a checkpoint only for the same version and fingerprint (older records lack
    both and never match)."""
    return {
        (r.get("checkpoint"), r.get("probe"), r.get("version"), r.get("params"))
        for r in read_records(path)
        if r.get("status") == "ok"
    }
