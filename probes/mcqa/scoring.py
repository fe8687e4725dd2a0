"""Log-likelihood of several continuations that share one prompt, batched.

Each prompt is run once; its KV cache is copied to one row per continuation, and all
continuations of a batch are scored in one more pass, right-padded, with position ids
that continue the prompt's. Single-token continuations (letters) need no second pass:
their log-probabilities come from the prompt's last logits. A test checks the results
against one unbatched forward pass per (prompt, continuation).

Shape suffixes: B prompts, R rows (one per (prompt, continuation); ``prompt_R`` is each
row's prompt), T time, V vocabulary.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import numpy as np
import torch

from probes.engine import cache_kwarg, cache_of, left_pad, positions


@torch.inference_mode()
def score_continuations(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    continuations: Sequence[Sequence[Sequence[int]]],
    pad_id: int,
    batch_size: int = 32,
) -> list[np.ndarray]:
    """For prompt i, the summed log p(continuation | prompt) of each of its continuations."""
    device = next(model.parameters()).device
    out: list[np.ndarray] = []
    for lo in range(0, len(prompts), batch_size):
        batch_prompts = prompts[lo : lo + batch_size]
        batch_conts = continuations[lo : lo + batch_size]
        ids_BT, mask_BT = left_pad(batch_prompts, pad_id, device)
        pos_BT = positions(mask_BT)
        # only the last position's logits are needed: skip the rest of the LM head where supported
        keep = (
            {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}
        )
        res = model(input_ids=ids_BT, attention_mask=mask_BT, position_ids=pos_BT, use_cache=True, **keep)
        last_lp_BV = res.logits[:, -1].float().log_softmax(-1)
        rows = [list(c) for conts in batch_conts for c in conts]
        prompt_R = torch.tensor([b for b, conts in enumerate(batch_conts) for _ in conts], device=device)
        first_R = torch.tensor([c[0] for c in rows], device=device)
        total_R = last_lp_BV[prompt_R, first_R]
        longest = max(len(c) for c in rows)
        if longest > 1:  # the rest of each continuation, all rows in one pass on copied caches
            cache = cache_of(res)
            cache.batch_select_indices(prompt_R)
            width = longest - 1
            inp_RT = torch.full((len(rows), width), pad_id, dtype=torch.long, device=device)
            real_RT = torch.zeros((len(rows), width), dtype=torch.long, device=device)
            for r, c in enumerate(rows):
                inp_RT[r, : len(c) - 1] = torch.tensor(c[:-1], device=device)
                real_RT[r, : len(c) - 1] = 1
            mask_RT = torch.cat([mask_BT[prompt_R], torch.ones_like(real_RT)], dim=1)
            pos_RT = pos_BT[prompt_R, -1:] + 1 + torch.arange(width, device=device)
            pos_RT = torch.where(real_RT.bool(), pos_RT, pos_BT[prompt_R, -1:])  # padding stays in range
            res = model(
                input_ids=inp_RT,
                attention_mask=mask_RT,
                position_ids=pos_RT,
                use_cache=True,
                **{cache_kwarg(model): cache},
            )
            tgt_RT = torch.full_like(inp_RT, 0)
            for r, c in enumerate(rows):
                tgt_RT[r, : len(c) - 1] = torch.tensor(c[1:], device=device)
            lp_RT = res.logits.float().log_softmax(-1).gather(-1, tgt_RT[..., None]).squeeze(-1)
            total_R = total_R + (lp_RT * real_RT).sum(-1)
        totals = total_R.cpu().numpy()
        start = 0
        for conts in batch_conts:
            out.append(totals[start : start + len(conts)].astype(np.float64))
            start += len(conts)
    return out
