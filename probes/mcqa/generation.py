"""The generative MCQA protocols: decode an answer to every prompt, then grade it to an option.
Each batch samples with a seed of its own so DDP shards draw what one process draws; answers
stop at their protocol's stop string, which neither paper uses (docs/mcqa-probes.md).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bytecanary.bytecodec import ByteCodec
from bytecanary.probes import batching
from bytecanary.probes.engine import Decoding, Sampling, generate
from bytecanary.probes.mcqa import dashed, keys, wrappers
from bytecanary.probes.mcqa.dashed import Matcher, extract
from bytecanary.probes.mcqa.views import View
from bytecanary.probes.models import context_size, output_size, pad_id
from bytecanary.probes.stops import cut_at_stop


@dataclass(frozen=True)
class Answering:
    """How the generative protocols decode their answers."""

    protocols: Sequence[str]  # the generative protocols: the texts' axis 1, in this order
    samplings: Sequence[Sampling]  # one run each (axis 2): greedy, or a seeded sampled run
    max_new_tokens: int
    batch_size: int  # views per batch: the batches ``shard_indices`` dealt
    stop: bool = True  # each answer ends at its protocol's stop strings


def generate_answers(model: Any, tokenizer: Any, views: Sequence[View], answering: Answering) -> np.ndarray:
    """(views, protocols, samplings) decoded text; "" where a view has no prompt (rotated
    views, items past the generative limit). ``views`` are this rank's, batch by batch."""
    codec, pad = ByteCodec.from_tokenizer(tokenizer).padded(output_size(model)), pad_id(tokenizer)
    n_ctx, max_new_tokens, protocols = context_size(model), answering.max_new_tokens, answering.protocols
    keep = max(1, n_ctx - max_new_tokens) if n_ctx else None
    texts = np.full((len(views), len(protocols), len(answering.samplings)), "", dtype=object)
    # each run of a batch samples with a seed of its own, so the batches may run costliest first
    costs = [sum(len(p) + max_new_tokens for p in view.prompts.values()) for view in views]

    def step(vlo: int, vhi: int) -> None:  # one of the view batches shard_indices dealt
        batch = [(v, p) for v in range(vlo, vhi) for p in views[v].prompts]  # every protocol at once
        if not batch:
            return
        first = views[batch[0][0]].item
        prompts = [views[v].prompts[p][-keep:] if keep else views[v].prompts[p] for v, p in batch]
        stops = [stop_strings(p) if answering.stop else () for _, p in batch]
        for s, sampling in enumerate(answering.samplings):
            key = f"{sampling.seed}|{first.task}|{first.question}".encode()
            seeded = Sampling(sampling.temperature, sampling.top_k, seed=zlib.crc32(key))
            decoding = Decoding(max_new_tokens, tokenizer.eos_token_id, pad, len(batch), seeded)
            gen = generate(model, prompts, decoding, score_prompt=False, stops=stops, codec=codec)
            for row, (v, p) in enumerate(batch):
                ids = gen.tokens[row, : gen.lengths[row]].tolist()
                if ids and ids[-1] == tokenizer.eos_token_id:
                    ids = ids[:-1]
                text = cut_at_stop(codec.decode(ids), stops[row])
                texts[v, protocols.index(p), s] = text.decode("utf-8", errors="replace")

    batching.each(len(views), answering.batch_size, step, costs)
    return texts


def stop_strings(protocol: str) -> tuple[bytes, ...]:
    """Where an answer under ``protocol`` is complete (see the module docstring)."""
    family = protocol.removeprefix(keys.WRAPPER)
    return tuple(s.encode() for s in (dashed.STOPS if protocol == keys.DASHED else wrappers.STOPS[family]))


@dataclass(frozen=True)
class Grades:
    """One generative protocol's grades per (view, sampling run); an option index, -1: none."""

    predicted: np.ndarray  # (views, runs) the strict reading's option (M&D: the matched one)
    normalised: np.ndarray  # (views, runs) the normalised reading's option (M&D: the same)
    rule: np.ndarray  # (views, runs) the M&D rule that fired; "" for the wrappers
    prompt_tokens: np.ndarray  # (views,) the prompt's length in tokens; 0 where none was generated


@dataclass(frozen=True)
class GradedAnswers:
    """Every generative protocol's answers and their grades."""

    texts: np.ndarray  # (views, protocols, runs) the answers as decoded
    by_protocol: dict[str, Grades]  # in the order of the texts' protocol axis


def grade(
    views: Sequence[View], texts: np.ndarray, protocols: Sequence[str], matcher: Matcher
) -> GradedAnswers:
    """Every view's answers under each of ``protocols`` (the texts' axis 1) read as options:
    M&D extracts a text by its rule hierarchy and matches it; a wrapper reads its strict
    and its normalised format."""
    n, runs = len(views), texts.shape[2]
    by_protocol = {}
    for j, p in enumerate(protocols):
        pred = np.full((n, runs), -1)
        norm = np.full((n, runs), -1)
        rule = np.full((n, runs), "", dtype=object)
        for i, view in enumerate(views):
            if not view.prompts:
                continue
            choices = view.item.choices
            for s in range(runs):
                if p == keys.DASHED:
                    answer, rule[i, s] = extract(texts[i, j, s], choices)
                    pred[i, s] = norm[i, s] = matcher.match(answer, choices)
                else:
                    family = p.removeprefix(keys.WRAPPER)
                    text = wrappers.response(family, texts[i, j, s])
                    pred[i, s] = wrappers.extract_strict(family, text, len(choices))
                    norm[i, s] = wrappers.extract_normalised(family, text, choices)
        tokens = np.array([len(v.prompts.get(p, ())) for v in views])
        by_protocol[p] = Grades(pred, norm, rule, tokens)
    return GradedAnswers(texts, by_protocol)
