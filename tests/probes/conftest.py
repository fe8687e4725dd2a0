"""A tiny random GPT-2 on the byte-fallback test tokenizer, and small eval sets."""

import json

import numpy as np
import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

LEVEL0 = {
    "ja": [("語", "common"), ("鬱", "rare"), ("𠀋", "unseen"), ("ア", "common")],
    "zh": [("中", "common"), ("龘", "rare"), ("𫝀", "unseen"), ("𪛖", "unseen")],
}
LEVEL1 = [
    {"language": "ja", "term": "鬱", "sentence_prompt": "今日は気分が鬱"},
    {"language": "zh", "term": "龘", "sentence_prompt": "这个字是龘"},
    {"language": "zh", "term": "𫝀", "sentence_prompt": "北京很大𫝀"},
]


@pytest.fixture(scope="session")
def random_model(byte_fallback_tokenizer):
    """Large initial weights keep logits far apart, so argmax never hinges on rounding."""
    tok = byte_fallback_tokenizer
    cfg = GPT2Config(
        vocab_size=len(tok),
        n_positions=64,
        n_embd=32,
        n_layer=2,
        n_head=2,
        initializer_range=0.5,
        eos_token_id=tok.eos_token_id,
        bos_token_id=tok.eos_token_id,
    )
    torch.manual_seed(0)
    return GPT2LMHeadModel(cfg).eval()


@pytest.fixture(scope="session")
def wide_model(byte_fallback_tokenizer):
    """Context long enough for every prompt here (the shared random model has 64)."""
    tok = byte_fallback_tokenizer
    cfg = GPT2Config(
        vocab_size=len(tok), n_positions=512, n_embd=32, n_layer=2, n_head=2, initializer_range=0.5
    )
    torch.manual_seed(0)
    return GPT2LMHeadModel(cfg).eval()


@pytest.fixture(scope="session")
def eval_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("evalsets")
    folder = root / "evalsets"
    folder.mkdir()
    for lang, chars in LEVEL0.items():
        entries = [
            {
                "char": c,
                "codepoint": ord(c),
                "hex": f"U+{ord(c):04X}",
                "count": 0,
                "frequency": 0.0,
                "tier": t,
            }
            for c, t in chars
        ]
        (folder / f"level0_{lang}.json").write_text(
            json.dumps({"description": "t", "char_frequencies": entries})
        )
    (folder / "level1.json").write_text(json.dumps(LEVEL1, ensure_ascii=False))
    return root


# the least gap between a reference's greedy token and the runner-up, in logits: batched and
# unpadded passes round differently (about 1e-6 on logits near 8), so a closer tie could flip
# between them, on one CPU's kernels and not another's, and the comparison would test
# rounding, not the engine; 100x that rounding, under the closest gap seen (6e-4, one thread)
NEAR_TIE = 1e-4


def assert_no_near_tie(scores: tuple[torch.Tensor, ...], rows: list[int]) -> None:
    """Every greedy choice of ``generate``'s ``scores`` (one (B, V) per step) in ``rows`` won
    by more than ``NEAR_TIE``; steps a row took after its end have equal scores and are not
    looked at (they are cut off anyway)."""
    for row, length in enumerate(rows):
        for step in scores[:length]:
            top = step[row].float().topk(2).values
            assert top[0] - top[1] > NEAR_TIE, f"near tie in the reference (gap {top[0] - top[1]:.2e})"


def assert_clear_argmax(scores, by: float = NEAR_TIE) -> None:
    """The best of ``scores`` (an item's choice log-likelihoods) wins by more than ``by``, so
    an accuracy compared across batchings measures the scoring, not rounding."""
    top = np.sort(np.asarray(scores, dtype=float))[::-1]
    assert len(top) < 2 or top[0] - top[1] > by, f"near tie between choices (gap {top[0] - top[1]:.2e})"


def generate_alone(model, ids, max_new_tokens, tok, stop_strings=None) -> list[int]:
    """``model.generate`` greedy on one prompt, no padding: the reference for the engine;
    the tokens up to and including eos (or the token completing one of ``stop_strings``).
    Its choices are asserted clear of near ties, so the engine may be held to them exactly."""
    stopping = {"stop_strings": stop_strings, "tokenizer": tok} if stop_strings else {}
    gen = model.generate(
        input_ids=torch.tensor([ids]),
        attention_mask=torch.ones(1, len(ids), dtype=torch.long),
        do_sample=False,
        max_new_tokens=max_new_tokens,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        return_dict_in_generate=True,
        output_scores=True,
        **stopping,
    )
    out = gen.sequences[0, len(ids) :].tolist()
    out = out[: out.index(tok.eos_token_id) + 1] if tok.eos_token_id in out else out
    assert_no_near_tie(gen.scores, [len(out)])
    return out
