"""The ``mcqa`` probe: scored protocols (letters, cloze) and generated ones (Matched-and-Dashed,
the five wrappers of "Format Sensitivity Index", arXiv 2607.09665) over the same items, so the
scoring traps show on one set (docs/mcqa-probes.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bytecanary.data import wordcomp
from bytecanary.data.languages import LANGUAGES
from bytecanary.errors import BytecanaryError
from bytecanary.io import warn
from bytecanary.probes.dist import merge_shards, shard_indices
from bytecanary.probes.engine import Sampling
from bytecanary.probes.evalsets import DEFAULT_DATA_DIR, evalsets_dir
from bytecanary.probes.mcqa.aggregate import mcqa_metrics
from bytecanary.probes.mcqa.dashed import Matcher
from bytecanary.probes.mcqa.display import DISPLAY
from bytecanary.probes.mcqa.generation import Answering, generate_answers, grade
from bytecanary.probes.mcqa.item_records import write_item_records
from bytecanary.probes.mcqa.keys import CLOZE, GENERATED_PROTOCOLS, MCQA_PROTOCOLS, SCORED_PROTOCOLS
from bytecanary.probes.mcqa.lm_eval_tasks import LmEvalItem, LmEvalSource, task_source
from bytecanary.probes.mcqa.prompts import labels
from bytecanary.probes.mcqa.scoring import score_continuations
from bytecanary.probes.mcqa.tasks import (
    McqaItem,
    by_task,
    load_task,
    nonsense_items,
    word_completion_items,
)
from bytecanary.probes.mcqa.views import View, build_views, view_tokens
from bytecanary.probes.models import context_size, pad_id
from bytecanary.probes.params import Checked, GenerationSettings, PerSample, Sizes, at_least
from bytecanary.probes.registry import Probe, register_probe
from bytecanary.records import Context

TRIAL_ITEMS = 256  # items per task with ``trial``
TRIAL_GENERATIVE = 32  # items per task that generate with ``trial`` (default ``generative_per_task``)


@dataclass(frozen=True)
class McqaItems(Checked):
    """Which items the probe asks, and which of them generate."""

    tasks: list[dict[str, Any]] | None = None
    """Benchmarks, each a ``TaskSource`` as a mapping (name, schema, language, path, ...), or an
    lm-evaluation-harness task ``{name: ..., source: lm_eval, include_path: ..., language: ...}``."""
    embedded_per_language: int = 64
    """Word-completion items per language from the data's held-out text (0: none; needs a
    prepared data folder)."""
    nonsense_per_language: int = 64
    """NonsenseQA items per language (0: none)."""
    languages: list[str] | None = None
    """Languages of the word-completion and NonsenseQA items; None: every language bytecanary knows."""
    generative_per_task: int | None = None
    """The generative protocols run on the first this many items of each task (None: 32 with
    ``trial``, else all): a generated answer costs far more than a scored one."""

    def __post_init__(self) -> None:
        at_least("embedded_per_language", self.embedded_per_language, 0)
        at_least("nonsense_per_language", self.nonsense_per_language, 0)
        if self.generative_per_task is not None:
            at_least("generative_per_task", self.generative_per_task, 1)
        super().__post_init__()


@dataclass(frozen=True)
class McqaProtocols(Checked):
    """How each item is put to the model."""

    protocols: list[str] | None = None
    """Subset of letter_separate, letter_merged, cloze, dashed and
    wrapper_<plain|json|structured|structured_delim|deliberate>; None: all of them."""
    label_format: str = "A."
    """Option labels of letter scoring: "A.", "(A)" or "1."."""
    shots: int = 0
    """Solved examples before each question (letter scoring and cloze; an lm-eval task
    uses its own ``num_fewshot``)."""
    permutations: bool = False
    """Also score every cyclic rotation of the options."""
    similarity: str = "tfidf"
    """How M&D matches an answer to an option: "tfidf" (character n-grams) or a
    sentence-transformers model name or path."""

    def __post_init__(self) -> None:
        unknown = set(self.protocols or ()) - set(MCQA_PROTOCOLS)
        if unknown:
            raise ValueError(f"unknown protocols {sorted(unknown)}; known: {', '.join(MCQA_PROTOCOLS)}")
        labels(self.label_format, 2)  # a ValueError naming label_format
        at_least("shots", self.shots, 0)
        super().__post_init__()


@dataclass(frozen=True)
class McqaGeneration(GenerationSettings):
    """How the dashed and wrapper protocols generate their answers."""

    max_new_tokens: int = 24
    """Generation length of the dashed and wrapper protocols."""
    temperature: float = 0.6
    """Sampling temperature of the ``seeds`` sampled runs."""
    top_k: int = 20
    """The sampled runs draw among the k likeliest tokens only; 0: all of them."""
    stop: bool = True
    """End each answer at its protocol's stop strings (a newline for the one-line wrappers,
    ...; see ``bytecanary.probes.mcqa.generation``); False: decode to eos or
    ``max_new_tokens`` (the papers' setting)."""
    seeds: int = 0
    """0: one greedy generation per prompt; n: n sampled runs (seeds 0..n-1) at
    ``temperature`` / ``top_k``, treated as repeats."""

    def __post_init__(self) -> None:
        at_least("seeds", self.seeds, 0)
        super().__post_init__()


@dataclass(frozen=True)
class McqaConfig(McqaItems, McqaProtocols, McqaGeneration, Sizes, PerSample):
    """The mcqa probe's parameters (a flat spec: ``{name: mcqa, trial: true, protocols: [...]}``);
    ``trial`` keeps at most 256 items per task, ``records`` gets one line per item view."""

    batch_size: int = 32
    """Item views per forward pass; a batch of generated answers samples with a seed of its own."""


def fit_rows(
    views: Sequence[View], protocol: str, n_ctx: int
) -> tuple[list[list[int]], list[list[list[int]]], list[tuple[int, int]]]:
    """Scoring rows of (prompt, continuations) for ``protocol``, each with its (view, first choice):
    one row over the shared prompt where it fits ``n_ctx`` (0: no limit), else a row per choice cut
    as lm-eval cuts each request (docs/mcqa-probes.md).
    """
    prompts, conts, owners = [], [], []
    for row, view in enumerate(views):
        if protocol not in view.encodings:
            continue
        prompt, choices = view.encodings[protocol]
        own = view.choice_prompts.get(protocol)
        if own is None and (not n_ctx or len(prompt) + max(map(len, choices)) - 1 <= n_ctx):
            prompts.append(prompt)
            conts.append(choices)
            owners.append((row, 0))
            continue
        for k, choice in enumerate(choices):
            full = own[k] if own is not None else prompt
            prompts.append(full[-max(1, n_ctx + 1 - len(choice)) :] if n_ctx else full)
            conts.append([choice])
            owners.append((row, k))
    return prompts, conts, owners


@register_probe("mcqa")
class McqaProbe(Probe):
    # in every record; raised whenever the same inputs give other metrics (the order in
    # which items are batched included: bootstrap CIs resample in that order), so records
    # of another version are probed again
    version = 5
    display = DISPLAY
    Config = McqaConfig  # built as ``McqaProbe(McqaConfig(...))`` or ``McqaProbe(trial=True, ...)``
    config: McqaConfig

    def __init__(self, config: McqaConfig | None = None, **fields: Any) -> None:
        """``config``, or its fields by name (a spec's keys)."""
        super().__init__(config, **fields)
        self.sources = [task_source(t) for t in self.config.tasks or []]
        self._matcher_cache: Matcher | None = None

    @property
    def protocols(self) -> list[str]:
        """The protocols asked for, else every one."""
        return list(self.config.protocols or MCQA_PROTOCOLS)

    @property
    def languages(self) -> list[str]:
        """The languages of the word-completion and NonsenseQA items: those asked for, else all."""
        return self.config.languages or list(LANGUAGES)

    @property
    def scored(self) -> list[str]:
        return [p for p in self.protocols if p in SCORED_PROTOCOLS]

    @property
    def generated(self) -> list[str]:
        return [p for p in self.protocols if p in GENERATED_PROTOCOLS]

    def measures(self) -> dict[str, Any]:
        """Its protocols and its tasks (benchmarks, word completion and NonsenseQA in which
        languages) decide its keys; sizes, shots, seeds and decoding do not."""
        cfg = self.config
        return {
            "protocols": sorted(self.protocols),
            "tasks": sorted(s.name for s in self.sources),
            "word_completion": sorted(self.languages) if cfg.embedded_per_language else [],
            "nonsense": sorted(self.languages) if cfg.nonsense_per_language else [],
        }

    def eval_files(self, data_dir: Path | None) -> list[Path]:
        """The prepared word-completion items, any local benchmark files and each lm-eval
        task's YAMLs and local data files."""
        files = []
        if self.config.embedded_per_language:
            folder = evalsets_dir(data_dir)
            files += [folder / wordcomp.file_name(lang) for lang in self.languages]
        for src in self.sources:
            files += src.files() if isinstance(src, LmEvalSource) else [Path(f) for f in src.data_files or []]
        return [f for f in files if f.is_file()]

    def _matcher(self) -> Matcher:
        """Built once per probe: an embedding model is loaded once, not at every checkpoint."""
        if self._matcher_cache is None:
            self._matcher_cache = Matcher(self.config.similarity)
        return self._matcher_cache

    def _samplings(self) -> list[Sampling]:
        """One greedy run, or one sampled run per seed."""
        cfg = self.config
        if cfg.seeds == 0:
            return [Sampling()]
        return [Sampling(cfg.temperature, cfg.top_k, seed=cfg.seed * 1000 + s) for s in range(cfg.seeds)]

    def validate(self, data_dir: Path | None) -> None:
        """Load every item before any model loads, so a bad source stops a run with one line naming the
        file, task, row and column; an item id twice in a task (two sources making one task) is refused,
        since per-item records join by (task, item id).
        """
        seen: set[tuple[str, str]] = set()
        items = self._items(data_dir)
        left_out = [p for p in self.protocols if p != CLOZE]
        for task in sorted({i.task for i, _ in items if isinstance(i, LmEvalItem) and i.contexts}):
            if left_out:
                warn(
                    f"mcqa: lm-eval task {task!r}: its choices are contexts (multiple input, as Winogrande), "
                    f"so only cloze applies; left out for it: {', '.join(left_out)}"
                )
        for item, _ in items:
            if (item.task, item.item_id) in seen:
                makers = [s.name for s in self.sources if item.task in (s.name, f"{s.name}_{item.language}")]
                whose = f"tasks {makers[0]!r} and {makers[1]!r} both make" if len(makers) > 1 else "in"
                raise BytecanaryError(f"{whose} task {item.task!r}, item id {item.item_id!r} twice")
            seen.add((item.task, item.item_id))

    def _items(self, data_dir: Path | None) -> list[tuple[McqaItem, tuple[McqaItem, ...]]]:
        """(item, its shots) for every task; shots come from the item's own task (an lm-eval
        task's: the documents lm-eval put in the item's few-shot context, every document asked)."""
        cfg = self.config
        out: list[tuple[McqaItem, tuple[McqaItem, ...]]] = []
        groups: list[list[McqaItem]] = []
        for src in self.sources:
            if isinstance(src, LmEvalSource):
                out += src.items(TRIAL_ITEMS if cfg.trial else None)
            else:
                groups += by_task(load_task(src))
        if cfg.embedded_per_language:
            folder = Path(data_dir or DEFAULT_DATA_DIR)
            groups += [
                word_completion_items(folder, lang, cfg.embedded_per_language, cfg.seed)
                for lang in self.languages
            ]
        if cfg.nonsense_per_language:
            groups += [nonsense_items(lang, cfg.nonsense_per_language, cfg.seed) for lang in self.languages]
        for items in groups:
            shots, rest = tuple(items[: cfg.shots]), items[cfg.shots :]
            out += [(item, shots) for item in (rest[:TRIAL_ITEMS] if cfg.trial else rest)]
        return out

    def prepare(self, tokenizer: Any, data_dir: Path | None) -> list[View]:
        """Every view, the generating ones first, each group shortest first: batches hold rows of about
        one length (little padding) and generation fills whole batches; every rank sorts alike, so DDP
        batches stay the same.
        """
        cfg = self.config
        limit = cfg.generative_per_task or (TRIAL_GENERATIVE if cfg.trial else None)
        items = self._items(data_dir)
        views = build_views(
            tokenizer, items, self.scored, self.generated, cfg.label_format, cfg.permutations, limit
        )
        return sorted(views, key=lambda view: (not view.prompts, view_tokens(view)))

    def compute(
        self, model: Any, tokenizer: Any, prepared: list[View], rank: int = 0, world: int = 1
    ) -> dict[str, np.ndarray]:
        """Per view of this rank: every scored protocol's choice log-likelihoods (nan-padded
        to the widest item) and, when generating, the decoded answers."""
        cfg = self.config
        idx = shard_indices(len(prepared), cfg.batch_size, rank, world)
        pad = pad_id(tokenizer)
        width = max((len(v.item.choices) for v in prepared), default=1)
        out: dict[str, np.ndarray] = {"index": idx}
        n_ctx = context_size(model)
        for protocol in self.scored:
            prompts, conts, owners = fit_rows([prepared[i] for i in idx], protocol, n_ctx)
            lls = score_continuations(model, prompts, conts, pad, cfg.batch_size)
            table = np.full((len(idx), width), np.nan)
            for (row, first), ll in zip(owners, lls, strict=True):
                table[row, first : first + len(ll)] = ll
            out[protocol] = table
        if self.generated:
            answering = Answering(
                self.generated, self._samplings(), cfg.max_new_tokens, cfg.batch_size, cfg.stop
            )
            out["generated"] = generate_answers(model, tokenizer, [prepared[i] for i in idx], answering)
        return out

    def aggregate(
        self, prepared: list[View], payloads: list[dict[str, np.ndarray]], context: Context
    ) -> dict[str, float]:
        merged = merge_shards(payloads)
        per_view = {
            p: [merged[p][i, : len(v.item.choices)] for i, v in enumerate(prepared)] for p in self.scored
        }
        graded = None
        if self.generated:
            graded = grade(prepared, merged["generated"], self.generated, self._matcher())
        if self.config.records:
            write_item_records(self.config.records, self.name, context.fields(), prepared, per_view, graded)
        grades = graded.by_protocol if graded is not None else {}
        return mcqa_metrics(prepared, per_view, grades, self.config.permutations, self.config.seed)
