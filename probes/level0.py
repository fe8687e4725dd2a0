"""Level 0: context-free structural validity ("Beyond Perplexity: UTF-8 Validity in
Byte-aware LMs", arXiv 2606.14122, sections 3.1-3.3).

For each eval character c and each prefix length k = 1..len(c)-1, plus k = len(c) (what
follows a complete character), the prompt is the first k bytes of c as byte tokens;
the model continues for ``max_new_tokens``. Reported per language x tier x prefix
length and aggregated: step scores (partial, strict, soft, partial@t, cumulative, ema),
Delta_LL and gold win rate, perplexity, validity split by pure-byte vs mixed output, and
the gap between common and rare characters with its CI (``tier_gaps``).
Keys: ``keys.level0(lang, tier, metric, k)``, with "all" for the aggregates. Trial mode
takes M characters per language (fixed seed, spread evenly over tiers); full mode takes
the whole eval set. A file that mixes languages (the paper's published ones) is grouped by
each character's script, characters outside ja/ko/zh forming the language ``other``
(``bytecanary.data.evalsets.load_level0``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from bytecanary import keys
from bytecanary.bytecodec import ByteCodec
from bytecanary.data.evalsets import load_level0
from bytecanary.display import Display, Table
from bytecanary.probes.registry import register_probe
from bytecanary.probes.utf8_probe import (
    BYTE_SPACE,
    Prepared,
    Utf8Probe,
    Utf8Sample,
    byte_prefix_sample,
    leading_space_ids,
    prefix_ids,
    prepared_for,
    trial_subset,
)

HEADLINE = ("partial", "strict", "gold_win_rate", "p_valid", "tier_gap_partial")  # per language, tier "all"


def headline(k: keys.ProbeKey) -> bool:
    """Charted: the headline metrics over all tiers, and V_partial and p_valid by language."""
    if len(k.fields) != 2:
        return False
    lang, tier = k.fields
    return (tier == "all" and k.metric in HEADLINE) or (lang != "all" and k.metric in ("partial", "p_valid"))


TABLE = Table(
    "Level 0 (context-free validity)",
    (
        ("partial", keys.level0(metric="partial")),
        ("strict", keys.level0(metric="strict")),
        ("p_valid", keys.level0(metric="p_valid")),
        ("gold win", keys.level0(metric="gold_win_rate")),
        ("gen ppl", keys.level0(metric="ppl")),
    ),
    lambda lang: keys.level0(lang, metric="partial"),
)


@register_probe("level0")
class Level0Probe(Utf8Probe):
    by_default = True
    version = 4
    display = Display(fields=("language", "tier", "k"), headline=headline, table=TABLE)
    tier_gap = True
    eval_set_pattern = "level0_*.json"
    read_eval_set = staticmethod(load_level0)

    def prepare(self, tokenizer: Any, data_dir: Path | None) -> Prepared:
        cfg = self.config
        codec = ByteCodec.from_tokenizer(tokenizer)
        head = prefix_ids(tokenizer, codec, cfg.prefix)
        if cfg.prefix != BYTE_SPACE:  # that byte token already stands for the leading space
            head += leading_space_ids(tokenizer, codec)
        head_bytes = codec.decode(head)
        samples = []
        for s in (s for path in self.eval_files(data_dir) for s in load_level0(path)):
            if cfg.languages and s.language not in cfg.languages:
                continue
            for e in trial_subset(s, cfg.per_language, cfg.seed) if cfg.trial else s.entries:
                item_id = f"{s.language}:U+{ord(e.char):04X}"
                samples += [
                    byte_prefix_sample(codec, head, head_bytes, s.language, e.char, k, e.tier, item_id)
                    for k in range(1, len(e.char.encode("utf-8")) + 1)
                ]
        return prepared_for(tokenizer, samples, codec)

    def groups(self, samples: list[Utf8Sample]) -> Iterator[tuple[Callable[[str], str], np.ndarray]]:
        """All, language, language x tier, language x tier x k."""
        lang = np.array([s.language for s in samples])
        tier = np.array([s.tier or "none" for s in samples])
        k = np.array([s.k_label for s in samples])
        yield partial(keys.level0, "all", "all"), np.ones(len(samples), dtype=bool)
        for lg in sorted(set(lang)):
            yield partial(keys.level0, lg, "all"), lang == lg
            for t in sorted(set(tier[lang == lg])):
                yield partial(keys.level0, lg, t), (lang == lg) & (tier == t)
                for kl in sorted(set(k[(lang == lg) & (tier == t)])):
                    yield partial(keys.level0, lg, t, k=kl), (lang == lg) & (tier == t) & (k == kl)
