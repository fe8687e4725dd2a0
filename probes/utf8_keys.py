"""The UTF-8 probes' keys and metrics (arXiv:2606.14122 section 3.2):
``probe/level0/<lang>/<tier>[/<k>]/<metric>`` and ``probe/level1/<lang>[/<k>]/<metric>``, ``all``
for an aggregate."""

from __future__ import annotations

from bytecanary.keys import Metric

LEVEL0, LEVEL1 = "level0", "level1"  # the probes' registered names


def level0(lang: str = "all", tier: str = "all", metric: str = "partial", k: str | None = None) -> str:
    """``probe/level0/<lang>/<tier>[/<k>]/<metric>``; "all" is the aggregate."""
    fields = (lang, tier, k) if k else (lang, tier)
    return "/".join(("probe", LEVEL0, *fields, metric))


def tier_gap(lang: str = "all", metric: str = "partial", bound: str = "") -> str:
    """``probe/level0/<lang>/all/tier_gap_<metric>[_lo|_hi]``: common minus rare characters."""
    return level0(lang, "all", f"tier_gap_{metric}{bound}")


def level1(lang: str = "all", metric: str = "term_match", k: str | None = None) -> str:
    """``probe/level1/<lang>[/<k>]/<metric>``; "all" is the aggregate."""
    fields = (lang, k) if k else (lang,)
    return "/".join(("probe", LEVEL1, *fields, metric))


GAP_METRICS = ("partial", "strict", "p_valid")  # the metrics whose tier gap the probe records
METRICS = (
    Metric("partial", True, "mean"),  # V_partial at the last generation step
    Metric("strict", True, "rate"),  # share of streams that are complete, valid UTF-8
    Metric("soft", True, "mean"),  # share of bytes inside complete valid characters
    Metric("cumulative", True, "mean"),  # V_partial averaged over the steps
    Metric("ema", True, "mean"),  # exponential moving average of V_partial over the steps
    Metric("partial@t", True, "mean"),  # V_partial after t generated tokens (partial@t1..)
    # expected validity from the model's distribution along the greedy path (smooth in the weights)
    Metric("p_valid", True, "mean"),  # mass on tokens that keep the stream valid UTF-8, first step
    Metric("p_valid_se", None, "mean"),  # standard error of p_valid over the samples
    Metric("p_valid@t", True, "mean"),  # mass on tokens that keep the stream valid at step t (p_valid@t1..)
    Metric("p_complete", True, "mean"),  # mass on tokens completing the prompt's pending character, step 1
    Metric("p_complete@t", True, "mean"),  # mass on tokens completing the pending character at step t
    Metric("gold_win_rate", True, "rate"),  # share of samples where the gold remainder beats the output
    Metric("delta_ll_mean", True, "mean"),  # mean of LL(gold remainder) - LL(generated)
    Metric("delta_ll_median", True, "mean"),  # median of LL(gold remainder) - LL(generated)
    Metric("delta_ll_std", None, "mean"),  # standard deviation of Delta_LL
    Metric("pure_share", None, "rate"),  # share of outputs made of byte tokens only
    Metric("partial_pure", True, "mean"),  # V_partial of pure byte-token outputs
    Metric("partial_mixed", True, "mean"),  # V_partial of outputs with a multi-byte token
    Metric("term_match", True, "rate"),  # exactly the remainder, then a character boundary
    # the paper's tier gap: common minus rare characters, with _lo/_hi, the 95% bootstrap CI over characters
    *(Metric(f"tier_gap_{m}", None, "mean") for m in GAP_METRICS),
)
# no argmax and no greedy path enters these: decided by the weights and the prompts alone
SMOOTH = (
    "p_valid",
    "p_valid_se",
    "p_valid@t1",
    "p_complete",
    "p_complete@t1",
    *(f"tier_gap_p_valid{bound}" for bound in ("", "_lo", "_hi")),
)
