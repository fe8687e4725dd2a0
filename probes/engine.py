"""Batched decoding and teacher-forced likelihoods for the probes, equal to ``model.generate`` on each
prompt alone (docs/utf8-probes.md, "The engine"). Shape suffixes: B samples of a batch, U distinct
``prompt + gold`` sequences (``seq_B`` maps a sample to its row), T tokens, V vocabulary, 1 length one.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from transformers.cache_utils import Cache, StaticCache

from bytecanary.bytecodec import ByteCodec
from bytecanary.probes import batching
from bytecanary.probes.fastpath import VERDICTS, fast_path_gap, say_own, short_window
from bytecanary.probes.stops import StopStrings
from bytecanary.versions import TRANSFORMERS, require, require_attrs

_WHY = "the probes' KV-cache copy into StaticCache layers"


@dataclass(frozen=True)
class Sampling:
    """Decoding: greedy unless ``temperature`` > 0."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0


@dataclass(frozen=True)
class Decoding:
    """How ``generate`` decodes: how far, which ids end and pad a row, in which batches,
    greedy or sampled."""

    max_new_tokens: int
    eos_id: int | None  # a row ends when it generates this id (None: only at the length)
    pad_id: int  # fills prompts on the left and rows after their end
    batch_size: int = 64  # prompts per prefill, cut in the given order
    sampling: Sampling = Sampling()


@dataclass
class Generation:
    """Continuations of N prompts; rows end with eos, a stop string, or run ``max_new_tokens``."""

    tokens: np.ndarray  # (N, T) generated ids, ``pad_id`` after the end
    lengths: np.ndarray  # (N,) generated tokens, eos (or the stop string's last token) included
    logprobs: np.ndarray  # (N, T) log p of each generated token, 0 after the end
    prompt_logprob: np.ndarray  # (N,) sum of log p of prompt tokens 2..n given the ones before
    prompt_scored: np.ndarray  # (N,) how many prompt tokens that sum covers (n - 1)
    gold_logprob: np.ndarray  # (N,) teacher-forced log p(gold | prompt); nan without gold
    mass: np.ndarray | None = None
    """(N, T, M) probability mass of each of M token classes at each step (``generate``'s
    ``classes``), garbage after the row's end; None without classes."""

    @classmethod
    def empty(
        cls, prompts: Sequence[Sequence[int]], max_new_tokens: int, pad_id: int, classes: np.ndarray | None
    ) -> Generation:
        """Nothing generated yet: what ``generate`` fills in, batch by batch."""
        n = len(prompts)
        return cls(
            np.full((n, max_new_tokens), pad_id, dtype=np.int64),
            np.zeros(n, dtype=np.int64),
            np.zeros((n, max_new_tokens)),
            np.zeros(n),
            np.array([max(len(p) - 1, 0) for p in prompts], dtype=np.int64),
            np.full(n, np.nan),
            np.zeros((n, max_new_tokens, classes.shape[1])) if classes is not None else None,
        )

    def rows(self, lo: int, hi: int) -> Generation:
        """Rows ``lo:hi`` (views, not copies): one batch of a generation being filled in."""
        mass = self.mass[lo:hi] if self.mass is not None else None
        fields = (self.tokens, self.lengths, self.logprobs, self.prompt_logprob, self.prompt_scored)
        return Generation(*(f[lo:hi] for f in fields), self.gold_logprob[lo:hi], mass)


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
    """The forward argument of the KV cache: ``cache`` in the transformers 5.x releases we run,
    ``past_key_values`` in 5.0."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def cache_of(out) -> object:
    return out.cache if "cache" in out else out.past_key_values


def per_sample_cache(model: torch.nn.Module, cache: Cache, rows_B: torch.Tensor, length: int) -> StaticCache:
    """Row ``rows_B[b]`` of ``cache`` for each sample b, in a cache preallocated to ``length`` columns, so
    decoding writes in place instead of reallocating every layer at every step; transformers has no public
    call for this, so it works on the layers (checked against the tested version at first use)."""
    _require_transformers()
    static = StaticCache(config=model.config, max_cache_len=length)
    _require_layers(static, cache)
    for mine, theirs in zip(static.layers, cache.layers, strict=True):
        mine.update(theirs.keys[rows_B], theirs.values[rows_B])  # allocates, then copies the prefix
        theirs.keys = theirs.values = None  # freed layer by layer
    return static


@functools.cache
def _require_transformers() -> None:
    """The version check of ``per_sample_cache``, once per process (a failure is not cached)."""
    require("transformers", TRANSFORMERS, _WHY)


def _require_layers(*caches: Cache) -> None:
    """A one-line error, not an AttributeError, where a release moved what ``per_sample_cache`` uses."""
    for cache in caches:
        require_attrs(cache, ("layers",), "transformers", TRANSFORMERS, _WHY)
        for layer in cache.layers[:1]:
            require_attrs(layer, ("keys", "values", "update"), "transformers", TRANSFORMERS, _WHY)


def _pick(
    logits_BV: torch.Tensor, sampling: Sampling, gen: torch.Generator | None, rows: np.ndarray, n: int
) -> torch.Tensor:
    """Greedy or sampled next tokens of the live rows (samples ``rows`` of ``n``). A sampled
    step draws over all n samples, finished ones included, so dropping finished rows from
    the batch never changes another row's draw."""
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
    probs_BV = logits_BV.softmax(-1).cpu()
    live = torch.from_numpy(rows)
    probs_NV = torch.ones(n, probs_BV.shape[-1], dtype=probs_BV.dtype)  # finished rows: any distribution
    probs_NV[live] = probs_BV
    return torch.multinomial(probs_NV, 1, generator=gen).squeeze(-1)[live].to(logits_BV.device)


