"""A tiny random GPT-2 on the byte-fallback test tokenizer, and small eval sets."""

import json

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


def generate_alone(model, ids, max_new_tokens, tok, stop_strings=None) -> list[int]:
    """``model.generate`` greedy on one prompt, no padding: the reference for the engine;
    the tokens up to and including eos (or the token completing one of ``stop_strings``)."""
    stopping = {"stop_strings": stop_strings, "tokenizer": tok} if stop_strings else {}
    out = model.generate(
        input_ids=torch.tensor([ids]),
        attention_mask=torch.ones(1, len(ids), dtype=torch.long),
        do_sample=False,
        max_new_tokens=max_new_tokens,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        **stopping,
    )[0, len(ids) :].tolist()
    return out[: out.index(tok.eos_token_id) + 1] if tok.eos_token_id in out else out
