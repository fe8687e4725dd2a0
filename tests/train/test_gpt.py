"""The model training runs (``GPT``) is ``GPT2LMHeadModel`` in a lean forward: the same
parameters in the same order, the same initialisation, the same logits, and a view for the
probes that shares its tensors."""

import pytest
import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel

from bytecanary.train.gpt import GPT
from bytecanary.train.model import ArchConfig, build_model, gpt2_config

ARCH = ArchConfig(n_layer=2, n_head=4, n_embd=64, n_positions=32)
VOCAB = 300


def gpt2_new(ours) -> GPT2LMHeadModel:
    """GPT-2 as published ("gelu_new", five elementwise ops) on a copy of ``ours``'s weights."""
    config = GPT2Config.from_dict(ours.config.to_dict() | {"activation_function": "gelu_new"})
    model = GPT2LMHeadModel(config).eval()
    model.load_state_dict(ours.state_dict())
    return model


def test_the_parameters_and_initialisation_are_gpt2s():
    torch.manual_seed(0)
    ours = build_model(ARCH, VOCAB)
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(gpt2_config(ARCH, VOCAB))
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in hf.named_parameters()]  # AdamW's order
    theirs = hf.state_dict()
    assert list(ours.state_dict()) == list(theirs)
    assert all(torch.equal(v, theirs[k]) for k, v in ours.state_dict().items())
    assert ours.lm_head.weight is ours.transformer.wte.weight


def test_the_logits_are_gpt2s_in_float32_and_in_bf16():
    torch.manual_seed(0)
    ours = build_model(ARCH, VOCAB).eval()
    gpt2 = gpt2_new(ours)
    ids = torch.randint(0, VOCAB, (3, ARCH.n_positions))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids), gpt2(input_ids=ids).logits, rtol=1e-5, atol=1e-5)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got, want = ours(ids), gpt2(input_ids=ids).logits
    assert got.dtype == want.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want.float(), rtol=1.6e-2, atol=2e-2)  # bf16's rounding


def test_the_loss_is_the_cross_entropy_of_the_logits():
    torch.manual_seed(0)
    ours = build_model(ARCH, VOCAB).eval()
    ids = torch.randint(0, VOCAB, (2, ARCH.n_positions + 1))
    x, y = ids[:, :-1], ids[:, 1:]
    with torch.no_grad():
        loss = ours(x, y)
        logits = GPT2LMHeadModel.forward(gpt2_new(ours), input_ids=x).logits
    assert loss.shape == y.shape and loss.dtype == torch.float32
    want = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view_as(y)
    torch.testing.assert_close(loss, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("training", [True, False])
def test_the_probes_view_shares_the_live_tensors(training):
    ours = build_model(ARCH, VOCAB).train(training)
    view = ours.hf()
    assert isinstance(view, GPT2LMHeadModel) and view.training == training
    mine = dict(ours.named_parameters())
    for name, param in view.named_parameters():
        assert param.data_ptr() == mine[name].data_ptr(), name
    assert view.lm_head.weight.data_ptr() == ours.transformer.wte.weight.data_ptr()
    with torch.no_grad():
        ours.transformer.wte.weight[0].add_(1.0)  # an optimizer step, in place
        ids = torch.randint(0, VOCAB, (2, 16))
        torch.testing.assert_close(view.eval()(input_ids=ids).logits, ours.eval()(ids), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "field",
    [
        {"n_inner": 100},
        {"scale_attn_weights": False},
        {"scale_attn_by_inverse_layer_idx": True},
        {"reorder_and_upcast_attn": True},
        {"activation_function": "gelu_new"},
    ],
)
def test_a_config_the_lean_forward_would_not_follow_is_refused(field):
    config = GPT2Config.from_dict(gpt2_config(ARCH, VOCAB).to_dict() | field)
    with pytest.raises(ValueError, match=f"not with {next(iter(field))}="):
        GPT(config)
