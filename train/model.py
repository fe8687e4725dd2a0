"""The model's shape and its optimiser: GPT-2 (arXiv:2606.14122 section 1), whose every
checkpoint is a plain ``GPT2LMHeadModel`` that ``AutoModelForCausalLM`` loads after ``bytecanary
export``. The 355M preset is GPT-2 medium's shape with the tokenizer's 8K vocabulary."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from transformers import GPT2Config

from bytecanary.train.gpt import GPT


@dataclass
class ArchConfig:
    """GPT-2 shape."""

    n_layer: int = 4
    """Transformer blocks."""
    n_head: int = 4
    """Attention heads per block."""
    n_embd: int = 256
    """Width; must be divisible by n_head."""
    n_positions: int = 256
    """Context length in tokens (also the training sequence length)."""
    dropout: float = 0.0
    """Dropout on embeddings, attention and residuals (0 for pretraining, as nanoGPT)."""

    def __post_init__(self) -> None:
        for name in ("n_layer", "n_head", "n_embd", "n_positions"):
            _check(getattr(self, name) >= 1, name, "must be >= 1", getattr(self, name))
        divisible = self.n_embd % self.n_head == 0
        _check(divisible, "n_embd", f"must be divisible by n_head ({self.n_head})", self.n_embd)
        _check(0 <= self.dropout < 1, "dropout", "must be in [0, 1)", self.dropout)


@dataclass
class OptimConfig:
    """AdamW with GPT-2 weight-decay groups, linear warmup then cosine decay."""

    lr: float = 6e-4
    """Peak learning rate."""
    min_lr_ratio: float = 0.1
    """Final learning rate as a share of the peak."""
    weight_decay: float = 0.1
    """Applied to matrices and embeddings only, never to biases or LayerNorm."""
    beta1: float = 0.9
    beta2: float = 0.95
    warmup_steps: int = 100
    fused: bool = True
    """One fused AdamW kernel over all parameters (torch runs it on CPU and CUDA alike, so the
    CPU trains with the GPU's optimizer); false: torch's per-tensor foreach kernels."""

    def __post_init__(self) -> None:
        _check(self.lr > 0, "lr", "must be > 0", self.lr)
        _check(0 <= self.min_lr_ratio <= 1, "min_lr_ratio", "must be in [0, 1]", self.min_lr_ratio)
        _check(self.weight_decay >= 0, "weight_decay", "must be >= 0", self.weight_decay)
        for name in ("beta1", "beta2"):
            _check(0 <= getattr(self, name) < 1, name, "must be in [0, 1)", getattr(self, name))
        _check(self.warmup_steps >= 0, "warmup_steps", "must be >= 0", self.warmup_steps)


def _check(ok: bool, field: str, rule: str, value: object) -> None:
    """A ``ValueError`` that starts with the field's name, so the CLI can name the flag."""
    if not ok:
        raise ValueError(f"{field}: {rule}, got {value!r}")


def gpt2_config(arch: ArchConfig, vocab_size: int, eos_token_id: int | None = None) -> GPT2Config:
    return GPT2Config(
        vocab_size=vocab_size,
        bos_token_id=eos_token_id,
        eos_token_id=eos_token_id,
        n_positions=arch.n_positions,
        n_embd=arch.n_embd,
        n_layer=arch.n_layer,
        n_head=arch.n_head,
        resid_pdrop=arch.dropout,
        embd_pdrop=arch.dropout,
        attn_pdrop=arch.dropout,
        # GPT-2's tanh GELU as one fused kernel: "gelu_new" computes the same function in
        # five elementwise ops, a tenth of a CPU training step and a third of a prefill
        activation_function="gelu_pytorch_tanh",
        attn_implementation="sdpa",
    )


def build_model(arch: ArchConfig, vocab_size: int, eos_token_id: int | None = None) -> GPT:
    return GPT(gpt2_config(arch, vocab_size, eos_token_id))


def count_parameters(model: torch.nn.Module) -> int:
    """Unique parameters (the tied input/output embedding counted once)."""
    return sum(p.numel() for p in model.parameters())


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """GPT-2 style: decay every parameter of two or more dimensions (matmul weights,
    embeddings), no decay for biases and LayerNorm gains."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]


def lr_lambda(step: int, warmup: int, total: int, min_ratio: float) -> float:
    """Multiplier of the peak lr at ``step``: linear warmup, then cosine to ``min_ratio``."""
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
