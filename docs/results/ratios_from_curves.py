"""The report's ratio lines (flat tail, time to tolerance, tier gap) from a committed
``curves.csv``, for the runs whose folders were not kept: its columns are metric keys, one
row per checkpoint, so each row becomes the metrics row and the probe record the report
reads. A column the CSV lacks is absent data (without ``n``, greedy validity's noise is its
scatter alone).

    python docs/results/ratios_from_curves.py docs/results/cpu_converge/curves.csv
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from bytecanary import keys, settling
from bytecanary.records import Record
from bytecanary.report import analysis
from bytecanary.report.writer import ratio_lines


def read_curves(path: Path) -> tuple[list[dict[str, float]], list[Record]]:
    """(metrics rows, Level 0 records) of every row of ``path``."""
    metrics, probes = [], []
    with path.open(encoding="utf-8") as f:
        for row in csv.DictReader(f):
            values = {k: float(v) for k, v in row.items() if v not in ("", None)}
            tokens = int(values.pop(keys.TOKENS_SEEN))
            step = int(values.pop(keys.STEP, 0)) or None
            ppl = values.pop(keys.val_ppl(), None)
            if ppl is not None:
                metrics.append({keys.TOKENS_SEEN: tokens, keys.val_ppl(): ppl})
            level0 = {k: v for k, v in values.items() if keys.probe_of(k) == "level0"}
            if level0:
                record = Record(
                    f"{path}:{tokens}", step, tokens, "level0", 0, "csv", "ok", None, 0.0, 1, level0
                )
                probes.append(record)
    return metrics, probes


def grid_lines(metrics: list[dict[str, float]], probes: list[Record]) -> list[str]:
    """Per ratio curve, report.md's grid over the tolerances: a ratio with its CI, or why none."""
    conv = analysis.convergence(metrics, probes)
    lines = []
    for key, grid in conv.tolerance_grids.items():
        for (eps_v, eps_p), r in grid.items():
            cell = (
                f"{r.value:.2f} (95% CI {settling.ci_text(r)})"
                if r
                else f"n/a: {conv.why_no_tolerance_ratio(key, (eps_v, eps_p))}"
            )
            tol = f"{settling.eps_text(eps_v, False)} vs {settling.eps_text(eps_p, True)}"
            lines.append(f"{conv.named[key].name}/perplexity, {tol}: {cell}")
    return lines


if __name__ == "__main__":
    curves = read_curves(Path(sys.argv[1]))
    print("\n".join([*ratio_lines(*curves), *grid_lines(*curves)]))
