"""``probes.jsonl``: one record per (checkpoint, probe), appended as soon as it exists.

{"checkpoint", "step", "tokens_seen", "probe", "version", "params", "status": "ok"|"failed",
 "error", "seconds", "metrics": {...}}. ``version`` is the probe's version and ``params``
its fingerprint (parameters and eval files), so a record says which setup made it. Appends
are whole lines, flushed and fsynced, so a crash loses at most the record in flight;
readers skip a torn last line. The same file serves the training callback and
``bytecanary probe``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


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
        "metrics": metrics or {},
    }


def append_record(path: str | Path, record: dict[str, Any]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_records(path: str | Path) -> list[dict[str, Any]]:
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line torn by a crash
    return rows


def completed(path: str | Path) -> set[tuple[str, str, int, str]]:
    """(checkpoint, probe, version, params) of every successful record: a probe counts as
    done on a checkpoint only for the same version and fingerprint (older records lack
    both and never match)."""
    return {
        (r["checkpoint"], r["probe"], r.get("version"), r.get("params"))
        for r in read_records(path)
        if r.get("status") == "ok"
    }
