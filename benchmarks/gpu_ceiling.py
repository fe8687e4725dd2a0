"""The ceiling the 355M's Lightning path is measured against: a lean nanoGPT-style GPT of the
same shape, trained in a bare loop on random tokens the way the GPU trains (bf16 autocast,
torch.compile on CUDA, fused AdamW, gradient clipping by hand), one JSON of its throughput.

The model is written here on its own, from plain ``nn.Linear``, ``nn.LayerNorm``, tanh GELU
and SDPA with ``is_causal=True``, its token embedding tied to the head (no transformers).
``gpu_check.py`` runs it as its ``ceiling`` part, within that part's budget.

    python benchmarks/gpu_ceiling.py --arch '{"n_layer": 24, "n_head": 16, "n_embd": 1024,
        "n_positions": 1024}' --vocab-size 8192 --batch-size 64 --out ceiling.json

Shape suffixes: B batch, T time (tokens), C width, H heads, Q head width, V vocabulary.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bytecanary.train.throughput import flops_per_token, peak_flops


@dataclass
class LeanConfig:
    """GPT-2's shape; the names are GPT2Config's, which ``flops_per_token`` reads."""

    vocab_size: int
    n_layer: int
    n_head: int
    n_embd: int
    n_positions: int


class Block(nn.Module):
    """Pre-norm attention and MLP, each added to the residual stream."""

    def __init__(self, c: LeanConfig) -> None:
        super().__init__()
        self.n_head = c.n_head
        self.ln_1 = nn.LayerNorm(c.n_embd)
        self.qkv = nn.Linear(c.n_embd, 3 * c.n_embd)
        self.attn_out = nn.Linear(c.n_embd, c.n_embd)
        self.ln_2 = nn.LayerNorm(c.n_embd)
        self.up = nn.Linear(c.n_embd, 4 * c.n_embd)
        self.down = nn.Linear(4 * c.n_embd, c.n_embd)

    def forward(self, x_BTC: torch.Tensor) -> torch.Tensor:
        B, T, C = x_BTC.shape
        heads = (B, T, self.n_head, C // self.n_head)
        qkv_BTC = self.qkv(self.ln_1(x_BTC)).split(C, dim=2)
        q_BHTQ, k_BHTQ, v_BHTQ = (t.view(heads).transpose(1, 2) for t in qkv_BTC)
        y_BHTQ = F.scaled_dot_product_attention(q_BHTQ, k_BHTQ, v_BHTQ, is_causal=True)
        x_BTC = x_BTC + self.attn_out(y_BHTQ.transpose(1, 2).reshape(B, T, C))
        return x_BTC + self.down(F.gelu(self.up(self.ln_2(x_BTC)), approximate="tanh"))


class LeanGPT(nn.Module):
    """Embeddings, blocks, final norm and the tied head, laid out as nanoGPT's (and GPT-2's)
    ``transformer.{wte, wpe, h, ln_f}``."""

    def __init__(self, c: LeanConfig) -> None:
        super().__init__()
        self.config = c
        self.transformer = nn.ModuleDict(
            {
                "wte": nn.Embedding(c.vocab_size, c.n_embd),
                "wpe": nn.Embedding(c.n_positions, c.n_embd),
                "h": nn.ModuleList(Block(c) for _ in range(c.n_layer)),
                "ln_f": nn.LayerNorm(c.n_embd),
            }
        )
        self.lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        self.lm_head.weight = self.transformer.wte.weight
        for module in self.modules():  # GPT-2's init: a random-token loss starts near ln V
            if isinstance(module, nn.Linear | nn.Embedding):
                nn.init.normal_(module.weight, std=0.02)

    def forward(self, ids_BT: torch.Tensor) -> torch.Tensor:
        t = self.transformer
        x_BTC = t.wte(ids_BT) + t.wpe(torch.arange(ids_BT.shape[1], device=ids_BT.device))
        for block in t.h:
            x_BTC = block(x_BTC)
        return self.lm_head(t.ln_f(x_BTC))


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def max_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kilobytes on Linux


def train(
    model: nn.Module, optimizer: torch.optim.Optimizer, steps: int, batch_size: int, device: torch.device
) -> torch.Tensor:
    """``steps`` optimizer steps on fresh random tokens; the last loss, left on the device
    (reading it would sync the host every step)."""
    c = model.config
    for _ in range(steps):
        ids_BT = torch.randint(c.vocab_size, (batch_size, c.n_positions + 1), device=device)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            logits_BTV = model(ids_BT[:, :-1])
            loss = F.cross_entropy(logits_BTV.flatten(0, 1), ids_BT[:, 1:].flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return loss.detach()


def ceiling(
    arch: dict[str, int], vocab_size: int, batch_size: int, warmup: int, steps: int
) -> dict[str, Any]:
    """Tokens/s and MFU over ``steps`` timed steps after ``warmup`` (the compile among them)."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    eager = LeanGPT(LeanConfig(vocab_size, **arch)).to(device)
    decay = [p for p in eager.parameters() if p.dim() >= 2]  # matrices decay; biases and norms do not
    rest = [p for p in eager.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=3e-4, betas=(0.9, 0.95), fused=True)
    cuda = device.type == "cuda"
    model = torch.compile(eager) if cuda else eager
    train(model, optimizer, warmup, batch_size, device)
    sync(device)
    start = time.perf_counter()
    loss = train(model, optimizer, steps, batch_size, device)
    sync(device)
    seconds = time.perf_counter() - start
    tokens_per_s = steps * batch_size * eager.config.n_positions / seconds
    per_token, peak = flops_per_token(eager), peak_flops(device, torch.bfloat16)
    peak_bytes = torch.cuda.max_memory_allocated(device) if cuda else max_rss_bytes()
    return {
        "model": "lean nanoGPT-style GPT (benchmarks/gpu_ceiling.py)",
        "parameters": sum(p.numel() for p in eager.parameters()),
        "shape": {**arch, "vocab_size": vocab_size},
        "batch_size": batch_size,
        "compiled": cuda,
        "warmup_steps": warmup,
        "timed_steps": steps,
        "timed_seconds": round(seconds, 3),
        "tokens_per_s": tokens_per_s,
        "flops_per_token": per_token,
        "mfu": tokens_per_s * per_token / peak if peak else None,
        "peak_memory_gb": round(peak_bytes / 2**30, 2),
        "peak_memory_of": "torch.cuda.max_memory_allocated" if cuda else "the process's max RSS",
        "last_loss": float(loss),  # random tokens: about ln(vocab_size)
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", type=json.loads, required=True, help="n_layer, n_head, n_embd, n_positions")
    parser.add_argument("--vocab-size", type=int, required=True, help="the data's tokenizer size")
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (the compile among them)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps")
    parser.add_argument("--out", required=True, help="the JSON to write")
    args = parser.parse_args()
    result = ceiling(args.arch, args.vocab_size, args.batch_size, args.warmup, args.steps)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    mfu = f", MFU {result['mfu']:.3f}" if result["mfu"] else ""
    print(f"gpu_ceiling: {result['tokens_per_s']:,.0f} tokens/s{mfu}, peak {result['peak_memory_gb']} GB")


if __name__ == "__main__":
    main()
