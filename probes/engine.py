"""Batched decoding and teacher-forced likelihoods for the probes.

Prompts of different lengths are left-padded into one batch. GPT-2 uses absolute
positions, so position ids count real tokens only (padding does not shift them), and the
KV cache makes each new token one short forward pass. A batch therefore yields the
greedy (or sampled) continuation, the log-probability of every generated token and of
every prompt token, from one prefill and one pass per new token. Gold continuations are
scored in one more pass over prompt + gold. Results equal ``model.generate`` run on each
prompt alone (a test checks this).

Shape suffixes: B batch, T time (tokens), V vocabulary.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch


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


def _left_pad(rows: Sequence[Sequence[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, rows))
    ids_BT = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask_BT = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        if row:
            ids_BT[i, width - len(row) :] = torch.tensor(row)
            mask_BT[i, width - len(row) :] = 1
    return ids_BT.to(device), mask_BT.to(device)


def _positions(mask_BT: torch.Tensor) -> torch.Tensor:
    return (mask_BT.cumsum(-1) - 1).clamp(min=0)


def _cache_kwarg(model: torch.nn.Module) -> str:
    """transformers 5.x calls the KV cache ``cache``; earlier versions ``past_key_values``."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _cache_of(out) -> object:
    return out.cache if "cache" in out else out.past_key_values


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


@torch.no_grad()
def generate(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    eos_id: int | None,
    pad_id: int,
    batch_size: int = 64,
    sampling: Sampling = Sampling(),
    progress: Callable[[int], None] | None = None,
) -> Generation:
    """Decode every prompt (batches of ``batch_size``, in the given order)."""
    device = next(model.parameters()).device
    n = len(prompts)
    tokens = np.full((n, max_new_tokens), pad_id, dtype=np.int64)
    logprobs = np.zeros((n, max_new_tokens))
    lengths = np.zeros(n, dtype=np.int64)
    prompt_lp = np.zeros(n)
    prompt_scored = np.zeros(n, dtype=np.int64)
    gen = torch.Generator().manual_seed(sampling.seed) if sampling.temperature > 0 else None
    for lo in range(0, n, batch_size):
        rows = prompts[lo : lo + batch_size]
        ids_BT, mask_BT = _left_pad(rows, pad_id, device)
        out = model(
            input_ids=ids_BT, attention_mask=mask_BT, position_ids=_positions(mask_BT), use_cache=True
        )
        lp_BTV = out.logits[:, :-1].float().log_softmax(-1)
        lp_BT = lp_BTV.gather(-1, ids_BT[:, 1:, None]).squeeze(-1)
        scored_BT = mask_BT[:, 1:] * mask_BT[:, :-1]
        prompt_lp[lo : lo + len(rows)] = (lp_BT * scored_BT).sum(-1).cpu().numpy()
        prompt_scored[lo : lo + len(rows)] = scored_BT.sum(-1).cpu().numpy()
        logits_BV, cache = out.logits[:, -1], _cache_of(out)
        done_B = torch.zeros(len(rows), dtype=torch.bool, device=device)
        pos_B1 = _positions(mask_BT)[:, -1:]
        for t in range(max_new_tokens):
            step_lp_BV = logits_BV.float().log_softmax(-1)
            next_B = _pick(logits_BV.float(), sampling, gen)
            next_B = torch.where(done_B, torch.full_like(next_B, pad_id), next_B)
            lp_B = step_lp_BV.gather(-1, next_B[:, None]).squeeze(-1).masked_fill(done_B, 0.0)
            tokens[lo : lo + len(rows), t] = next_B.cpu().numpy()
            logprobs[lo : lo + len(rows), t] = lp_B.cpu().numpy()
            lengths[lo : lo + len(rows)] += (~done_B).long().cpu().numpy()
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
                **{_cache_kwarg(model): cache},
            )
            logits_BV, cache = out.logits[:, -1], _cache_of(out)
        if progress:
            progress(len(rows))
    return Generation(tokens, lengths, logprobs, prompt_lp, prompt_scored)


@torch.no_grad()
def continuation_logprob(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    continuations: Sequence[Sequence[int]],
    pad_id: int,
    batch_size: int = 64,
) -> np.ndarray:
    """Teacher-forced sum of log p(continuation | prompt) for each pair (0 when empty)."""
    device = next(model.parameters()).device
    out = np.zeros(len(prompts))
    for lo in range(0, len(prompts), batch_size):
        pairs = list(zip(prompts[lo : lo + batch_size], continuations[lo : lo + batch_size], strict=True))
        ids_BT, mask_BT = _left_pad([[*p, *c] for p, c in pairs], pad_id, device)
        logits_BTV = model(input_ids=ids_BT, attention_mask=mask_BT, position_ids=_positions(mask_BT)).logits
        lp_BT = logits_BTV[:, :-1].float().log_softmax(-1).gather(-1, ids_BT[:, 1:, None]).squeeze(-1)
        width = ids_BT.shape[1]
        cont_BT = torch.zeros_like(lp_BT)
        for i, (_, c) in enumerate(pairs):
            if c:
                cont_BT[i, width - 1 - len(c) :] = 1  # targets at the last len(c) positions
        out[lo : lo + len(pairs)] = (lp_BT * cont_BT).sum(-1).cpu().numpy()
    return out
