"""An untrained model scores the embedded word-completion task at chance.

The gold ending is often part of a word the tokenizer merged; were it scored in fewer
tokens than its distractors, a random model (about the same log-probability for every
token) would pick it far above chance, and the task would measure the tokenizer. Before
distractors matched the gold's token count, random GPT-2s scored cloze 0.50 (ja), 0.52
(ko) and 0.61 (zh) on this data; the demo's step-1 checkpoint scored 0.95 on the default text.
"""

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

from bytecanary.data.languages import LANGUAGES
from bytecanary.probes import get_probe
from bytecanary.probes.mcqa.views import View
from bytecanary.probes.registry import NO_CONTEXT

N = 256  # items per language: the small data's whole pool
CLOZE_MODELS = 3  # random models averaged for cloze, so less of the spread is the model's
LETTERS = ["letter_separate", "letter_merged"]  # never score the endings: one model


def _random_gpt2(vocab_size: int, seed: int) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=vocab_size, n_positions=512, n_embd=64, n_layer=2, n_head=2)
    return GPT2LMHeadModel(config).eval()


def _scores(tok: Any, data: Path, protocols: list[str], models: int) -> tuple[list[View], list[dict]]:
    """The probe's views of every language's items and its metrics for each random model."""
    probe = get_probe(
        "mcqa", embedded_per_language=N, nonsense_per_language=0, protocols=protocols, batch_size=64
    )
    views = probe.prepare(tok, data)
    runs = []
    for seed in range(models):
        model = _random_gpt2(len(tok), seed)
        runs.append(probe.aggregate(views, [probe.compute(model, tok, views)], NO_CONTEXT))
    return views, runs


@pytest.fixture(scope="module")
def tok(small_data):
    """The data's own tokenizer: the one its runs train with and its pools were matched to."""
    return AutoTokenizer.from_pretrained(str(small_data / "tokenizer"))


@pytest.fixture(scope="module")
def cloze(tok, small_data):
    return _scores(tok, small_data, ["cloze"], CLOZE_MODELS)


@pytest.fixture(scope="module")
def letters(tok, small_data):
    return _scores(tok, small_data, LETTERS, 1)


def _within_chance(runs: list[dict], lang: str, protocol: str, metric: str) -> None:
    """The accuracy, averaged over the models, lies within 1/4 +- 2 binomial standard
    errors of one model's score on the items: the models share the items, so averaging
    them narrows the model's part of the spread, not the items' (eight random models
    average 0.213 on the small data's English items, and 0.249 on 1,000 English items of
    the synthetic data)."""
    p = 1 / 4
    (n,) = {run[f"probe/mcqa/wordcomp_{lang}/n"] for run in runs}
    pooled = np.mean([run[f"probe/mcqa/wordcomp_{lang}/{protocol}/{metric}"] for run in runs])
    assert abs(pooled - p) <= 2 * math.sqrt(p * (1 - p) / n), (lang, protocol, metric, pooled)


def test_every_choice_has_the_gold_token_count(tok, cloze):
    views, _ = cloze
    assert {v.item.language for v in views} == set(LANGUAGES) and len(views) == N * len(LANGUAGES)
    for view in views:
        assert len(view.item.choices) == 4
        totals = {
            len(tok.encode(view.item.question + c, add_special_tokens=False)) for c in view.item.choices
        }
        assert len(totals) == 1, view.item
        # so the probe scores as many continuation tokens for each choice
        assert len({len(c) for c in view.encodings["cloze"][1]}) == 1


@pytest.mark.parametrize("lang", sorted(LANGUAGES))
def test_untrained_accuracy_is_chance(cloze, letters, lang):
    for metric in ("acc", "acc_norm", "acc_bytes"):
        _within_chance(cloze[1], lang, "cloze", metric)  # 0.25 +- 0.054
    for protocol in LETTERS:
        _within_chance(letters[1], lang, protocol, "acc")
