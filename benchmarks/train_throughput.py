"""Training throughput: our LightningModule + DataModule vs a bare PyTorch loop.

Both train the same GPT-2 from the same initial weights on the same batches with the
same optimiser, schedule and gradient clipping; the timed window excludes the first
``--warmup`` steps. Prints tokens/s of each and Lightning's overhead. On a GPU it also
prints model FLOPs utilisation (nanoGPT's formula, dense bf16 peak).

    python benchmarks/train_throughput.py [--config configs/tiny.yaml] [--data data/default]
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import lightning as L
import torch
import yaml

from bytecanary.train.datamodule import ShardDataModule
from bytecanary.train.model import ArchConfig, OptimConfig, lr_lambda, param_groups
from bytecanary.train.module import ByteLM

PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12}  # dense, per GPU


class StepTimer(L.Callback):
    """Wall time from the start of step ``warmup`` to the end of training."""

    def __init__(self, warmup: int) -> None:
        self.warmup, self.start, self.seconds = warmup, 0.0, 0.0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.warmup and not self.start:
            _sync()
            self.start = time.perf_counter()

    def on_train_end(self, trainer, pl_module) -> None:
        _sync()
        self.seconds = time.perf_counter() - self.start


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def make(cfg: dict, data_dir: str) -> tuple[ByteLM, ShardDataModule]:
    arch = ArchConfig(**cfg["model"]["arch"])
    dm = ShardDataModule(data_dir, cfg["data"]["batch_size"], seq_len=arch.n_positions)
    torch.manual_seed(0)
    module = ByteLM(arch, OptimConfig(**cfg["model"].get("optim", {})), dm.vocab_size, dm.eos_token_id)
    return module, dm


def ours(cfg: dict, data_dir: str, steps: int, warmup: int, accelerator: str, precision: str) -> float:
    module, dm = make(cfg, data_dir)
    timer = StepTimer(warmup)
    trainer = L.Trainer(
        accelerator=accelerator,
        devices=1,
        precision=precision,
        max_steps=warmup + steps,
        max_epochs=-1,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        gradient_clip_val=1.0,
        callbacks=[timer],
    )
    trainer.fit(module, datamodule=dm)
    return timer.seconds


def bare(cfg: dict, data_dir: str, steps: int, warmup: int, device: str, precision: str) -> float:
    module, dm = make(cfg, data_dir)
    model = module.model.to(device).train()
    opt = torch.optim.AdamW(
        param_groups(model, module.optim.weight_decay),
        lr=module.optim.lr,
        betas=(module.optim.beta1, module.optim.beta2),
        fused=module.optim.fused,
    )
    total = warmup + steps
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: lr_lambda(s, module.optim.warmup_steps, total, module.optim.min_lr_ratio)
    )
    dtype = torch.bfloat16 if precision.startswith("bf16") else None
    start = 0.0
    for step, batch in enumerate(dm.train_dataloader()):
        if step == warmup:
            _sync()
            start = time.perf_counter()
        if step == total:
            break
        ids = batch["input_ids"].to(device)
        with torch.autocast(device_type=device, dtype=dtype, enabled=dtype is not None):
            loss = model(ids[:, :-1], ids[:, 1:]).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sched.step()
    _sync()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/tiny.yaml")
    parser.add_argument("--data", default="data/default")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    cfg = yaml.safe_load(Path(args.config).read_text(encoding="utf-8"))
    gpu = torch.cuda.is_available()
    device, accelerator = ("cuda", "gpu") if gpu else ("cpu", "cpu")
    precision = cfg["trainer"].get("precision", "32-true") if gpu else "32-true"
    tokens = args.steps * cfg["data"]["batch_size"] * cfg["model"]["arch"]["n_positions"]

    t_bare = min(bare(cfg, args.data, args.steps, args.warmup, device, precision) for _ in range(args.repeat))
    t_ours = min(
        ours(cfg, args.data, args.steps, args.warmup, accelerator, precision) for _ in range(args.repeat)
    )

    name = torch.cuda.get_device_name() if gpu else platform.processor() or platform.machine()
    print(f"torch {torch.__version__}  lightning {L.__version__}  {name}  threads {torch.get_num_threads()}")
    print(f"{args.config}: {args.steps} timed steps x {tokens // args.steps:,} tokens, {precision}")
    print(f"{'loop':<36}{'tokens/s':>12}{'ratio':>8}")
    print(f"{'bare PyTorch loop':<36}{tokens / t_bare:>12,.0f}{1.0:>8.3f}")
    print(f"{'ByteLM + ShardDataModule (Lightning)':<36}{tokens / t_ours:>12,.0f}{t_bare / t_ours:>8.3f}")
    print(f"Lightning overhead: {100 * (t_ours / t_bare - 1):+.1f}% (target <= 5%)")
    if gpu:
        arch = cfg["model"]["arch"]
        module, _ = make(cfg, args.data)
        n = sum(p.numel() for p in module.model.parameters())
        flops_per_token = 6 * n + 12 * arch["n_layer"] * arch["n_embd"] * arch["n_positions"]
        peak = next((v for k, v in PEAK_BF16.items() if k in name), None)
        if peak:
            print(f"MFU: {flops_per_token * tokens / t_ours / peak:.1%} of {peak / 1e12:.0f} TFLOP/s")


if __name__ == "__main__":
    main()
