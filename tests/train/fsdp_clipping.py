"""Two CPU processes train ByteLM under Lightning's FSDPStrategy (bf16-mixed, fused AdamW,
norm clipping) and check each step's clipping against the total norm computed by hand.
Run as a script: Lightning starts the second rank by running this file again."""

import sys

import lightning as L
import torch
import torch.distributed as dist
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.strategies import FSDPStrategy
from torch.distributed.fsdp import FullyShardedDataParallel
from torch.utils.data import DataLoader

from bytecanary.train.gpt import Block
from bytecanary.train.model import ArchConfig, OptimConfig
from bytecanary.train.module import ByteLM

CLIP = 0.05


class CpuFSDP(FSDPStrategy):
    """Lightning's FSDPStrategy wraps with ``device_id`` None on a CPU, which torch refuses;
    naming the CPU is all FSDP needs to shard over gloo."""

    def _setup_model(self, model: torch.nn.Module) -> torch.nn.Module:
        return FullyShardedDataParallel(
            model,
            mixed_precision=self.mixed_precision_config,
            sharding_strategy=self.sharding_strategy,
            device_id=torch.device("cpu"),
            **self.kwargs,
        )


class ClipCheck(Callback):
    """Keeps each rank's gradient shards before clipping and after the step (the optimizer
    steps on them; they are set to None only at the next step's start)."""

    def __init__(self) -> None:
        self.before: list[list[torch.Tensor]] = []
        self.after: list[list[torch.Tensor]] = []

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        self.before.append(self._grads(trainer))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.after.append(self._grads(trainer))

    @staticmethod
    def _grads(trainer) -> list[torch.Tensor]:
        return [p.grad.detach().clone() for p in trainer.strategy.model.parameters() if p.grad is not None]


def main() -> None:
    L.seed_everything(0, verbose=False)  # the same initial weights on both ranks
    arch = ArchConfig(n_layer=2, n_head=2, n_embd=32, n_positions=16)
    module = ByteLM(arch, OptimConfig(warmup_steps=0, fused=True), vocab_size=64)
    ids = torch.randint(0, 64, (16, 17), generator=torch.Generator().manual_seed(0))
    loader = DataLoader([{"input_ids": row} for row in ids], batch_size=4)
    check = ClipCheck()
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy=CpuFSDP(auto_wrap_policy={Block}),
        precision="bf16-mixed",
        gradient_clip_val=CLIP,
        callbacks=[check],
        max_steps=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        use_distributed_sampler=False,
    )
    trainer.fit(module, loader)
    assert trainer.optimizers[0].defaults["fused"] is True
    assert isinstance(trainer.strategy.model, FullyShardedDataParallel)
    assert len(check.before) == len(check.after) == 2
    norms = []
    for step, (before, after) in enumerate(zip(check.before, check.after, strict=True)):
        local = torch.stack([g.double().pow(2).sum() for g in before]).sum()
        dist.all_reduce(local)  # every rank holds a shard: the total norm is over all of them
        total = float(local.sqrt())
        scale = min(1.0, CLIP / (total + 1e-6))
        assert total > CLIP, f"step {step}: norm {total} needs no clipping"
        for got, grad in zip(after, before, strict=True):
            torch.testing.assert_close(got, grad * scale, rtol=1e-5, atol=1e-9)
        norms.append(round(total, 6))
    print(f"rank {trainer.global_rank}: ok, norms {norms} clipped to {CLIP}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