@dataclass
class _Prefill:
    """A batch after its prefill: what decoding starts from, and the prompt and gold scores."""

    logits_BV: torch.Tensor  # at each prompt's last token
    cache: Cache  # one row per sample
    mask_BT: torch.Tensor  # each sample's prompt columns, then a zero column per token to come
    width: int  # the columns the prefill filled: decoding writes from there
    static: bool  # the cache holds every column from the start (else it grows, and the mask with it)
    pos_B1: torch.Tensor  # each sample's last prompt position
    prompt_logprob: np.ndarray
    gold_logprob: np.ndarray


@dataclass
class _Forward:
    """One forward pass over the distinct sequences of a batch, left-padded."""

    out: object
    ids_UT: torch.Tensor
    seq_B: torch.Tensor  # each sample's row
    start_B: torch.Tensor  # the first real column of each sample's row


def _forward(
    model: torch.nn.Module, rows: Sequence[Sequence[int]], pad_id: int, last_only: bool, use_cache: bool
) -> _Forward:
    """Each distinct row once: the k-byte prompts of one character share their full sequence."""
    device = next(model.parameters()).device
    distinct: dict[tuple[int, ...], int] = {}
    seq_B = torch.tensor([distinct.setdefault(tuple(r), len(distinct)) for r in rows], device=device)
    ids_UT, mask_UT = left_pad(list(distinct), pad_id, device)
    out = model(
        input_ids=ids_UT,
        attention_mask=mask_UT,
        position_ids=positions(mask_UT),
        use_cache=use_cache,
        **({"logits_to_keep": 1} if last_only else {}),
    )
    return _Forward(out, ids_UT, seq_B, ids_UT.shape[1] - mask_UT.sum(-1)[seq_B])


