"""MCQA groundwork: the two space strategies really differ; batched scoring is exact."""

import numpy as np
import pytest
import torch

from bytecanary.bytecodec import ByteCodec
from bytecanary.probes.mcqa.encoding import encode_pair, letter_merged, letter_separate
from bytecanary.probes.mcqa.scoring import score_continuations

PROMPT = "Question: 東京は?\nA. 都市\nB. 川\nC. 山\nD. 海\nAnswer:"
LABELS = ["A", "B", "C", "D"]


@pytest.mark.parametrize("family", ["byte_fallback", "gpt2"])
def test_separate_and_merged_tokenise_differently(family, byte_fallback_tokenizer, gpt2_tokenizer):
    tok = byte_fallback_tokenizer if family == "byte_fallback" else gpt2_tokenizer
    codec = ByteCodec.from_tokenizer(tok)
    sep = letter_separate(tok, codec, PROMPT, LABELS)
    mer = letter_merged(tok, codec, PROMPT, LABELS)
    # the space is the last prompt token in "separate" and part of the letter in "merged"
    assert codec.decode(sep.prompt_ids).endswith(b"Answer: ") and codec.decode(mer.prompt_ids).endswith(
        b"Answer:"
    )
    for label, s, m in zip(LABELS, sep.continuations, mer.continuations, strict=True):
        assert codec.decode(s) == label.encode() and codec.decode(m) == f" {label}".encode()
        assert s != m
    # encode("A") and encode(" A") agree for SentencePiece-style tokenizers: the trap
    if family == "byte_fallback":
        assert tok.encode("A", add_special_tokens=False) == tok.encode(" A", add_special_tokens=False)


def test_encode_pair_moves_trailing_space_like_lm_eval(byte_fallback_tokenizer):
    tok = byte_fallback_tokenizer
    ctx, cont = encode_pair(tok, "Answer: ", "北京")
    assert (ctx, cont) == encode_pair(tok, "Answer:", " 北京")
    whole = tok.encode("Answer: 北京", add_special_tokens=False)
    assert ctx + cont == whole and tok.decode(cont).strip() == "北京"


def test_batched_scoring_equals_one_pass_per_continuation(random_model, byte_fallback_tokenizer):
    tok = byte_fallback_tokenizer
    rng = np.random.default_rng(0)
    prompts = [rng.integers(4, len(tok), rng.integers(2, 10)).tolist() for _ in range(7)]
    conts = [
        [rng.integers(4, len(tok), rng.integers(1, 5)).tolist() for _ in range(rng.integers(2, 5))]
        for _ in prompts
    ]
    conts[0] = [[11], [12], [13], [14]]  # letters: single tokens
    got = score_continuations(random_model, prompts, conts, tok.pad_token_id, batch_size=3)
    for p, cs, g in zip(prompts, conts, got, strict=True):
        want = []
        for c in cs:
            x = torch.tensor([p + c])
            with torch.no_grad():
                lp = random_model(x).logits[0, :-1].log_softmax(-1).gather(-1, x[0, 1:, None]).squeeze(-1)
            want.append(lp[len(p) - 1 :].sum().item())
        np.testing.assert_allclose(g, want, atol=1e-4)


def test_padding_of_short_continuations_stays_inside_the_context(random_model):
    """A long continuation pads the short ones past n_positions; they must still score."""
    n = random_model.config.n_positions
    rng = np.random.default_rng(1)
    prompts = [rng.integers(5, 100, n - 14).tolist(), rng.integers(5, 100, n - 3).tolist()]
    conts = [[rng.integers(5, 100, 12).tolist(), [7]], [[8], [9, 10, 11]]]
    got = score_continuations(random_model, prompts, conts, pad_id=0)
    for p, cs, ll in zip(prompts, conts, got, strict=True):
        for c, value in zip(cs, ll, strict=True):
            x = torch.tensor([p + c])
            with torch.no_grad():
                lp = random_model(x).logits[0, :-1].log_softmax(-1).gather(-1, x[0, 1:, None]).squeeze(-1)
            assert value == pytest.approx(lp[len(p) - 1 :].sum().item(), abs=1e-4)


def _plain(model, prompt, cont):
    """log p(cont | prompt) from one forward of the model on prompt + cont alone."""
    with torch.no_grad():
        lp = model(torch.tensor([prompt + cont[:-1]])).logits[0].double().log_softmax(-1)
    return sum(float(lp[len(prompt) - 1 + j, t]) for j, t in enumerate(cont))


@pytest.mark.parametrize("family", ["gemma2 soft-capping", "mistral window"])
def test_models_whose_forward_the_fast_path_cannot_copy_are_scored_by_it(
    family, byte_fallback_tokenizer, capsys, monkeypatch
):
    """Issue 32, classes 4 and 5: Gemma-2 caps its logits after the head, Mistral attends
    within a window; both are scored through their own forward, equal to one plain pass per
    (prompt, continuation), and say so once."""
    from transformers import Gemma2Config, Gemma2ForCausalLM, MistralConfig, MistralForCausalLM

    from bytecanary.io import warn_once
    from bytecanary.probes.mcqa import scoring

    monkeypatch.setattr(scoring, "_warn", warn_once())  # said once per process: say it here

    tok = byte_fallback_tokenizer
    shape = dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                 num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128)  # fmt: skip
    torch.manual_seed(0)
    if family.startswith("gemma2"):
        model = Gemma2ForCausalLM(Gemma2Config(**shape, head_dim=16, final_logit_softcapping=0.5))
        reason = "final_logit_softcapping=0.5"
    else:
        model = MistralForCausalLM(MistralConfig(**shape, sliding_window=6))
        reason = "sliding_window=6"
    model.eval()
    rng = np.random.default_rng(1)
    prompts = [rng.integers(4, len(tok), rng.integers(8, 20)).tolist() for _ in range(3)]
    conts = [[rng.integers(4, len(tok), rng.integers(1, 4)).tolist() for _ in range(3)] for _ in prompts]
    got = score_continuations(model, prompts, conts, tok.pad_token_id, batch_size=2)
    for p, cs, g in zip(prompts, conts, got, strict=True):
        assert g == pytest.approx([_plain(model, p, c) for c in cs], abs=1e-4)
    assert reason in capsys.readouterr().err
