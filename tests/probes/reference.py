"""A deliberately plain Level 0 / Level 1 implementation, to check the fast engine.

One prompt at a time: ``model.generate`` without padding, a fresh forward pass for every
likelihood, and every prefix re-decoded from scratch by a per-byte Python DFA written
straight from Unicode Table 3-7. The tests require the engine's metrics to equal these.
"""

from __future__ import annotations

import codecs
import functools
import math
import statistics
from collections.abc import Callable

import numpy as np
import torch

from bytecanary.probes.utf8_probe import Prepared, Utf8Sample, fit_context

from .conftest import assert_no_near_tie

# lead byte -> (bytes needed, allowed range of the second byte)
_SECOND = {0xE0: (0xA0, 0xBF), 0xED: (0x80, 0x9F), 0xF0: (0x90, 0xBF), 0xF4: (0x80, 0x8F)}


def _need(lead: int) -> int:
    if 0xC2 <= lead <= 0xDF:
        return 2
    if 0xE0 <= lead <= 0xEF:
        return 3
    if 0xF0 <= lead <= 0xF4:
        return 4
    return 0  # ASCII is handled apart; 0 means "never a lead"


def py_scan(data: bytes) -> tuple[int, int, int, bool]:
    """(bytes in complete valid characters, trailing valid-prefix bytes, bytes that
    character needs, ends right after a complete character)."""
    i = complete = 0
    at_char_end = True
    while i < len(data):
        lead = data[i]
        if lead < 0x80:
            complete, i, at_char_end = complete + 1, i + 1, True
            continue
        need = _need(lead)
        if not need:
            i, at_char_end = i + 1, False
            continue
        j = i + 1
        while j < i + need and j < len(data):
            lo, hi = _SECOND.get(lead, (0x80, 0xBF)) if j == i + 1 else (0x80, 0xBF)
            if not lo <= data[j] <= hi:
                break
            j += 1
        if j == i + need:
            complete, i, at_char_end = complete + need, j, True
        elif j == len(data):
            return complete, j - i, need, False
        else:
            i, at_char_end = j, False  # drop the broken prefix, read data[j] again
    return complete, 0, 0, at_char_end


def py_score(data: bytes) -> tuple[float, float, float]:
    """(strict, soft, partial) of one stream."""
    if not data:
        return 1.0, 1.0, 1.0
    complete, tail, need, _ = py_scan(data)
    credit = tail * tail / need if tail else 0.0
    return float(complete == len(data)), complete / len(data), (complete + credit) / len(data)


@torch.no_grad()
def _logprobs(model, ids: list[int]) -> list[float]:
    """log p(ids[i] | ids[:i]) for i = 1..n-1, one unpadded forward pass."""
    x = torch.tensor([ids])
    lp = model(input_ids=x).logits[0, :-1].float().log_softmax(-1)
    return lp.gather(-1, x[0, 1:, None]).squeeze(-1).tolist()


@torch.no_grad()
def hf_generate(
    model, prep: Prepared, samples: list[Utf8Sample], max_new_tokens: int, batch: int
) -> list[list[int]]:
    """Greedy continuations from ``model.generate``, ``batch`` left-padded prompts a call."""
    gens = []
    for lo in range(0, len(samples), batch):
        rows = [list(s.prompt_ids) for s in samples[lo : lo + batch]]
        width = max(map(len, rows))
        ids = torch.tensor([[prep.pad_id] * (width - len(r)) + r for r in rows])
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=False,
            max_new_tokens=max_new_tokens,
            eos_token_id=prep.eos_id,
            pad_token_id=prep.pad_id,
            return_dict_in_generate=True,
            output_scores=True,
        )
        batch_gens = [
            row[: row.index(prep.eos_id) + 1] if prep.eos_id in row else row
            for row in out.sequences[:, width:].tolist()
        ]
        assert_no_near_tie(out.scores, [len(g) for g in batch_gens])
        gens += batch_gens
    return gens


