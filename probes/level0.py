"""Level 0: context-free structural validity (seeds/003 sections 3.1-3.3).

For each eval character c and each prefix length k = 1..len(c)-1, plus k = len(c) (what
follows a complete character), the prompt is the first k bytes of c as byte tokens;
the model continues for ``max_new_tokens``. Reported per language x tier x prefix
length and aggregated: step scores (partial, strict, soft, partial@t, cumulative, ema),
Delta_LL and gold win rate, perplexity, and validity split by pure-byte vs mixed output.
Keys: ``probe/level0/<lang>/<tier>[/k<k>]/<metric>``, ``probe/level0/<lang>/all/<metric>``,
``probe/level0/all/all/<metric>``. Trial mode takes M characters per language (fixed
seed, spread evenly over tiers); full mode takes the whole eval set.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from bytecanary.bytecodec import ByteCodec
from bytecanary.data.evalsets import Level0Set, load_level0
from bytecanary.errors import BytecanaryError
from probes import utf8_probe
from probes.engine import Sampling
from probes.registry import Probe, register_probe

METRICS_UP = (
    "partial",
    "strict",
    "soft",
    "cumulative",
    "ema",
    "gold_win_rate",
    "delta_ll_mean",
    "term_match",
)


def trial_subset(s: Level0Set, m: int, seed: int) -> list:
    """M entries spread evenly over the tiers (seeded); all of them when fewer."""
    rng = np.random.default_rng(seed)
    by_tier: dict[str, list] = {}
    for e in s.entries:
        by_tier.setdefault(e.tier, []).append(e)
    queues = {t: [es[i] for i in rng.permutation(len(es))] for t, es in sorted(by_tier.items())}
    chosen: list = []
    while len(chosen) < m and any(queues.values()):
        for t in sorted(queues):
            if queues[t] and len(chosen) < m:
                chosen.append(queues[t].pop())
    return chosen


def eval_set_files(eval_sets: list[str] | None, data_dir: Path | None, pattern: str) -> list[Path]:
    if eval_sets:
        return [Path(p) for p in eval_sets]
    folder = Path(data_dir or "data/default") / "evalsets"
    files = sorted(folder.glob(pattern))
    if not files:
        raise BytecanaryError(
            f"{folder}: no eval sets ({pattern}); run `bytecanary prepare` or pass the eval-set files"
        )
    return files


@register_probe("level0")
class Level0Probe(Probe):
    version = 1
    higher_is_better = {m: True for m in METRICS_UP} | {"ppl": False}

    def __init__(
        self,
        trial: bool = True,
        per_language: int = 256,
        eval_sets: list[str] | None = None,
        languages: list[str] | None = None,
        max_new_tokens: int = 5,
        batch_size: int = 256,
        alpha: float = 0.1,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
        prefix: str = "eos",
        records: str | None = None,
    ) -> None:
        """
        Args:
            trial: M = ``per_language`` characters per language; False: the whole set.
            eval_sets: Level 0 files (published format); default: the data's evalsets/.
            languages: keep only these languages.
            max_new_tokens: tokens generated after each prompt (T).
            alpha: EMA weight of V_ema.
            temperature, top_k, top_p, seed: sampling; temperature 0 is greedy.
            prefix: token before each prompt: "eos" (document separator), "bos" or "none".
            records: append one JSON line per sample to this file.
        """
        if prefix not in ("eos", "bos", "none"):
            raise ValueError(f"prefix must be eos, bos or none, got {prefix!r}")
        self.trial, self.per_language, self.eval_sets = trial, per_language, eval_sets
        self.languages, self.seed, self.records = languages, seed, records
        self.cfg = utf8_probe.DecodeConfig(
            max_new_tokens, batch_size, alpha, Sampling(temperature, top_k, top_p, seed), prefix
        )

    def prepare(self, tokenizer: Any, data_dir: Path | None) -> utf8_probe.Prepared:
        codec = ByteCodec.from_tokenizer(tokenizer)
        head = utf8_probe.prefix_ids(tokenizer, self.cfg.prefix) + utf8_probe.leading_space_ids(
            tokenizer, codec
        )
        head_bytes = codec.decode(head)
        samples = []
        for path in eval_set_files(self.eval_sets, data_dir, "level0_*.json"):
            s = load_level0(path)
            if self.languages and s.language not in self.languages:
                continue
            entries = trial_subset(s, self.per_language, self.seed) if self.trial else s.entries
            for e in entries:
                n = len(e.char.encode("utf-8"))
                for k in range(1, n + 1):
                    samples.append(
                        utf8_probe.byte_prefix_sample(codec, head, head_bytes, s.language, e.char, k, e.tier)
                    )
        return utf8_probe.prepared_for(tokenizer, samples, codec)

    def compute(self, model, tokenizer, prepared, rank: int = 0, world: int = 1):
        return utf8_probe.compute(model, prepared, self.cfg, rank, world)

    def groups(self, samples: list[utf8_probe.Utf8Sample]) -> Iterator[tuple[str, np.ndarray]]:
        """(key, mask) of every reported group: all, language, language x tier, x k."""
        lang = np.array([s.language for s in samples])
        tier = np.array([s.tier or "none" for s in samples])
        k = np.array([s.k_label for s in samples])
        yield "all/all", np.ones(len(samples), dtype=bool)
        for lg in sorted(set(lang)):
            yield f"{lg}/all", lang == lg
            for t in sorted(set(tier[lang == lg])):
                yield f"{lg}/{t}", (lang == lg) & (tier == t)
                for kl in sorted(set(k[(lang == lg) & (tier == t)])):
                    yield f"{lg}/{t}/{kl}", (lang == lg) & (tier == t) & (k == kl)

    def aggregate(self, prepared, payloads) -> dict[str, float]:
        r = utf8_probe.merge(payloads)
        if self.records:
            utf8_probe.write_records(self.records, self.name, prepared.samples, r)
        out: dict[str, float] = {}
        for key, mask in self.groups(prepared.samples):
            metrics = utf8_probe.group_metrics(r, mask, term_match=self.name == "level1")
            out.update({f"probe/{self.name}/{key}/{m}": v for m, v in metrics.items()})
        return out
