"""GPT-2 for training: ``GPT2LMHeadModel``'s parameters (names, ``Conv1D`` layout, tied head, initialisation)
in a lean forward with no masks, caches or output objects, which compiles to one graph with its loss.
Shape suffixes: B batch, T time (tokens), C width, H heads, D head width, V vocabulary."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.pytorch_utils import Conv1D


class Attention(nn.Module):
    """Causal self-attention through SDPA with ``is_causal`` and no mask: CUDA's flash kernel."""

    def __init__(self, config: GPT2Config) -> None:
        super().__init__()
        width = config.n_embd
        self.n_head = config.n_head
        self.dropout = config.attn_pdrop
        self.c_attn = Conv1D(3 * width, width)
        self.c_proj = Conv1D(width, width)
        self.resid_dropout = nn.Dropout(config.resid_pdrop)

    def forward(self, x_BTC: torch.Tensor) -> torch.Tensor:
        B, T, C = x_BTC.shape
        shape = (B, T, self.n_head, C // self.n_head)
        q_BHTD, k_BHTD, v_BHTD = (t.view(shape).transpose(1, 2) for t in self.c_attn(x_BTC).split(C, dim=2))
        dropout = self.dropout if self.training else 0.0
        y_BHTD = F.scaled_dot_product_attention(q_BHTD, k_BHTD, v_BHTD, dropout_p=dropout, is_causal=True)
        return self.resid_dropout(self.c_proj(y_BHTD.transpose(1, 2).reshape(B, T, C)))


class MLP(nn.Module):
    def __init__(self, config: GPT2Config) -> None:
        super().__init__()
        self.c_fc = Conv1D(4 * config.n_embd, config.n_embd)
        self.c_proj = Conv1D(config.n_embd, 4 * config.n_embd)
        self.dropout = nn.Dropout(config.resid_pdrop)

    def forward(self, x_BTC: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x_BTC), approximate="tanh")))


class Block(nn.Module):
    """One pre-LayerNorm transformer block; FSDP shards the model one block per unit."""

    def __init__(self, config: GPT2Config) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.attn = Attention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.mlp = MLP(config)

    def forward(self, x_BTC: torch.Tensor) -> torch.Tensor:
        x_BTC = x_BTC + self.attn(self.ln_1(x_BTC))
        return x_BTC + self.mlp(self.ln_2(x_BTC))


class GPT(nn.Module):
    """What training runs; its state dict is ``GPT2LMHeadModel``'s, key for key, so weights
    files, full states and exports are those of the HF model."""

    def __init__(self, config: GPT2Config) -> None:
        differs = {
            "activation_function": config.activation_function != "gelu_pytorch_tanh",
            "add_cross_attention": config.add_cross_attention,
            "n_inner": config.n_inner is not None,
            "scale_attn_weights": not config.scale_attn_weights,
            "scale_attn_by_inverse_layer_idx": config.scale_attn_by_inverse_layer_idx,
            "reorder_and_upcast_attn": config.reorder_and_upcast_attn,
        }
        if any(differs.values()):  # each would make this forward another model than the HF one
            fields = ", ".join(f"{k}={getattr(config, k)!r}" for k, bad in differs.items() if bad)
            raise ValueError(f"GPT: computes GPT2LMHeadModel as gpt2_config builds it, not with {fields}")
        super().__init__()
        self.config = config
        with torch.device("meta"):  # the HF model below initialises the weights
            self.transformer = nn.ModuleDict(
                {
                    "wte": nn.Embedding(config.vocab_size, config.n_embd),
                    "wpe": nn.Embedding(config.n_positions, config.n_embd),
                    "drop": nn.Dropout(config.embd_pdrop),
                    "h": nn.ModuleList(Block(config) for _ in range(config.n_layer)),
                    "ln_f": nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon),
                }
            )
            self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        # GPT-2's own initialisation, drawn from the same generator in the same order
        self.load_state_dict(GPT2LMHeadModel(config).state_dict(), assign=True)
        self.lm_head.weight = self.transformer.wte.weight

    def forward(self, ids_BT: torch.Tensor, targets_BT: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, T, V), or with ``targets_BT`` each token's loss in float32 (B, T), computed
        in the same graph so a compiled model never holds float32 logits."""
        positions_T = torch.arange(ids_BT.shape[1], device=ids_BT.device)
        x_BTC = self.transformer.drop(self.transformer.wte(ids_BT) + self.transformer.wpe(positions_T))
        for block in self.transformer.h:
            x_BTC = block(x_BTC)
        logits_BTV = self.lm_head(self.transformer.ln_f(x_BTC))
        if targets_BT is None:
            return logits_BTV
        loss = F.cross_entropy(logits_BTV.flatten(0, 1).float(), targets_BT.flatten(), reduction="none")
        return loss.view_as(targets_BT)

    def hf(self) -> GPT2LMHeadModel:
        """A ``GPT2LMHeadModel`` on these very tensors (no copy): what probes of the live
        weights read, in this model's dtype and device."""
        with torch.device("meta"):
            model = GPT2LMHeadModel(self.config)
        model.load_state_dict(self.state_dict(), assign=True)
        model.tie_weights()
        return model.train(self.training)