def pending_bytes(data: bytes) -> bytes:
    """The bytes of the character ``data`` leaves pending, by CPython's incremental decoder
    (which drops a broken prefix as the maximal-subpart rule says)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    decoder.decode(data, final=False)
    return decoder.getstate()[0]


@functools.lru_cache(maxsize=64)
def _vocab_classes(id_bytes: tuple[bytes, ...], pending: bytes) -> tuple[list[bool], list[bool]]:
    """For every token, one at a time: whether it keeps a stream with ``pending`` bytes
    valid (CPython's strict decoder accepts ``pending + bytes`` so far), and whether it
    completes the pending character (nothing left buffered after it)."""
    valid, complete = [], []
    for b in id_bytes:
        if not b:  # eos and the other special tokens end the stream
            valid.append(pending == b"")
            complete.append(False)
            continue
        decoder = codecs.getincrementaldecoder("utf-8")(errors="strict")
        try:
            decoder.decode(pending + b, final=False)
        except UnicodeDecodeError:
            valid.append(False)
            complete.append(False)
            continue
        tail = decoder.getstate()[0]
        valid.append(_completable(tail))
        complete.append(bool(pending) and tail == b"")
    return valid, complete


def _completable(tail: bytes) -> bool:
    """Whether buffered bytes can still become a character: CPython's incremental decoder
    buffers ED A0-BF (a surrogate's first two bytes) until the third byte, so ask whether
    continuation bytes complete it (one of 80, 90, A0 suits any second byte; 80 any later)."""
    fills = [bytes([first]) + b"\x80" * k for first in (0x80, 0x90, 0xA0) for k in (0, 1, 2)]
    for fill in fills if tail else ():
        try:
            (tail + fill).decode("utf-8")
            return True
        except UnicodeDecodeError:
            continue
    return not tail


@torch.no_grad()
def expected_validity(model, prep: Prepared, s: Utf8Sample, gen: list[int]) -> tuple[list, list]:
    """(p_valid, p_complete) at each generated step: the model's distribution from a fresh
    unpadded forward pass over prompt + the tokens before, summed token by token over the
    whole vocabulary; p_complete is None where no character is pending."""
    p_valid, p_complete = [], []
    for t in range(len(gen)):
        ids = torch.tensor([list(s.prompt_ids) + gen[:t]])
        probs = model(input_ids=ids).logits[0, -1].double().softmax(-1).tolist()
        pending = pending_bytes(s.prompt_bytes + prep.codec.decode(gen[:t]))
        valid, complete = _vocab_classes(tuple(prep.codec.id_bytes[: len(probs)]), pending)
        p_valid.append(sum(p for p, ok in zip(probs, valid, strict=True) if ok))
        p_complete.append(sum(p for p, ok in zip(probs, complete, strict=True) if ok) if pending else None)
    return p_valid, p_complete


def run_sample(
    model, prep: Prepared, s: Utf8Sample, gen: list[int], max_new_tokens: int, alpha: float
) -> dict:
    """Everything the probes report about one sample, computed the obvious way."""
    prompt = list(s.prompt_ids)
    lps = _logprobs(model, prompt + gen)
    prompt_lp, gen_lp = sum(lps[: len(prompt) - 1]), sum(lps[len(prompt) - 1 :])
    gold_lp = sum(_logprobs(model, prompt + list(s.gold_ids))[len(prompt) - 1 :]) if s.gold_ids else None
    steps = []
    for t in range(1, max_new_tokens + 1):
        steps.append(py_score(s.prompt_bytes + prep.codec.decode(gen[:t])))
    partial = [p for _, _, p in steps]
    ema = partial[0]
    for p in partial[1:]:
        ema = alpha * p + (1 - alpha) * ema
    content = [t for t in gen if prep.codec.id_bytes[t]]
    gen_bytes = prep.codec.decode(gen)
    term = bool(s.remainder) and gen_bytes.startswith(s.remainder)
    term = term and py_scan(s.prompt_bytes + s.remainder)[3]
    p_valid, p_complete = expected_validity(model, prep, s, gen)
    return {
        "language": s.language,
        "item_id": s.item_id,
        "tier": s.tier or "none",
        "k": s.k_label,
        "tokens": gen,
        "strict": steps[-1][0],
        "soft": steps[-1][1],
        "partial": partial[-1],
        "partial_t": partial,
        "cumulative": sum(partial) / len(partial),
        "ema": ema,
        "delta": None if gold_lp is None else gold_lp - gen_lp,
        "nll": -(prompt_lp + gen_lp),
        "count": len(prompt) - 1 + len(gen),
        "pure": bool(content) and all(prep.codec.is_byte_token[t] for t in content),
        "term_match": term,
        "p_valid_t": p_valid,
        "p_complete_t": p_complete,
    }


def summarise(rows: list[dict], term_match: bool) -> dict[str, float]:
    """Group metrics with plain Python."""
    if not rows:
        return {}
    mean = statistics.fmean
    out = {m: mean(r[m] for r in rows) for m in ("partial", "strict", "soft", "cumulative", "ema")}
    for t in range(len(rows[0]["partial_t"])):
        out[f"partial@t{t + 1}"] = mean(r["partial_t"][t] for r in rows)
    deltas = [r["delta"] for r in rows if r["delta"] is not None]
    if deltas:
        out["gold_win_rate"] = mean(d > 0 for d in deltas)
        out["delta_ll_mean"] = mean(deltas)
        out["delta_ll_median"] = statistics.median(deltas)
        out["delta_ll_std"] = statistics.pstdev(deltas)
    out.update(summarise_expected(rows))
    out["ppl"] = math.exp(sum(r["nll"] for r in rows) / sum(r["count"] for r in rows))
    out["pure_share"] = mean(r["pure"] for r in rows)
    pure = [r["partial"] for r in rows if r["pure"]]
    mixed = [r["partial"] for r in rows if not r["pure"]]
    if pure:
        out["partial_pure"] = mean(pure)
    if mixed:
        out["partial_mixed"] = mean(mixed)
    if term_match:
        with_rest = [r["term_match"] for r in rows if r["delta"] is not None]
        out["term_match"] = mean(with_rest) if with_rest else 0.0
    out["n"] = float(len(rows))
    return out


def summarise_expected(rows: list[dict]) -> dict[str, float]:
    """p_valid at the first step and its SE; per step p_valid@t and p_complete@t over the
    samples live (and with a character pending) there."""
    per_sample = [r["p_valid_t"][0] for r in rows]
    out = {"p_valid": statistics.fmean(per_sample)}
    if len(rows) > 1:
        out["p_valid_se"] = statistics.stdev(per_sample) / math.sqrt(len(rows))
    else:  # a binomial SE with the share pulled off 0 and 1 by one success and one failure
        pulled = (out["p_valid"] + 1) / 3
        out["p_valid_se"] = math.sqrt(pulled * (1 - pulled))
    for name in ("p_valid", "p_complete"):
        for t in range(max(len(r[f"{name}_t"]) for r in rows)):
            at = [
                r[f"{name}_t"][t] for r in rows if len(r[f"{name}_t"]) > t and r[f"{name}_t"][t] is not None
            ]
            if at:
                out[f"{name}@t{t + 1}"] = statistics.fmean(at)
    if "p_complete@t1" in out:
        out["p_complete"] = out["p_complete@t1"]
    return out


def tier_gaps(rows: list[dict], seed: int = 0, n_resamples: int = 1000) -> dict[str, float]:
    """Common minus rare partial, strict and p_valid per language with both tiers and over
    them, each with a percentile CI over characters: per resample, every language's tier
    redraws its characters (common tiers first, then rare, languages in order, the draws of
    ``np.random.default_rng(seed)``), and the means are taken over the drawn characters' samples."""
    pick = {
        "partial": lambda r: r["partial"],
        "strict": lambda r: r["strict"],
        "p_valid": lambda r: r["p_valid_t"][0],
    }
    langs = [
        lg
        for lg in sorted({r["language"] for r in rows})
        if all(any((r["language"], r["tier"]) == (lg, t) for r in rows) for t in ("common", "rare"))
    ]
    out: dict[str, float] = {}
    for group in [*langs, "all"] if langs else []:
        chosen = langs if group == "all" else [group]
        rng = np.random.default_rng(seed)
        sides, boot = [], []
        for tier in ("common", "rare"):
            chars = [
                {
                    c: [r for r in rows if r["item_id"] == c]
                    for c in sorted({r["item_id"] for r in rows if (r["language"], r["tier"]) == (lg, tier)})
                }
                for lg in chosen
            ]
            draws = [rng.integers(0, len(c), (n_resamples, len(c))) for c in chars]
            sides.append([r for c in chars for samples in c.values() for r in samples])
            boot.append(
                [
                    [r for c, d in zip(chars, draws, strict=True) for i in d[k] for r in list(c.values())[i]]
                    for k in range(n_resamples)
                ]
            )
        for name, f in pick.items():
            gaps = [
                statistics.fmean(map(f, a)) - statistics.fmean(map(f, b)) for a, b in zip(*boot, strict=True)
            ]
            lo, hi = np.percentile(gaps, [2.5, 97.5])
            value = statistics.fmean(map(f, sides[0])) - statistics.fmean(map(f, sides[1]))
            root = f"probe/level0/{group}/all/tier_gap_{name}"
            out |= {root: value, f"{root}_lo": float(lo), f"{root}_hi": float(hi)}
    return out


def reference_metrics(
    model, prep: Prepared, level: int, max_new_tokens: int = 5, alpha: float = 0.1, generate_batch: int = 1
) -> dict[str, float]:
    """The probe's metric dict, recomputed one sample at a time (``generate_batch``
    prompts per ``model.generate`` call; 1 means no padding at all)."""
    samples = fit_context(prep.samples, model, max_new_tokens, prep.codec)
    gens = hf_generate(model, prep, samples, max_new_tokens, generate_batch)
    rows = [run_sample(model, prep, s, g, max_new_tokens, alpha) for s, g in zip(samples, gens, strict=True)]
    out: dict[str, float] = {}
    root = f"probe/level{level}"

    def add(key: str, keep: Callable[[dict], bool]) -> None:
        out.update(
            {f"{root}/{key}/{m}": v for m, v in summarise([r for r in rows if keep(r)], level == 1).items()}
        )

    languages = sorted({r["language"] for r in rows})
    add("all/all" if level == 0 else "all", lambda r: True)
    for lg in languages:
        if level == 0:
            add(f"{lg}/all", lambda r, lg=lg: r["language"] == lg)
            for tier in sorted({r["tier"] for r in rows if r["language"] == lg}):
                add(f"{lg}/{tier}", lambda r, lg=lg, tier=tier: (r["language"], r["tier"]) == (lg, tier))
                for k in sorted({r["k"] for r in rows if (r["language"], r["tier"]) == (lg, tier)}):
                    add(
                        f"{lg}/{tier}/{k}",
                        lambda r, lg=lg, tier=tier, k=k: (r["language"], r["tier"], r["k"]) == (lg, tier, k),
                    )
        else:
            add(lg, lambda r, lg=lg: r["language"] == lg)
            for k in sorted({r["k"] for r in rows if r["language"] == lg}):
                add(f"{lg}/{k}", lambda r, lg=lg, k=k: (r["language"], r["k"]) == (lg, k))
    return out | (tier_gaps(rows) if level == 0 else {})
