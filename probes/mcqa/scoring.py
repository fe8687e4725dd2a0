"""Log-likelihood of several continuations that share one prompt, in one pass per batch: a 4D
mask lets each continuation see only the prompt and itself, so an item costs P + sum(C - 1)
tokens instead of lm-eval's sum(P + C - 1) (docs/mcqa-probes.md#scoring).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from bytecanary.io import warn_once
from bytecanary.probes import batching
from bytecanary.probes.models import sliding_window, takes_positions


@dataclass
class _Row:
    """One item laid out as a row: ids, positions, and which block each column is in
    (0: the prompt, k + 1: continuation k); ``reads`` pairs each scored token with the
    column whose logits predict it, ``owner`` names its continuation."""

    ids: list[int]
    pos: list[int]
    block: list[int]
    reads: list[tuple[int, int]]  # (column, target id)
    owner: list[int]


def _row(prompt: Sequence[int], continuations: Sequence[Sequence[int]]) -> _Row:
    n = len(prompt)
    row = _Row(list(prompt), list(range(n)), [0] * n, [], [])
    for k, cont in enumerate(continuations):
        before = n - 1  # the column whose logits predict the next token of this continuation
        for j, token in enumerate(cont):
            row.reads.append((before, int(token)))
            row.owner.append(k)
            if j < len(cont) - 1:  # the last token is only predicted, never fed
                row.ids.append(int(token))
                row.pos.append(n + j)
                row.block.append(k + 1)
                before = len(row.ids) - 1
    return row


def _mask(rows: list[_Row], width: int, dtype: torch.dtype, device) -> torch.Tensor:
    """(B, 1, T, T) additive mask: a column sees earlier columns of the prompt and of its own
    block; padding sees only itself, so no softmax row is empty."""
    block_BT = torch.full((len(rows), width), -1, dtype=torch.long)
    for b, r in enumerate(rows):
        block_BT[b, : len(r.block)] = torch.tensor(r.block)
    block_BT = block_BT.to(device)
    cols_T = torch.arange(width, device=device)
    causal_TT = cols_T[None, :] <= cols_T[:, None]
    key_BT = block_BT[:, None, :]
    visible_BTT = causal_TT & (key_BT >= 0) & ((key_BT == 0) | (key_BT == block_BT[:, :, None]))
    visible_BTT |= torch.eye(width, dtype=torch.bool, device=device)
    return torch.zeros(visible_BTT.shape, dtype=dtype, device=device).masked_fill(
        ~visible_BTT, torch.finfo(dtype).min
    )[:, None]


def _score_batch(model: torch.nn.Module, rows: list[_Row], pad_id: int) -> list[np.ndarray]:
    param = next(model.parameters())
    width = max(len(r.ids) for r in rows)
    ids_BT = torch.full((len(rows), width), pad_id, dtype=torch.long)
    pos_BT = torch.zeros((len(rows), width), dtype=torch.long)
    for b, r in enumerate(rows):
        ids_BT[b, : len(r.ids)] = torch.tensor(r.ids)
        pos_BT[b, : len(r.pos)] = torch.tensor(r.pos)
    hidden_BTD = model.base_model(
        input_ids=ids_BT.to(param.device),
        attention_mask=_mask(rows, width, param.dtype, param.device),
        position_ids=pos_BT.to(param.device),
        use_cache=False,
    ).last_hidden_state
    row_S = torch.tensor([b for b, r in enumerate(rows) for _ in r.reads], device=param.device)
    col_S = torch.tensor([c for r in rows for c, _ in r.reads], device=param.device)
    tgt_S = torch.tensor([t for r in rows for _, t in r.reads], device=param.device)
    logits_SV = model.get_output_embeddings()(hidden_BTD[row_S, col_S]).float()
    lp_S = (logits_SV.gather(-1, tgt_S[:, None]).squeeze(-1) - logits_SV.logsumexp(-1)).double().cpu().numpy()
    out, start = [], 0
    for r in rows:
        totals = np.zeros(max(r.owner) + 1)
        np.add.at(totals, r.owner, lp_S[start : start + len(r.reads)])
        out.append(totals)
        start += len(r.reads)
    return out


LOGIT_FIELDS = ("final_logit_softcapping", "logit_scale", "logits_scaling")  # applied after the head
_warn = warn_once()


def own_forward_reasons(model: torch.nn.Module, longest: int) -> list[str]:
    """The config fields that make the fast path differ from the model's own forward on rows
    of up to ``longest`` tokens: logits post-processed after the head, an attention window
    shorter than a row, positions the forward does not take."""
    cfg = model.config.get_text_config()
    reasons = [
        f"{name}={value}"
        for name in LOGIT_FIELDS
        if (value := getattr(cfg, name, None)) is not None and not (name == "logits_scaling" and value == 1)
    ]
    window = sliding_window(model)
    if window is not None and longest > window:
        reasons.append(f"sliding_window={window} (rows of up to {longest} tokens)")
    if not takes_positions(model):
        reasons.append("no position_ids in its forward (ALiBi: positions from the attention mask)")
    return reasons


def _score_own_forward(
    model: torch.nn.Module, prompt: Sequence[int], continuations: Sequence[Sequence[int]], pad_id: int
) -> np.ndarray:
    """Each continuation's log p after ``prompt`` from the model's own forward (its window,
    its logit processing), the continuations of one prompt right-padded in one batch."""
    param = next(model.parameters())
    rows = [list(prompt) + list(c[:-1]) for c in continuations]
    width = max(map(len, rows))
    ids_BT = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask_BT = torch.zeros((len(rows), width), dtype=torch.long)
    for b, r in enumerate(rows):
        ids_BT[b, : len(r)], mask_BT[b, : len(r)] = torch.tensor(r), 1
    logits_BTV = model(input_ids=ids_BT.to(param.device), attention_mask=mask_BT.to(param.device)).logits
    lp_BTV = logits_BTV.float().log_softmax(-1).double().cpu()
    n = len(prompt)
    return np.array(
        [sum(float(lp_BTV[b, n - 1 + j, t]) for j, t in enumerate(c)) for b, c in enumerate(continuations)]
    )


@torch.inference_mode()
def score_continuations(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    continuations: Sequence[Sequence[Sequence[int]]],
    pad_id: int,
    batch_size: int = 32,
) -> list[np.ndarray]:
    """For prompt i, the summed log p(continuation | prompt) of each of its continuations
    (every continuation at least one token)."""
    longest = max(
        (len(p) + len(c) - 1 for p, cs in zip(prompts, continuations, strict=True) for c in cs), default=0
    )
    reasons = own_forward_reasons(model, longest)
    if reasons:
        why = ", ".join(reasons)
        _warn(f"MCQA scores {type(model).__name__} through its own forward, a pass per prompt ({why})")
        return [
            _score_own_forward(model, p, cs, pad_id) for p, cs in zip(prompts, continuations, strict=True)
        ]
    rows = [_row(p, c) for p, c in zip(prompts, continuations, strict=True)]
    out: list[np.ndarray] = [np.empty(0)] * len(rows)

    def step(lo: int, hi: int) -> None:
        out[lo:hi] = _score_batch(model, rows[lo:hi], pad_id)

    # batches cut as given (a DDP shard's are the same), the costliest first
    costs = [len(row.ids) for row in rows]
    batching.each(len(rows), batch_size, step, costs)
    return out
