"""Whether the engine's fast path decodes a model as the model's own forward does: by its
config (an attention window shorter than a row) and by measurement (the first batch's
log-probs against one plain forward per sequence)."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from bytecanary.io import warn_once
from bytecanary.probes.models import sliding_window

if TYPE_CHECKING:
    from bytecanary.probes.engine import Generation

# per model, for batches with golds and without: why the fast path does not fit (None: it does)
VERDICTS: weakref.WeakKeyDictionary[torch.nn.Module, dict[bool, str | None]] = weakref.WeakKeyDictionary()
_warn = warn_once()


def short_window(model: torch.nn.Module, columns: int) -> str | None:
    """The config field that keeps the fast path from attending as the model does on rows
    of ``columns`` columns (gold columns included): an attention window shorter than that."""
    window = sliding_window(model)
    if window is None or columns <= window:
        return None
    return f"sliding_window={window} is shorter than a prompt, its gold and its new tokens"


def _plain_logprobs(model: torch.nn.Module, ids: Sequence[int]) -> np.ndarray:
    """log p(ids[j] | ids[:j]) for j = 1..n-1, from one unpadded forward pass."""
    ids_1T = torch.tensor([list(ids)], device=next(model.parameters()).device)
    logits_TV = model(input_ids=ids_1T, use_cache=False).logits[0, :-1].float()
    lp_T = logits_TV.gather(-1, ids_1T[0, 1:, None]).squeeze(-1) - logits_TV.logsumexp(-1)
    return lp_T.double().cpu().numpy()


def fast_path_gap(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    golds: Sequence[Sequence[int]],
    batch: Generation,
) -> str | None:
    """Why the fast path does not compute what the model's own forward does (None: it does): a decoded
    batch's log-probs against one plain forward per sequence, for the samples likeliest to differ
    (the first, the most left-padded, the one with the longest gold masked out of its decoding)."""
    sizes = [len(p) + len(g) for p, g in zip(prompts, golds, strict=True)]
    picks = {0, int(np.argmin(sizes)), int(np.argmax([len(g) for g in golds]))}
    fp32 = next(model.parameters()).dtype.itemsize >= 4 and torch.get_float32_matmul_precision() == "highest"
    tolerance = 1e-3 if fp32 else 0.1  # nats a token, above what batching and padding round differently
    worst = 0.0
    for i in sorted(picks):
        p, g, n = list(prompts[i]), list(golds[i]), int(batch.lengths[i])
        lp = _plain_logprobs(model, p + batch.tokens[i, :n].tolist())
        pairs = [(batch.logprobs[i, :n].sum(), lp[len(p) - 1 :].sum(), n)]
        if not np.isnan(batch.prompt_logprob[i]):
            pairs.append((batch.prompt_logprob[i], lp[: len(p) - 1].sum(), len(p) - 1))
        if g:
            pairs.append((batch.gold_logprob[i], _plain_logprobs(model, p + g)[len(p) - 1 :].sum(), len(g)))
        worst = max(worst, *(abs(got - want) / max(k, 1) for got, want, k in pairs))
    if worst <= tolerance:
        return None
    return f"on its first batch the fast path's log-probs differed from its forward's by {worst:.2g} a token"


def say_own(model: torch.nn.Module, why: str) -> None:
    """Said once per model class and reason: the own path is correct, but slower."""
    _warn(f"the probes decode {type(model).__name__} through its own forward and cache, slower ({why})")
