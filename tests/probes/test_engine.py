"""The batched decoding engine against HF generate and unpadded forward passes."""

import numpy as np
import pytest
import torch

from probes.engine import Sampling, generate

from .conftest import generate_alone


def test_engine_tokens_equal_generate_on_each_prompt_alone(random_model, byte_fallback_tokenizer):
    tok = byte_fallback_tokenizer
    rng = np.random.default_rng(0)
    prompts = [rng.integers(4, len(tok), rng.integers(1, 12)).tolist() for _ in range(40)]
    out = generate(random_model, prompts, 6, tok.eos_token_id, tok.pad_token_id, batch_size=16)
    bare = generate(random_model, prompts, 6, tok.eos_token_id, tok.pad_token_id, 16, score_prompt=False)
    assert np.array_equal(bare.tokens, out.tokens) and np.allclose(bare.logprobs, out.logprobs, atol=1e-5)
    for i, p in enumerate(prompts):
        ref = generate_alone(random_model, p, 6, tok)
        assert out.tokens[i, : out.lengths[i]].tolist() == ref
        x = torch.tensor([p + ref])
        with torch.no_grad():
            lp = random_model(x).logits[0, :-1].log_softmax(-1).gather(-1, x[0, 1:, None]).squeeze(-1)
        assert out.logprobs[i, : len(ref)].sum() == pytest.approx(lp[len(p) - 1 :].sum().item(), abs=1e-4)
        assert out.prompt_logprob[i] == pytest.approx(lp[: len(p) - 1].sum().item(), abs=1e-4)


def test_gold_scored_in_the_prefill_matches_unpadded_passes(random_model, byte_fallback_tokenizer):
    tok = byte_fallback_tokenizer
    prompts, golds = [[5, 9, 300], [7], [40, 41, 42, 43, 44]], [[10, 11], [12], []]
    with_gold = generate(random_model, prompts, 4, tok.eos_token_id, tok.pad_token_id, 2, golds=golds)
    without = generate(random_model, prompts, 4, tok.eos_token_id, tok.pad_token_id, 2)
    np.testing.assert_array_equal(with_gold.tokens, without.tokens)  # gold never leaks into decoding
    np.testing.assert_allclose(with_gold.logprobs, without.logprobs, atol=1e-4)
    for g, p, c in zip(with_gold.gold_logprob, prompts, golds, strict=True):
        if not c:
            assert np.isnan(g)
            continue
        x = torch.tensor([p + c])
        with torch.no_grad():
            lp = random_model(x).logits[0, :-1].log_softmax(-1).gather(-1, x[0, 1:, None]).squeeze(-1)
        assert g == pytest.approx(lp[len(p) - 1 :].sum().item(), abs=1e-4)


def test_sampling_is_seeded_and_top_k_1_is_greedy(random_model, byte_fallback_tokenizer):
    tok = byte_fallback_tokenizer
    prompts = [[5, 9, 300], [7], [40, 41, 42]] * 4
    greedy = generate(random_model, prompts, 5, tok.eos_token_id, tok.pad_token_id)
    hot = Sampling(temperature=5.0, seed=3)
    a = generate(random_model, prompts, 5, tok.eos_token_id, tok.pad_token_id, sampling=hot)
    b = generate(random_model, prompts, 5, tok.eos_token_id, tok.pad_token_id, sampling=hot)
    np.testing.assert_array_equal(a.tokens, b.tokens)
    assert not np.array_equal(a.tokens, greedy.tokens)
    top1 = generate(
        random_model, prompts, 5, tok.eos_token_id, tok.pad_token_id, sampling=Sampling(1.0, top_k=1)
    )
    np.testing.assert_array_equal(top1.tokens, greedy.tokens)
    tiny_p = Sampling(1.0, top_p=1e-6, seed=1)
    np.testing.assert_array_equal(
        generate(random_model, prompts, 5, tok.eos_token_id, tok.pad_token_id, sampling=tiny_p).tokens,
        greedy.tokens,
    )
