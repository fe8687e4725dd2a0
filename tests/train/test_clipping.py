"""Training runs the GPU's optimizer on the CPU: fused AdamW under bf16-mixed (and 16-mixed
with its GradScaler) clips by total norm exactly as ``clip_grad_norm_`` by hand, and under
FSDP over two gloo processes through the wrapped module's own ``clip_grad_norm_``."""

import re
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.plugins import MixedPrecision
from torch.utils.data import DataLoader

from bytecanary.train.model import ArchConfig, OptimConfig
from bytecanary.train.module import ByteLM

from .. import warm

CLIP = 0.05  # a random GPT-2's first gradients have a norm far above it: every step clips
STEPS = 3


class Gradients(Callback):
    """Every step's gradients before clipping, the GradScaler's scale then, and the gradients
    the optimizer stepped on (Lightning sets them to None only at the next step's start)."""

    def __init__(self) -> None:
        self.before: list[list[torch.Tensor]] = []
        self.scales: list[float] = []
        self.after: list[list[torch.Tensor]] = []

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        self.before.append([p.grad.detach().clone() for p in pl_module.parameters()])
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        self.scales.append(float(scaler.get_scale()) if scaler is not None else 1.0)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.after.append([p.grad.detach().clone() for p in pl_module.parameters()])


def precision_of(name: str) -> dict:
    """Trainer arguments of a precision; 16-mixed with its GradScaler named, since Lightning
    turns a plain ``16-mixed`` into bf16 on a CPU."""
    if name == "16-mixed":
        return {"plugins": [MixedPrecision("16-mixed", "cpu", torch.amp.GradScaler("cpu"))]}
    return {"precision": name}


def train_tiny(precision: str) -> tuple[L.Trainer, Gradients]:
    module = ByteLM(
        ArchConfig(n_layer=2, n_head=2, n_embd=32, n_positions=16),
        OptimConfig(warmup_steps=0),  # fused, the default: the GPU's optimizer
        vocab_size=64,
    )
    ids = torch.randint(0, 64, (4 * STEPS, 17), generator=torch.Generator().manual_seed(0))
    grads = Gradients()
    trainer = L.Trainer(
        accelerator="cpu",
        **precision_of(precision),
        gradient_clip_val=CLIP,
        max_steps=STEPS,
        callbacks=[grads],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, DataLoader([{"input_ids": row} for row in ids], batch_size=4))
    return trainer, grads


def clipped_by_hand(grads: list[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """``clip_grad_norm_`` on copies of ``grads``: (total norm before, clipped gradients)."""
    params = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
    for param, grad in zip(params, grads, strict=True):
        param.grad = grad.clone()
    norm = torch.nn.utils.clip_grad_norm_(params, CLIP)
    return norm, [p.grad for p in params]


@pytest.mark.parametrize("precision", ["bf16-mixed", "16-mixed"])
def test_fused_adamw_clips_by_norm_as_clip_grad_norm_by_hand(precision):
    trainer, grads = train_tiny(precision)
    assert trainer.optimizers[0].defaults["fused"] is True and trainer.precision == precision
    assert all(scale > 1 for scale in grads.scales) == (precision == "16-mixed")
    assert trainer.global_step == STEPS and len(grads.before) == len(grads.after) == STEPS
    for before, scale, after in zip(grads.before, grads.scales, grads.after, strict=True):
        norm, by_hand = clipped_by_hand([g / scale for g in before])  # 16-mixed: a power of two
        assert norm > CLIP
        for got, want in zip(after, by_hand, strict=True):
            torch.testing.assert_close(got, want, rtol=0, atol=0)
        total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in after]))
        assert float(total) == pytest.approx(CLIP, rel=1e-4)


@pytest.mark.slow
def test_fsdp_clips_by_norm_over_two_cpu_processes():
    script = Path(__file__).with_name("fsdp_clipping.py")
    proc = warm.run([sys.executable, str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    done = sorted(re.findall(r"rank (\d): ok, norms (\[[^\]]*\])", proc.stdout))  # the ranks share a pipe
    assert [rank for rank, _ in done] == ["0", "1"], proc.stdout + proc.stderr[-3000:]
    assert done[0][1] == done[1][1]  # the same total norm on both ranks
