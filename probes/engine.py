"""Batched decoding and teacher-forced likelihoods for the probes.

Prompts of different lengths are left-padded into one batch. GPT-2 uses absolute
positions, so position ids count real tokens only (padding does not shift them), and the
KV cache makes each new token one short forward pass. Gold continuations ride along in
the prefill, which runs once per distinct ``prompt + gold`` sequence: the k-byte prompts
of one character all share the character's full sequence. A batch therefore yields the
greedy (or sampled) continuation and the log-probability of every generated, prompt and
gold token from one prefill and one pass per new token. Results equal
``model.generate`` run on each prompt alone (a test checks this).

Shape suffixes: B samples of a batch, U the distinct ``prompt + gold`` sequences among
them (one prefill row each; ``seq_B`` maps a sample to its row), T time (tokens),
V vocabulary, 1 an axis of length one.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from transformers.cache_utils import Cache, StaticCache


@dataclass(frozen=True)
class Sampling:
    """Decoding: greedy unless ``temperature`` > 0."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0


@dataclass
class Generation:
    """Continuations of N prompts; rows end with eos or run ``max_new_tokens``."""

    tokens: np.ndarray  # (N, T) generated ids, ``pad_id`` after the end
    lengths: np.ndarray  # (N,) generated tokens, eos included
    logprobs: np.ndarray  # (N, T) log p of each generated token, 0 after the end
    prompt_logprob: np.ndarray  # (N,) sum of log p of prompt tokens 2..n given the ones before
    prompt_scored: np.ndarray  # (N,) how many prompt tokens that sum covers (n - 1)
    gold_logprob: np.ndarray  # (N,) teacher-forced log p(gold | prompt); nan without gold


