"""What the UTF-8 probes measured, one row per sample (a rank's share travels as its ``payload``),
and what they report of it: group metrics, the common-vs-rare tier gaps, per-sample records.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bytecanary.probes.utf8_keys import tier_gap
from bytecanary.stats import Stratum, clustered_gaps, proportion_se

if TYPE_CHECKING:
    from bytecanary.probes.utf8_probe import Utf8Sample


@dataclass(frozen=True)
class SampleResults:
    """Per-sample results, one row per sample (``index`` into the samples); T = max_new_tokens."""

    index: np.ndarray  # (N,) the sample's position in ``Prepared.samples``
    partial: np.ndarray  # (N, T) step scores after each generated token
    strict: np.ndarray  # (N, T)
    soft: np.ndarray  # (N, T)
    cumulative: np.ndarray  # (N, T)
    ema: np.ndarray  # (N, T)
    gold_ll: np.ndarray  # (N,) teacher-forced log p of the gold remainder; nan without one
    gen_ll: np.ndarray  # (N,) log p of the generated tokens
    nll_sum: np.ndarray  # (N,) -log p of prompt tokens 2..n and the generated ones
    nll_count: np.ndarray  # (N,) how many tokens that sum covers
    pure: np.ndarray  # (N,) every generated token that adds bytes is a byte token
    term_match: np.ndarray  # (N,) exactly the remainder, then a character boundary
    p_valid: np.ndarray  # (N, T) mass on tokens keeping the stream valid at each step; nan after the end
    p_complete: np.ndarray  # (N, T) mass on tokens completing the pending character; nan where none is
    tokens: np.ndarray  # (N, T) generated ids, padding after the end
    lengths: np.ndarray  # (N,) generated tokens

    def payload(self) -> dict[str, np.ndarray]:
        """The arrays by name: what a rank sends (``merge_shards`` merges dicts)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def group_metrics(r: SampleResults, mask: np.ndarray, term_match: bool) -> dict[str, float]:
    """Aggregates of the samples in ``mask``: scores at the last step, per step, Delta_LL."""
    if not mask.any():
        return {}
    last = {k: getattr(r, k)[mask, -1] for k in ("partial", "strict", "soft", "cumulative", "ema")}
    out: dict[str, float] = {k: float(v.mean()) for k, v in last.items()}
    for t in range(r.partial.shape[1]):
        out[f"partial@t{t + 1}"] = float(r.partial[mask, t].mean())
    delta = (r.gold_ll - r.gen_ll)[mask]
    delta = delta[~np.isnan(delta)]
    if len(delta):
        out.update(
            gold_win_rate=float((delta > 0).mean()),
            delta_ll_mean=float(delta.mean()),
            delta_ll_median=float(np.median(delta)),
            delta_ll_std=float(delta.std()),
        )
    out.update(_expected_metrics(r.p_valid[mask], r.p_complete[mask]))
    out["ppl"] = float(np.exp(r.nll_sum[mask].sum() / r.nll_count[mask].sum()))
    pure = r.pure[mask]
    out["pure_share"] = float(pure.mean())
    if pure.any():
        out["partial_pure"] = float(last["partial"][pure].mean())
    if (~pure).any():
        out["partial_mixed"] = float(last["partial"][~pure].mean())
    if term_match:
        has_remainder = ~np.isnan(r.gold_ll[mask])
        out["term_match"] = float(r.term_match[mask][has_remainder].mean()) if has_remainder.any() else 0.0
    out["n"] = float(mask.sum())
    return out


def _expected_metrics(p_valid: np.ndarray, p_complete: np.ndarray) -> dict[str, float]:
    """p_valid and p_complete per step, over the samples live (with a character pending) there. The
    headlines are the first step's, with their SE: the prompt alone decides them, so they are
    continuous in the weights where later steps follow a greedy path that can flip.
    """
    per_sample = p_valid[:, 0]  # every sample generates at least one token
    n = len(per_sample)
    out = {"p_valid": float(per_sample.mean())}
    # one sample has no spread to measure: the bound for a mean of values in [0, 1] instead of 0
    out["p_valid_se"] = (
        float(per_sample.std(ddof=1) / np.sqrt(n)) if n > 1 else proportion_se(out["p_valid"], 1)
    )
    for name, table in (("p_valid", p_valid), ("p_complete", p_complete)):
        for t in np.flatnonzero(~np.isnan(table).all(axis=0)):
            out[f"{name}@t{t + 1}"] = float(np.nanmean(table[:, t]))
    if "p_complete@t1" in out:
        out["p_complete"] = out["p_complete@t1"]
    return out


GAP_TIERS = ("common", "rare")  # the paper's comparison: 96.21% vs 95.26% structural validity
GAP_RESAMPLES = 1000


def tier_gaps(samples: list[Utf8Sample], r: SampleResults, seed: int) -> dict[str, float]:
    """Per language (and over all) with both tiers, common minus rare V_partial, V_strict and p_valid,
    each with a 95% CI that redraws whole characters within each tier (``stats.clustered_gaps``,
    seeded, so every checkpoint draws the same).
    """
    values = np.stack([r.partial[:, -1], r.strict[:, -1], r.p_valid[:, 0]], axis=1)
    names = ("partial", "strict", "p_valid")
    strata: dict[tuple[str, str], Stratum] = {}
    for lang in sorted({s.language for s in samples}):
        for tier in GAP_TIERS:
            rows = [i for i, s in enumerate(samples) if s.language == lang and s.tier == tier]
            ids, cluster = np.unique([samples[i].item_id for i in rows], return_inverse=True)
            sums = np.zeros((len(ids), values.shape[1]))
            np.add.at(sums, cluster, values[rows])
            strata[(lang, tier)] = (sums, np.bincount(cluster, minlength=len(ids)).astype(np.float64))
    langs = [lg for lg in sorted({lg for lg, _ in strata}) if all(len(strata[(lg, t)][1]) for t in GAP_TIERS)]
    out: dict[str, float] = {}
    for group in [*langs, "all"] if langs else []:
        chosen = langs if group == "all" else [group]
        sides = [[strata[(lg, tier)] for lg in chosen] for tier in GAP_TIERS]
        gaps = clustered_gaps(*sides, n_resamples=GAP_RESAMPLES, seed=seed)
        for name, gap in zip(names, gaps, strict=True):
            for bound, value in (("", gap.value), ("_lo", gap.lo), ("_hi", gap.hi)):
                out[tier_gap(group, name, bound)] = value
    return out


def write_records(
    path: str | Path,
    probe: str,
    samples: list[Utf8Sample],
    r: SampleResults,
    context: dict[str, Any],
) -> None:
    """One JSON line per sample: ``context`` (checkpoint, step, ...), the sample, what was
    generated and its scores; (checkpoint, item_id, k) names a row."""
    with open(path, "a", encoding="utf-8") as f:
        for i, s in enumerate(samples):
            n = int(r.lengths[i])
            row = {**context, "probe": probe}
            row.update({k: v for k, v in asdict(s).items() if k not in ("prompt_bytes", "remainder")})
            row.update(
                prompt_bytes=s.prompt_bytes.hex(),
                remainder=s.remainder.hex(),
                generated_ids=r.tokens[i, :n].tolist(),
                partial=r.partial[i].tolist(),
                strict=r.strict[i].tolist(),
                p_valid=r.p_valid[i, :n].tolist(),
                delta_ll=None if np.isnan(r.gold_ll[i]) else float(r.gold_ll[i] - r.gen_ll[i]),
                pure=bool(r.pure[i]),
                term_match=bool(r.term_match[i]),
            )
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
