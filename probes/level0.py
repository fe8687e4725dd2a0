"""Level 0: context-free structural validity ("Beyond Perplexity: UTF-8 Validity in
Byte-aware LMs", arXiv 2606.14122, sections 3.1-3.3): the model continues the first k bytes
of a character, with no context, so only its grasp of UTF-8 decides (docs/utf8-probes.md).
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
from bytecanary.data.languages import LANGUAGES
from bytecanary.display import Display, Judged, RatioCurve, Table
from bytecanary.probes import utf8_keys
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
        ("partial", utf8_keys.level0(metric="partial")),
        ("strict", utf8_keys.level0(metric="strict")),
        ("p_valid", utf8_keys.level0(metric="p_valid")),
        ("gold win", utf8_keys.level0(metric="gold_win_rate")),
        ("gen ppl", utf8_keys.level0(metric="ppl")),
    ),
    lambda lang: utf8_keys.level0(lang, metric="partial"),
)
PPL_TABLE = Table(  # greedy validity, then expected validity, by language
    "Level 0 validity (greedy V, expected p_valid)",
    (
        *(
            (f"V {m} {lang}", utf8_keys.level0(lang, "all", m))
            for m in ("partial", "strict")
            for lang in ("all", *LANGUAGES)
        ),
        *((f"p_valid {lang}", utf8_keys.level0(lang, "all", "p_valid")) for lang in ("all", *LANGUAGES)),
        ("p_valid SE all", utf8_keys.level0("all", "all", "p_valid_se")),
    ),
)
# the paper's ratio: greedy validity (V_partial, strict; arXiv:2606.14122 abstract) and expected
# validity p_valid over all languages and tiers, each judged against perplexity
VALIDITY = RatioCurve(
    "validity",
    "Level 0 validity (all, partial)",
    note="the paper reports about 2x",
    label="V partial",
    panel="Level 0 V partial (all)",
)
P_VALID = RatioCurve("p_valid", "Level 0 expected validity (all, p_valid)", panel="Level 0 p_valid (all)")
JUDGED = (
    *(
        Judged(
            utf8_keys.level0(lang, "all", m),
            "greedy",
            utf8_keys.level0(lang, "all", "n"),
            VALIDITY if (lang, m) == ("all", "partial") else None,
        )
        for lang in ("all", *LANGUAGES)
        for m in ("partial", "strict")
    ),
    *(
        Judged(
            utf8_keys.level0(lang, "all", "p_valid"),
            "se",
            utf8_keys.level0(lang, "all", "p_valid_se"),
            P_VALID if lang == "all" else None,
        )
        for lang in ("all", *LANGUAGES)
    ),
)


@register_probe(utf8_keys.LEVEL0)
class Level0Probe(Utf8Probe):
    by_default = True
    version = 4
    display = Display(
        fields=("language", "tier", "k"),
        headline=headline,
        table=TABLE,
        metrics=utf8_keys.METRICS,
        smooth=utf8_keys.SMOOTH,
        ppl_table=PPL_TABLE,
        judged=JUDGED,
        sections=("bytecanary.probes.utf8_report:TIERS_SECTION",),
        report_table=False,
    )
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
        yield partial(utf8_keys.level0, "all", "all"), np.ones(len(samples), dtype=bool)
        for lg in sorted(set(lang)):
            yield partial(utf8_keys.level0, lg, "all"), lang == lg
            for t in sorted(set(tier[lang == lg])):
                yield partial(utf8_keys.level0, lg, t), (lang == lg) & (tier == t)
                for kl in sorted(set(k[(lang == lg) & (tier == t)])):
                    yield partial(utf8_keys.level0, lg, t, k=kl), (lang == lg) & (tier == t) & (k == kl)