def left_pad(rows: Sequence[Sequence[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, rows))
    ids_BT = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask_BT = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids_BT[i, width - len(row) :] = torch.tensor(row, dtype=torch.long)
        mask_BT[i, width - len(row) :] = 1
    return ids_BT.to(device), mask_BT.to(device)


def positions(mask_BT: torch.Tensor) -> torch.Tensor:
    return (mask_BT.cumsum(-1) - 1).clamp(min=0)


def cache_kwarg(model: torch.nn.Module) -> str:
    """transformers 5.x calls the KV cache ``cache``; earlier versions ``past_key_values``."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def cache_of(out) -> object:
    return out.cache if "cache" in out else out.past_key_values


def per_sample_cache(model: torch.nn.Module, cache: Cache, rows_B: torch.Tensor, length: int) -> StaticCache:
    """Row ``rows_B[b]`` of ``cache`` for each sample b, in a cache preallocated to ``length``
    columns: decoding then writes each new token in place, where a growing cache would
    reallocate every layer at every step (and fragment the heap into a higher peak)."""
    static = StaticCache(config=model.config, max_cache_len=length)
    for mine, theirs in zip(static.layers, cache.layers, strict=True):
        mine.update(theirs.keys[rows_B], theirs.values[rows_B])  # allocates, then copies the prefix
        theirs.keys = theirs.values = None  # freed layer by layer
    return static


def _pick(logits_BV: torch.Tensor, sampling: Sampling, gen: torch.Generator | None) -> torch.Tensor:
    if sampling.temperature <= 0:
        return logits_BV.argmax(-1)
    logits_BV = logits_BV / sampling.temperature
    if sampling.top_k > 0:
        kth = torch.topk(logits_BV, min(sampling.top_k, logits_BV.shape[-1])).values[:, -1:]
        logits_BV = logits_BV.masked_fill(logits_BV < kth, float("-inf"))
    if sampling.top_p < 1.0:
        sorted_BV, order_BV = logits_BV.sort(-1, descending=True)
        cum_BV = sorted_BV.softmax(-1).cumsum(-1)
        drop_BV = cum_BV - sorted_BV.softmax(-1) > sampling.top_p  # keep the token that crosses p
        sorted_BV = sorted_BV.masked_fill(drop_BV, float("-inf"))
        logits_BV = torch.full_like(logits_BV, float("-inf")).scatter(-1, order_BV, sorted_BV)
    probs_BV = logits_BV.softmax(-1)
    return torch.multinomial(probs_BV.cpu(), 1, generator=gen).squeeze(-1).to(logits_BV.device)


@dataclass
class _Prefill:
    """A batch after its prefill: what decoding starts from, and the prompt and gold scores."""

    logits_BV: torch.Tensor  # at each prompt's last token
    cache: object  # one row per sample
    mask_BT: torch.Tensor  # each sample's prompt columns
    pos_B1: torch.Tensor  # each sample's last prompt position
    prompt_logprob: np.ndarray
    gold_logprob: np.ndarray


def _prefill(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    golds: Sequence[Sequence[int]],
    pad_id: int,
    last_only: bool,
    room: int,
) -> _Prefill:
    """One forward pass over the batch's distinct ``prompt + gold`` sequences, then the
    cache copied to one row per sample (with ``room`` columns for decoding) and its gold
    columns masked out."""
    device = next(model.parameters()).device
    fulls: dict[tuple[int, ...], int] = {}
    seq_B = torch.tensor(
        [fulls.setdefault((*p, *g), len(fulls)) for p, g in zip(prompts, golds, strict=True)], device=device
    )
    ids_UT, mask_UT = left_pad(list(fulls), pad_id, device)
    out = model(
        input_ids=ids_UT,
        attention_mask=mask_UT,
        position_ids=positions(mask_UT),
        use_cache=True,
        **({"logits_to_keep": 1} if last_only else {}),
    )
    width = ids_UT.shape[1]
    start_B = width - mask_UT.sum(-1)[seq_B]  # first real column of each sample's row
    plen_B = torch.tensor([len(p) for p in prompts], device=device)
    end_B = start_B + plen_B - 1  # the prompt's last column
    gold_lp = np.full(len(prompts), np.nan)
    if last_only:  # no golds: every prompt ends at the last column
        logits_BV = out.logits[:, -1].float()[seq_B]
        prompt_lp = np.full(len(prompts), np.nan)
    else:
        logits_UTV = out.logits.float()
        lp_UT = logits_UTV[:, :-1].gather(-1, ids_UT[:, 1:, None]).squeeze(-1) - logits_UTV[:, :-1].logsumexp(
            -1
        )
        cum_UT = torch.nn.functional.pad(lp_UT.cumsum(-1), (1, 0))  # cum[:, j] = sum of lp[:, :j]
        prompt_lp = (cum_UT[seq_B, end_B] - cum_UT[seq_B, start_B]).cpu().numpy()
        has_gold = np.array([bool(g) for g in golds])
        gold_lp = np.where(has_gold, (cum_UT[seq_B, width - 1] - cum_UT[seq_B, end_B]).cpu().numpy(), np.nan)
        logits_BV = logits_UTV[seq_B, end_B]
    cache = per_sample_cache(model, cache_of(out), seq_B, width + room)
    cols_T = torch.arange(width, device=device)
    mask_BT = ((cols_T >= start_B[:, None]) & (cols_T <= end_B[:, None])).long()
    return _Prefill(logits_BV, cache, mask_BT, (plen_B - 1)[:, None], prompt_lp, gold_lp)


def _decode(
    model: torch.nn.Module,
    pre: _Prefill,
    max_new_tokens: int,
    eos_id: int | None,
    pad_id: int,
    sampling: Sampling,
    gen: torch.Generator | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tokens, log-probs, lengths) of each sample, one short forward pass per new token."""
    logits_BV, cache, mask_BT, pos_B1 = pre.logits_BV, pre.cache, pre.mask_BT, pre.pos_B1
    n = len(logits_BV)
    tokens = np.full((n, max_new_tokens), pad_id, dtype=np.int64)
    logprobs = np.zeros((n, max_new_tokens))
    lengths = np.zeros(n, dtype=np.int64)
    done_B = torch.zeros(n, dtype=torch.bool, device=logits_BV.device)
    for t in range(max_new_tokens):
        next_B = _pick(logits_BV, sampling, gen)
        next_B = torch.where(done_B, torch.full_like(next_B, pad_id), next_B)
        lp_B = logits_BV.gather(-1, next_B[:, None]).squeeze(-1) - logits_BV.logsumexp(-1)
        tokens[:, t] = next_B.cpu().numpy()
        logprobs[:, t] = lp_B.masked_fill(done_B, 0.0).cpu().numpy()
        lengths += (~done_B).long().cpu().numpy()
        if eos_id is not None:
            done_B = done_B | (next_B == eos_id)
        if t == max_new_tokens - 1 or bool(done_B.all()):
            break
        mask_BT = torch.cat([mask_BT, torch.ones_like(mask_BT[:, :1])], dim=1)
        pos_B1 = pos_B1 + 1
        out = model(
            input_ids=next_B[:, None],
            attention_mask=mask_BT,
            position_ids=pos_B1,
            use_cache=True,
            **{cache_kwarg(model): cache},
        )
        logits_BV, cache = out.logits[:, -1].float(), cache_of(out)
    return tokens, logprobs, lengths


@torch.inference_mode()
def generate(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    eos_id: int | None,
    pad_id: int,
    batch_size: int = 64,
    sampling: Sampling = Sampling(),
    golds: Sequence[Sequence[int]] | None = None,
    score_prompt: bool = True,
) -> Generation:
    """Decode every prompt (batches of ``batch_size``, in the given order).

    ``golds`` (optional) are scored teacher-forced in the same prefill: the prefill runs
    once per distinct ``prompt + gold`` sequence in the batch (the prefixes of one
    character share it), log-probs of prompt and gold are sums over its columns, the
    first new token is read at the prompt's end, and each sample then decodes on its own
    copy of the cache with the gold columns masked out. Without golds and with
    ``score_prompt`` False, the LM head runs on the last column only (``prompt_logprob``
    is then nan): generation alone is a few times cheaper."""
    n = len(prompts)
    last_only = not score_prompt and golds is None
    golds = golds if golds is not None else [()] * n
    tokens = np.full((n, max_new_tokens), pad_id, dtype=np.int64)
    logprobs = np.zeros((n, max_new_tokens))
    lengths = np.zeros(n, dtype=np.int64)
    prompt_lp, gold_lp = np.zeros(n), np.full(n, np.nan)
    gen = torch.Generator().manual_seed(sampling.seed) if sampling.temperature > 0 else None
    for lo in range(0, n, batch_size):
        rows = slice(lo, min(lo + batch_size, n))
        pre = _prefill(model, prompts[rows], golds[rows], pad_id, last_only, max_new_tokens - 1)
        prompt_lp[rows], gold_lp[rows] = pre.prompt_logprob, pre.gold_logprob
        tokens[rows], logprobs[rows], lengths[rows] = _decode(
            model, pre, max_new_tokens, eos_id, pad_id, sampling, gen
        )
        del pre  # this batch's cache must not sit beside the next one's
    prompt_scored = np.array([max(len(p) - 1, 0) for p in prompts], dtype=np.int64)
    return Generation(tokens, lengths, logprobs, prompt_lp, prompt_scored, gold_lp)
