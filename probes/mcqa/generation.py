"""The generative MCQA protocols: decode an answer to every prompt, then grade it.

Decoding is greedy, or one sampled run per ``Sampling``; each batch of views samples with
a seed of its own (from the run's seed and its first item), so DDP shards draw exactly
what one process draws. Grading turns each answer into an option index (-1: none):
Matched-and-Dashed extracts a text by its rule hierarchy and matches it to an option;
a wrapper reads its strict and its normalised format.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from bytecanary import keys
from bytecanary.bytecodec import ByteCodec
from probes.engine import Sampling, generate
from probes.mcqa import wrappers
from probes.mcqa.dashed import Matcher, extract
from probes.mcqa.views import View


def generate_answers(
    model: Any,
    tokenizer: Any,
    views: Sequence[View],
    protocols: Sequence[str],
    samplings: Sequence[Sampling],
    max_new_tokens: int,
    batch_size: int,
    pad: int,
    n_ctx: int,
) -> np.ndarray:
    """(views, protocols, samplings) decoded text; "" where a view has no prompt (rotated
    views, items past the generative limit). ``views`` are this rank's, batch by batch."""
    codec = ByteCodec.from_tokenizer(tokenizer)
    keep = max(1, n_ctx - max_new_tokens) if n_ctx else None
    texts = np.full((len(views), len(protocols), len(samplings)), "", dtype=object)
    for s, sampling in enumerate(samplings):
        for vlo in range(0, len(views), batch_size):  # the view batches shard_indices dealt
            rows = range(vlo, min(vlo + batch_size, len(views)))
            batch = [(v, p) for v in rows for p in views[v].prompts]  # every protocol at once
            if not batch:
                continue
            first = views[batch[0][0]].item
            key = f"{sampling.seed}|{first.task}|{first.question}".encode()
            seeded = Sampling(sampling.temperature, sampling.top_k, seed=zlib.crc32(key))
            prompts = [views[v].prompts[p][-keep:] if keep else views[v].prompts[p] for v, p in batch]
            gen = generate(
                model,
                prompts,
                max_new_tokens,
                tokenizer.eos_token_id,
                pad,
                len(batch),
                seeded,
                score_prompt=False,
            )
            for row, (v, p) in enumerate(batch):
                ids = gen.tokens[row, : gen.lengths[row]].tolist()
                if ids and ids[-1] == tokenizer.eos_token_id:
                    ids = ids[:-1]
                texts[v, protocols.index(p), s] = codec.decode(ids).decode("utf-8", errors="replace")
    return texts


def grade(
    views: Sequence[View], texts: np.ndarray, protocols: Sequence[str], matcher: Matcher
) -> dict[str, np.ndarray]:
    """Per (view, sampling): the predicted option (-1: none) of every generative protocol
    (``<protocol>``), its normalised prediction (``/normalised``), the M&D rule that fired
    (``/rule``), and per view the prompt length in tokens (``/tokens``); ``text`` as given."""
    n, runs = len(views), texts.shape[2]
    graded: dict[str, np.ndarray] = {"text": texts}
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
        graded[p], graded[f"{p}/normalised"], graded[f"{p}/rule"] = pred, norm, rule
        graded[f"{p}/tokens"] = np.array([len(v.prompts.get(p, ())) for v in views])
    return graded
