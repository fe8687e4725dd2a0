"""The ``mcqa`` probe: scored and generated protocols over the same items.

Scored by likelihood: ``letter_separate`` (``Answer:`` + space token, bare letter),
``letter_merged`` (``Answer:``, `` A``), ``cloze`` (each option's full text, encoded as
lm-evaluation-harness does; HellaSwag-style items continue their context), as in the
space-tokenization trap MCQA paper. Metrics: ``acc``, ``ece``, ``brier`` (letters) or
``acc``, ``acc_norm``, ``acc_bytes`` (cloze); per task ``mcnemar_p`` between the two
letter strategies on the same items; with ``permutations`` the options are rotated
cyclically and ``acc_perm_spread`` is the max - min accuracy over rotations.

Scored by generation (greedy, or ``seeds`` sampled runs at temperature 0.6 / top-k 20):
``dashed`` (the Matched-and-Dashed protocol: ``acc`` and how often each extraction rule
fired, ``rule_<name>``) and ``wrapper_<family>`` for the five wrappers of "Format
Sensitivity Index" (arXiv 2607.09665): ``acc``, ``parsable``, their ``_normalised``
variants, ``prompt_tokens``, with per task ``fsi``, ``psi``, ``nfsi`` and their bootstrap
CIs (``_lo``, ``_hi``), the same on the token-matched subset (``fsi_matched``,
``psi_matched``, ``matched_share``), ``delta_tok_median``, and ``wrapper_<family>/win``;
``probe/mcqa/all/...`` averages FSI/PSI over tasks and counts wins. NonsenseQA tasks
report ``chance_gap`` = acc - 1/choices and ``chance_distance`` = its absolute value for
every protocol. Keys: ``keys.mcqa(task, protocol, metric)`` and ``keys.mcqa_task(task, metric)``.

Tasks: the embedded word completion (``wordcomp_<lang>``, items `bytecanary prepare` drew
from the data's held-out text), NonsenseQA (``nonsenseqa_<lang>``) and any benchmark
through ``datasets`` (one task per language when a file mixes languages). Per-item records
(``records``) start with ``record_context`` (checkpoint, step, ...), which the caller sets.
Where the work lives: ``views`` (encoding), ``generation`` (answers
and grading), ``aggregate`` (metrics), ``item_records`` (per-item lines).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from bytecanary.probes.common import (
    DEFAULT_DATA_DIR,
    context_size,
    evalsets_dir,
    merge_shards,
    pad_id,
    shard_indices,
)
from bytecanary.probes.engine import Sampling
from bytecanary.probes.mcqa.aggregate import mcqa_metrics
from bytecanary.probes.mcqa.dashed import Matcher
from bytecanary.probes.mcqa.generation import generate_answers, grade
from bytecanary.probes.mcqa.item_records import write_item_records
from bytecanary.probes.mcqa.prompts import labels
from bytecanary.probes.mcqa.scoring import score_continuations
from bytecanary.probes.mcqa.tasks import (
    McqaItem,
    TaskSource,
    by_task,
    load_task,
    nonsense_items,
    word_completion_items,
)
from bytecanary.probes.mcqa.views import View, build_views, view_tokens
from bytecanary.probes.registry import Probe, register_probe

from bytecanary.data import wordcomp
from bytecanary.data.languages import LANGUAGES
from bytecanary.keys import GENERATED_PROTOCOLS, MCQA_PROTOCOLS, SCORED_PROTOCOLS

TRIAL_ITEMS = 256  # items per task with ``trial``
TRIAL_GENERATIVE = 32  # items per task that generate with ``trial`` (default ``generative_per_task``)


@register_probe("mcqa")
class McqaProbe(Probe):
    # v3: one pass per item (shared prompt, no copied KV cache); tasks per language
    # v4: generated answers end at their protocol's stop strings (generation.py), cut before
    # them; generating views batched together (bootstrap CIs see items in that order)
    version = 4

    def __init__(
        self,
        tasks: list[dict[str, Any]] | None = None,
        embedded_per_language: int = 64,
        nonsense_per_language: int = 64,
        languages: list[str] | None = None,
        protocols: list[str] | None = None,
        label_format: str = "A.",
        shots: int = 0,
        permutations: bool = False,
        max_new_tokens: int = 24,
        stop: bool = True,
        seeds: int = 0,
        temperature: float = 0.6,
        top_k: int = 20,
        similarity: str = "tfidf",
        generative_per_task: int | None = None,
        batch_size: int = 32,
        seed: int = 0,
        trial: bool = True,
        records: str | None = None,
    ) -> None:
        """
        Args:
            tasks: benchmarks, each a ``TaskSource`` as a mapping (name, schema, language, path, ...).
            embedded_per_language: word-completion items per language from the data's held-out
                text (0: none; needs a prepared data folder).
            nonsense_per_language: NonsenseQA items per language (0: none).
            protocols: subset of letter_separate, letter_merged, cloze, dashed and
                wrapper_<plain|json|structured|structured_delim|deliberate> (default: all).
            label_format: "A.", "(A)" or "1." (letter scoring).
            shots: solved examples before each question (letter scoring and cloze).
            permutations: also score every cyclic rotation of the options.
            max_new_tokens: generation length of the dashed and wrapper protocols.
            stop: end each generated answer at its protocol's stop strings (a newline for
                the one-line wrappers, ...; see ``bytecanary.probes.mcqa.generation``); False: decode
                to eos or ``max_new_tokens``, as version 3 did.
            seeds: 0: one greedy generation per prompt; n: n sampled runs (seeds 0..n-1)
                at ``temperature`` / ``top_k``, treated as repeats.
            generative_per_task: the generative protocols run on the first this many items
                of each task (None: 32 with ``trial``, else all); a generated answer costs
                far more than a scored one.
            similarity: how M&D matches an answer to an option: "tfidf" (character n-grams)
                or a sentence-transformers model name or path.
            trial: at most 256 items per task; False: all of them.
            records: append one JSON line per scored item view to this file.
        """
        self.protocols = list(protocols or MCQA_PROTOCOLS)
        unknown = set(self.protocols) - set(MCQA_PROTOCOLS)
        if unknown:
            raise ValueError(f"unknown protocols {sorted(unknown)}; known: {', '.join(MCQA_PROTOCOLS)}")
        labels(label_format, 2)  # validates the format
        if seeds < 0 or max_new_tokens < 1:
            raise ValueError("seeds must be >= 0 and max_new_tokens >= 1")
        self.sources = [TaskSource(**t) for t in tasks or []]
        self.embedded, self.nonsense = embedded_per_language, nonsense_per_language
        self.languages = languages or list(LANGUAGES)
        self.label_format, self.shots, self.permutations = label_format, shots, permutations
        self.max_new_tokens, self.stop, self.seeds = max_new_tokens, stop, seeds
        self.temperature, self.top_k, self.similarity = temperature, top_k, similarity
        self.generative_per_task = generative_per_task
        self._matcher_cache: Matcher | None = None
        self.batch_size, self.seed, self.trial, self.records = batch_size, seed, trial, records
        self.record_context: dict[str, Any] = {}
        """Fields every per-item record starts with, set by the caller before ``aggregate``:
        ``{"checkpoint": ..., "step": ..., "tokens_seen": ...}``."""

    @property
    def scored(self) -> list[str]:
        return [p for p in self.protocols if p in SCORED_PROTOCOLS]

    @property
    def generated(self) -> list[str]:
        return [p for p in self.protocols if p in GENERATED_PROTOCOLS]

    def eval_files(self, data_dir: Path | None) -> list[Path]:
        """The prepared word-completion items and any local benchmark files."""
        files = []
        if self.embedded:
            folder = evalsets_dir(data_dir)
            files += [folder / wordcomp.file_name(lang) for lang in self.languages]
        files += [Path(f) for src in self.sources for f in src.data_files or []]
        return [f for f in files if f.is_file()]

    def _matcher(self) -> Matcher:
        """Built once per probe: an embedding model is loaded once, not at every checkpoint."""
        if self._matcher_cache is None:
            self._matcher_cache = Matcher(self.similarity)
        return self._matcher_cache

    def _samplings(self) -> list[Sampling]:
        if self.seeds == 0:
            return [Sampling()]
        return [Sampling(self.temperature, self.top_k, seed=self.seed * 1000 + s) for s in range(self.seeds)]

    def validate(self, data_dir: Path | None) -> None:
        """Load every item (benchmark rows, the prepared word-completion pools), so a bad
        source stops a run (one line naming the task, row and column) before any model loads."""
        self._items(data_dir)

    def _items(self, data_dir: Path | None) -> list[tuple[McqaItem, tuple[McqaItem, ...]]]:
        """(item, its shots) for every task; shots come from the item's own task."""
        groups = [items for src in self.sources for items in by_task(load_task(src))]
        if self.embedded:
            folder = Path(data_dir or DEFAULT_DATA_DIR)
            groups += [
                word_completion_items(folder, lang, self.embedded, self.seed) for lang in self.languages
            ]
        groups += [nonsense_items(lang, self.nonsense, self.seed) for lang in self.languages if self.nonsense]
        out = []
        for items in groups:
            shots, rest = tuple(items[: self.shots]), items[self.shots :]
            out += [(item, shots) for item in (rest[:TRIAL_ITEMS] if self.trial else rest)]
        return out

    def prepare(self, tokenizer: Any, data_dir: Path | None) -> list[View]:
        """Every view, those that generate first, each group shortest first: a batch then
        holds rows of about one length, so padding costs little, and the generating views of
        every task fill whole batches instead of a few rows in each (every rank sorts alike,
        so DDP batches stay the same)."""
        limit = self.generative_per_task or (TRIAL_GENERATIVE if self.trial else None)
        items = self._items(data_dir)
        views = build_views(
            tokenizer, items, self.scored, self.generated, self.label_format, self.permutations, limit
        )
        return sorted(views, key=lambda view: (not view.prompts, view_tokens(view)))

    def compute(
        self, model: Any, tokenizer: Any, prepared: list[View], rank: int = 0, world: int = 1
    ) -> dict[str, np.ndarray]:
        """Per view of this rank: every scored protocol's choice log-likelihoods (nan-padded
        to the widest item) and, when generating, the decoded answers."""
        idx = shard_indices(len(prepared), self.batch_size, rank, world)
        pad = pad_id(tokenizer)
        width = max((len(v.item.choices) for v in prepared), default=1)
        out: dict[str, np.ndarray] = {"index": idx}
        n_ctx = context_size(model)
        for protocol in self.scored:
            views = [prepared[i].encodings[protocol] for i in idx]
            # a prompt longer than the context keeps its end (the question and "Answer:")
            prompts = [p[-max(1, n_ctx - max(map(len, c))) :] if n_ctx else p for p, c in views]
            lls = score_continuations(model, prompts, [c for _, c in views], pad, self.batch_size)
            table = np.full((len(idx), width), np.nan)
            for row, ll in enumerate(lls):
                table[row, : len(ll)] = ll
            out[protocol] = table
        if self.generated:
            mine = [prepared[i] for i in idx]
            out["generated"] = generate_answers(
                model,
                tokenizer,
                mine,
                self.generated,
                self._samplings(),
                self.max_new_tokens,
                self.batch_size,
                pad,
                n_ctx,
                self.stop,
            )
        return out

    def aggregate(self, prepared: list[View], payloads: list[dict[str, np.ndarray]]) -> dict[str, float]:
        merged = merge_shards(payloads)
        per_view = {
            p: [merged[p][i, : len(v.item.choices)] for i, v in enumerate(prepared)] for p in self.scored
        }
        graded = (
            grade(prepared, merged["generated"], self.generated, self._matcher()) if self.generated else {}
        )
        if self.records:
            write_item_records(
                self.records, self.name, self.record_context, prepared, per_view, graded, self.generated
            )
        return mcqa_metrics(prepared, per_view, graded, self.generated, self.permutations, self.seed)
