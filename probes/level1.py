"""Level 1: context-guided byte retrieval ("Beyond Perplexity: UTF-8 Validity in
Byte-aware LMs", arXiv 2606.14122, sections 3.1-3.3): after the sentence before a term, the
model must emit exactly the rest of its last character (Term Match, docs/utf8-probes.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from bytecanary import keys
from bytecanary.bytecodec import ByteCodec
from bytecanary.data.evalsets import load_level1
from bytecanary.display import Display, Table
from bytecanary.probes import utf8_keys
from bytecanary.probes.registry import register_probe
from bytecanary.probes.utf8_probe import (
    Prepared,
    Utf8Probe,
    Utf8Sample,
    byte_prefix_sample,
    prefix_ids,
    prepared_for,
)


def headline(k: keys.ProbeKey) -> bool:
    """Charted: Term Match, over all languages and by language."""
    return len(k.fields) == 1 and k.metric == "term_match"


TABLE = Table(
    "Level 1 (context-guided retrieval)",
    (
        ("term match", utf8_keys.level1(metric="term_match")),
        ("partial", utf8_keys.level1(metric="partial")),
        ("p_valid", utf8_keys.level1(metric="p_valid")),
        ("gold win", utf8_keys.level1(metric="gold_win_rate")),
    ),
    lambda lang: utf8_keys.level1(lang, metric="term_match"),
)


@register_probe(utf8_keys.LEVEL1)
class Level1Probe(Utf8Probe):
    by_default = True
    version = 3
    display = Display(
        fields=("language", "k"),
        headline=headline,
        table=TABLE,
        metrics=utf8_keys.METRICS,
        smooth=utf8_keys.SMOOTH,
        report_table=False,
    )
    term_match = True
    eval_set_pattern = "level1*.json"
    read_eval_set = staticmethod(load_level1)

    def prepare(self, tokenizer: Any, data_dir: Path | None) -> Prepared:
        cfg = self.config
        codec = ByteCodec.from_tokenizer(tokenizer)
        prefix = prefix_ids(tokenizer, codec, cfg.prefix)
        by_language: dict[str, list] = {}  # language -> (item id, sample)
        for path in self.eval_files(data_dir):
            for i, s in enumerate(load_level1(path)):
                if not cfg.languages or s.language in cfg.languages:
                    by_language.setdefault(s.language, []).append((f"{path.name}[{i}]", s))
        rng = np.random.default_rng(cfg.seed)
        samples = []
        for language, items in sorted(by_language.items()):
            if cfg.trial and len(items) > cfg.per_language:
                items = [items[i] for i in sorted(rng.choice(len(items), cfg.per_language, replace=False))]
            for item_id, item in items:
                # the target is the prompt's last character (the term's last); the rest is context
                context, char = item.sentence_prompt[:-1], item.sentence_prompt[-1]
                head = prefix + tokenizer.encode(context, add_special_tokens=False) if context else prefix
                head_bytes = codec.decode(head)
                for k in range(1, len(char.encode("utf-8"))):
                    samples.append(
                        byte_prefix_sample(codec, head, head_bytes, language, char, k, item.tier, item_id)
                    )
        return prepared_for(tokenizer, samples, codec)

    def groups(self, samples: list[Utf8Sample]) -> Iterator[tuple[Callable[[str], str], np.ndarray]]:
        """All, language, language x k."""
        lang = np.array([s.language for s in samples])
        k = np.array([s.k_label for s in samples])
        yield partial(utf8_keys.level1, "all"), np.ones(len(samples), dtype=bool)
        for lg in sorted(set(lang)):
            yield partial(utf8_keys.level1, lg), lang == lg
            for kl in sorted(set(k[lang == lg])):
                yield partial(utf8_keys.level1, lg, k=kl), (lang == lg) & (k == kl)
