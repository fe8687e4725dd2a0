"""Level 1: context-guided byte retrieval (seeds/003 sections 3.1-3.3).

The prompt is the tokenised sentence before the target character (the last character of
``sentence_prompt``, i.e. of the term) plus the first k bytes
of the character as byte tokens (k = 1..len-1); the model must emit exactly the rest,
then reach a character boundary (Term Match). Reported per language and prefix length:
Term Match rate, the Level 0 step scores, Delta_LL. Keys: ``probe/level1/<lang>[/k<k>]/<metric>``
and ``probe/level1/all/<metric>``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from bytecanary.bytecodec import ByteCodec
from bytecanary.data.evalsets import load_level1
from probes import utf8_probe
from probes.level0 import METRICS_UP, Level0Probe, eval_set_files
from probes.registry import register_probe


@register_probe("level1")
class Level1Probe(Level0Probe):
    """Same knobs as Level 0; ``eval_sets`` are Level 1 files (JSON lists)."""

    version = 1
    higher_is_better = {m: True for m in METRICS_UP} | {"ppl": False}

    def prepare(self, tokenizer: Any, data_dir: Path | None) -> utf8_probe.Prepared:
        codec = ByteCodec.from_tokenizer(tokenizer)
        prefix = utf8_probe.prefix_ids(tokenizer, self.cfg.prefix)
        by_language: dict[str, list] = {}
        for path in eval_set_files(self.eval_sets, data_dir, "level1*.json"):
            for s in load_level1(path):
                if not self.languages or s.language in self.languages:
                    by_language.setdefault(s.language, []).append(s)
        rng = np.random.default_rng(self.seed)
        samples = []
        for language, items in sorted(by_language.items()):
            if self.trial and len(items) > self.per_language:
                items = [items[i] for i in sorted(rng.choice(len(items), self.per_language, replace=False))]
            for item in items:
                # the target is the prompt's last character (the term's last); the rest is context
                context, char = item.sentence_prompt[:-1], item.sentence_prompt[-1]
                head = prefix + tokenizer.encode(context, add_special_tokens=False) if context else prefix
                head_bytes = codec.decode(head)
                for k in range(1, len(char.encode("utf-8"))):
                    samples.append(
                        utf8_probe.byte_prefix_sample(codec, head, head_bytes, language, char, k, item.tier)
                    )
        return utf8_probe.prepared_for(tokenizer, samples, codec)

    def groups(self, samples: list[utf8_probe.Utf8Sample]) -> Iterator[tuple[str, np.ndarray]]:
        """(key, mask) of every reported group: all, language, language x k."""
        lang = np.array([s.language for s in samples])
        k = np.array([s.k_label for s in samples])
        yield "all", np.ones(len(samples), dtype=bool)
        for lg in sorted(set(lang)):
            yield lg, lang == lg
            for kl in sorted(set(k[lang == lg])):
                yield f"{lg}/{kl}", (lang == lg) & (k == kl)