def _prefill(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    golds: Sequence[Sequence[int]],
    pad_id: int,
    last_only: bool,
    room: int,
    own: bool = False,
) -> _Prefill:
    """One forward pass over the batch's distinct ``prompt + gold`` sequences, its cache copied to one row
    per sample (``room`` columns to decode into) with the gold columns masked out; ``own``: the model's
    own cache, filled by a pass over the prompts alone, as ``model.generate`` fills it."""
    device = next(model.parameters()).device
    plen_B = torch.tensor([len(p) for p in prompts], device=device)
    split = own and any(golds)  # the model's own window counts a gold's masked columns
    fwd = _forward(
        model, [(*p, *g) for p, g in zip(prompts, golds, strict=True)], pad_id, last_only, not split
    )
    seq_B, width = fwd.seq_B, fwd.ids_UT.shape[1]
    end_B = fwd.start_B + plen_B - 1  # the prompt's last column
    gold_lp = np.full(len(prompts), np.nan)
    if last_only:  # no golds: every prompt ends at the last column
        logits_BV = fwd.out.logits[:, -1].float()[seq_B]
        prompt_lp = np.full(len(prompts), np.nan)
    else:
        logits_UTV = fwd.out.logits.float()
        ids_UT = fwd.ids_UT
        lp_UT = logits_UTV[:, :-1].gather(-1, ids_UT[:, 1:, None]).squeeze(-1) - logits_UTV[:, :-1].logsumexp(
            -1
        )
        cum_UT = torch.nn.functional.pad(lp_UT.cumsum(-1), (1, 0))  # cum[:, j] = sum of lp[:, :j]
        prompt_lp = (cum_UT[seq_B, end_B] - cum_UT[seq_B, fwd.start_B]).cpu().numpy()
        has_gold = np.array([bool(g) for g in golds])
        gold_lp = np.where(has_gold, (cum_UT[seq_B, width - 1] - cum_UT[seq_B, end_B]).cpu().numpy(), np.nan)
        logits_BV = logits_UTV[seq_B, end_B]
    if split:
        fwd = _forward(model, prompts, pad_id, True, True)
        seq_B, width = fwd.seq_B, fwd.ids_UT.shape[1]
        end_B = torch.full_like(end_B, width - 1)
        logits_BV = fwd.out.logits[:, -1].float()[seq_B]
    if own:
        cache = cache_of(fwd.out)
        cache.reorder_cache(seq_B)  # one row per sample
    else:
        cache = per_sample_cache(model, cache_of(fwd.out), seq_B, width + room)
    cols_T = torch.arange(width + room, device=device)
    mask_BT = ((cols_T >= fwd.start_B[:, None]) & (cols_T <= end_B[:, None])).long()
    return _Prefill(logits_BV, cache, mask_BT, width, not own, (plen_B - 1)[:, None], prompt_lp, gold_lp)


def _ended(
    next_ids: np.ndarray, done: np.ndarray, rows: np.ndarray, eos_id: int | None, stops: StopStrings | None
) -> np.ndarray:
    """Which live rows end with their new token: eos, or the last token of a stop string."""
    live = ~done
    ended = live & (next_ids == eos_id) if eos_id is not None else np.zeros(len(done), dtype=bool)
    if stops is not None:
        ended[live] |= stops.hit(rows[live], next_ids[live])
    return ended


