"""The paper's tier gap, read back from the Level 0 records: validity of common minus rare
characters (arXiv:2606.14122 reports 96.21% vs 95.26% structural validity), with the 95%
CI the probe drew over characters (``probes.utf8_results.tier_gaps``; the same draws at
every checkpoint, so the curve of gaps is paired). Absent keys are absent data.
"""

from __future__ import annotations

from collections.abc import Sequence

from bytecanary import keys, stats
from bytecanary.data.languages import LANGUAGES
from bytecanary.report.analysis import Checkpoint
from bytecanary.report.axis import TOKENS_AXIS, Axis

GAP_METRICS = {"partial": "V partial", "strict": "V strict", "p_valid": "p_valid"}
GAP_GROUPS = ("all", *LANGUAGES)


def gap(cp: Checkpoint, lang: str, metric: str = "partial") -> stats.Gap | None:
    """Common minus rare ``metric`` of ``lang`` at ``cp`` with its CI; None where the probe
    recorded none (a language without both tiers, or records from before the gap)."""
    value, lo, hi = (cp.value(keys.tier_gap(lang, metric, bound)) for bound in ("", "_lo", "_hi"))
    return None if value is None or lo is None or hi is None else stats.Gap(value, lo, hi)


def text(g: stats.Gap | None) -> str:
    return "-" if g is None else f"{g.value:+.3f} ({g.lo:+.3f} to {g.hi:+.3f})"


def last_with_gap(cps: Sequence[Checkpoint]) -> Checkpoint | None:
    """The last checkpoint whose records hold a tier gap."""
    return next((c for c in reversed(cps) if gap(c, "all") is not None), None)


def groups(cps: Sequence[Checkpoint]) -> list[str]:
    """``all`` and the languages some checkpoint has a gap for, in the report's order."""
    return [g for g in GAP_GROUPS if any(gap(c, g) is not None for c in cps)]


def at(cp: Checkpoint, axis: Axis = TOKENS_AXIS) -> str:
    return axis.at(cp.tokens_seen) if cp.tokens_seen is not None else cp.key


def summary_line(cps: Sequence[Checkpoint], axis: Axis = TOKENS_AXIS) -> str | None:
    """The gap of V partial at the last checkpoint that has one, per group, for the terminal."""
    last = last_with_gap(cps)
    if last is None:
        return None
    cells = "; ".join(f"{g} {text(gap(last, g))}" for g in groups([last]))
    return f"tier gap, common - rare V partial at {at(last, axis)} (95% CI over characters): {cells}"


def scalars(cps: Sequence[Checkpoint]) -> dict[str, float]:
    """The gap of every metric over all languages at the last checkpoint, for W&B's summary."""
    last = last_with_gap(cps)
    out: dict[str, float] = {}
    for metric in GAP_METRICS:
        g = gap(last, "all", metric) if last else None
        if g is not None:
            out |= {
                f"report/tier_gap_{metric}{end}": v
                for end, v in (("", g.value), ("_lo", g.lo), ("_hi", g.hi))
            }
    return out
