"""How ``gpu_check.py`` holds two records files, or two runs' metrics, to agree."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from bytecanary import display

AGREE = 1e-4  # relative: how far another launch's smooth metrics may be from one process's
# absolute: probability masses are summed in float32, whose rounding differs with the thread
# count, and a spread of near-equal ones (p_valid_se) is all rounding
AGREE_ABS = 1e-6


class StepFailed(RuntimeError):
    pass


def ok(record: dict[str, Any]) -> dict[str, Any]:
    """A probes.jsonl record, or the failure it records."""
    if record["status"] != "ok":
        raise StepFailed(f"probe {record['probe']} failed at step {record['step']}: {record['error']}")
    return record


def compare_records(one: list[dict[str, Any]], two: list[dict[str, Any]]) -> dict[str, Any]:
    """Pair for pair: the same (checkpoint, probe, fingerprint) set, each pair once, with the same
    metric keys and every smooth metric within AGREE (relative; NaN equals NaN); greedy
    metrics that moved are counted, not held to it (a near tie flips with the process)."""
    a, b = (
        {(r["checkpoint"], r["probe"], r["fingerprint"]): ok(r)["metrics"] for r in rows}
        for rows in (one, two)
    )
    same = a.keys() == b.keys() and len(one) == len(a) and len(two) == len(b)
    differ = [
        (
            f"{pair[1]} at {Path(pair[0]).name}: {key}",
            display.smooth(key) or key not in a[pair].keys() & b[pair].keys(),
        )
        for pair in sorted(a.keys() & b.keys(), key=str)
        for key in sorted(a[pair].keys() | b[pair].keys())
        if not close(a[pair].get(key), b[pair].get(key))
    ]
    held = [where for where, bound in differ if bound]
    return {
        "pairs": len(a),
        "same_pairs": same,
        "differing_metrics": held[:10],
        "greedy_metrics_moved": len(differ) - len(held),
        "agree": same and not held,
    }


def close(x: float | None, y: float | None) -> bool:
    """Equal within AGREE relative or AGREE_ABS absolute; NaN equals NaN."""
    if x is None or y is None:  # a key one side lacks
        return x is y
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    return math.isclose(x, y, rel_tol=AGREE, abs_tol=AGREE_ABS)