def _decode(
    model: torch.nn.Module,
    pre: _Prefill,
    decoding: Decoding,
    gen: torch.Generator | None,
    stops: StopStrings | None,
    classes_VM: torch.Tensor | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """(tokens, log-probs, lengths, class masses) of each sample: one short forward and one host sync a
    step (eos and stop strings are read there); finished rows leave the batch and the cache once a
    quarter of the live rows have."""
    logits_BV, cache, mask_BT, pos_B1, cols = pre.logits_BV, pre.cache, pre.mask_BT, pre.pos_B1, pre.width
    max_new_tokens, pad_id = decoding.max_new_tokens, decoding.pad_id
    n, device = len(logits_BV), logits_BV.device
    tokens_NT = torch.full((n, max_new_tokens), pad_id, dtype=torch.long, device=device)
    logprobs_NT = torch.zeros((n, max_new_tokens), device=device)
    width = classes_VM.shape[1] if classes_VM is not None else 0
    mass_NTM = torch.zeros((n, max_new_tokens, width), device=device)
    lengths = np.full(n, max_new_tokens, dtype=np.int64)
    rows, rows_B = np.arange(n), torch.arange(n, device=device)  # the sample of each live row
    done, done_B = np.zeros(n, dtype=bool), torch.zeros(n, dtype=torch.bool, device=device)
    cache_key = cache_kwarg(model)
    for t in range(max_new_tokens):
        next_B = _pick(logits_BV, decoding.sampling, gen, rows, n).masked_fill(done_B, pad_id)
        logz_B = logits_BV.logsumexp(-1)
        lp_B = logits_BV.gather(-1, next_B[:, None]).squeeze(-1) - logz_B
        if classes_VM is not None:  # the distribution's mass on each class of tokens
            mass_NTM[rows_B, t] = (logits_BV - logz_B[:, None]).exp() @ classes_VM
        tokens_NT[rows_B, t] = next_B
        logprobs_NT[rows_B, t] = lp_B.masked_fill(done_B, 0.0)
        next_ids = next_B.cpu().numpy()  # the step's one sync
        ended = _ended(next_ids, done, rows, decoding.eos_id, stops)
        lengths[rows[ended]] = t + 1
        done |= ended
        if t == max_new_tokens - 1 or done.all():
            break
        if ended.any():
            if 4 * done.sum() >= len(done):  # drop the finished rows
                keep = np.flatnonzero(~done)
                keep_B = torch.from_numpy(keep).to(device)
                next_B, mask_BT, pos_B1, rows_B = (x[keep_B] for x in (next_B, mask_BT, pos_B1, rows_B))
                cache.reorder_cache(keep_B)  # index_select of every layer's keys and values
                rows, done = rows[keep], done[keep]
            done_B = torch.tensor(done, device=device)
        mask_BT[:, cols] = 1
        cols += 1
        pos_B1 = pos_B1 + 1
        out = model(
            input_ids=next_B[:, None],
            # a static cache's mask spans it whole (ALiBi reads its width as the cache's), a growing one's
            # as far as it goes
            attention_mask=mask_BT if pre.static else mask_BT[:, :cols],
            position_ids=pos_B1,
            use_cache=True,
            **{cache_key: cache},
        )
        logits_BV, cache = out.logits[:, -1].float(), cache_of(out)
    mass = mass_NTM.cpu().numpy().astype(np.float64) if classes_VM is not None else None
    return tokens_NT.cpu().numpy(), logprobs_NT.cpu().numpy().astype(np.float64), lengths, mass


@torch.inference_mode()
def generate(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    decoding: Decoding,
    golds: Sequence[Sequence[int]] | None = None,
    score_prompt: bool = True,
    stops: Sequence[Sequence[bytes]] | None = None,
    codec: ByteCodec | None = None,
    classes: np.ndarray | None = None,
) -> Generation:
    """Decode every prompt in batches of ``decoding.batch_size``, costliest first unless sampled, ``golds``
    scored teacher-forced in the same prefill; ``stops``: each prompt's stop strings as UTF-8 bytes (read with
    ``codec``); ``classes`` ((V, M) of 0/1): the mass on each of M token classes at every step."""
    if stops is not None and codec is None:
        raise ValueError("stop strings need the tokenizer's codec to read the generated bytes")
    n, max_new_tokens, pad_id = len(prompts), decoding.max_new_tokens, decoding.pad_id
    sampling = decoding.sampling
    last_only = not score_prompt and golds is None  # the LM head on the last column only: prompt_logprob nan
    golds = golds if golds is not None else [()] * n
    gen = torch.Generator().manual_seed(sampling.seed) if sampling.temperature > 0 else None
    device = next(model.parameters()).device
    classes_VM = torch.as_tensor(classes, dtype=torch.float32, device=device) if classes is not None else None
    out = Generation.empty(prompts, max_new_tokens, pad_id, classes)
    costs = [len(p) + len(g) + max_new_tokens for p, g in zip(prompts, golds, strict=True)]
    verdicts = VERDICTS.setdefault(model, {})
    why = short_window(model, max(costs, default=0) - 1) or verdicts.get(any(golds))  # the widest row

    def run(lo: int, hi: int) -> None:
        if gen is not None and lo == 0:  # a retry at a smaller size draws as if it had started so
            gen.manual_seed(sampling.seed)
        rows, batch = slice(lo, hi), out.rows(lo, hi)
        own = why is not None
        pre = _prefill(model, prompts[rows], golds[rows], pad_id, last_only, max_new_tokens - 1, own)
        batch.prompt_logprob[:], batch.gold_logprob[:] = pre.prompt_logprob, pre.gold_logprob
        watch = StopStrings(stops[rows], codec) if stops is not None else None
        batch.tokens[:], batch.logprobs[:], batch.lengths[:], mass = _decode(
            model, pre, decoding, gen, watch, classes_VM
        )
        if batch.mass is not None:
            batch.mass[:] = mass
        del pre  # this batch's cache must not sit beside the next one's

    def step(lo: int, hi: int) -> None:
        nonlocal why
        run(lo, hi)
        masked = any(golds[lo:hi])
        if why is None and masked not in verdicts:  # the first batch this model decodes so
            why = fast_path_gap(model, prompts[lo:hi], golds[lo:hi], out.rows(lo, hi))
            verdicts[masked] = why
            if why is not None:
                say_own(model, why)
                run(lo, hi)

    if why is not None:
        say_own(model, why)
    batching.each(n, decoding.batch_size, step, costs if gen is None else None)  # sampled: draws in order
    return out
