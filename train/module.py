"""The LightningModule: next-token loss on GPT-2, perplexity per language, and ``tokens_seen`` (every chart's
x-axis); its checkpoints carry what a bit-for-bit resume and a moved run folder need (docs/training.md).
Shape suffixes: B batch, T time (tokens), V vocabulary, L languages."""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_info

from bytecanary import keys
from bytecanary.train.gpt import GPT
from bytecanary.train.model import (
    ArchConfig,
    OptimConfig,
    build_model,
    count_parameters,
    lr_lambda,
    param_groups,
)
from bytecanary.train.throughput import flops_per_token

DEFAULT_ARCH = ArchConfig()  # read, never mutated: one instance serves every ByteLM
DEFAULT_OPTIM = OptimConfig()


def _as(cls: type, value: Any) -> Any:
    return value if isinstance(value, cls) else cls(**value)


def weights_config(config: dict[str, Any]) -> dict[str, Any]:
    """The run config a checkpoint states, less ``run.resume``: whether a step was trained on
    from a saved state does not change its weights (a step retrained after a kill is written
    bit for bit again), so it must not change the weights file's header and identity either."""
    run = config.get("run")
    if not isinstance(run, dict):
        return config
    return {**config, "run": {k: v for k, v in run.items() if k != "resume"}}


class ByteLM(L.LightningModule):
    """GPT-2 (``GPT``, ``GPT2LMHeadModel``'s weights) trained on byte-fallback token shards."""

    def __init__(
        self,
        arch: ArchConfig = DEFAULT_ARCH,
        optim: OptimConfig = DEFAULT_OPTIM,
        vocab_size: int = 8192,
        eos_token_id: int | None = None,
        compile: bool = False,
    ) -> None:
        """
        Args:
            arch: GPT-2 shape.
            optim: AdamW and learning-rate schedule.
            vocab_size: tokenizer vocabulary (linked from the data).
            eos_token_id: the tokenizer's end of text (linked from the data).
            compile: wrap the model in ``torch.compile``.
        """
        super().__init__()
        self.arch = _as(ArchConfig, arch)
        self.optim = _as(OptimConfig, optim)
        # plain types only, so checkpoints load with weights_only=True
        self.save_hyperparameters(
            {
                "arch": asdict(self.arch),
                "optim": asdict(self.optim),
                "vocab_size": vocab_size,
                "eos_token_id": eos_token_id,
                "compile": compile,
            }
        )
        self.model = build_model(self.arch, vocab_size, eos_token_id)
        self.compile = compile
        self.flops_per_token = flops_per_token(self.model)
        self.flops_per_batch: int | None = None  # of the last training batch, for perf/mfu
        self.tokens_seen = 0
        self.train_row: dict[str, Any] | None = None  # the last step's train metrics
        self.run_config: dict[str, Any] = {}  # the resolved CLI config, stored in checkpoints
        # where checkpoints say the tokenizer is: relative to their own folder (the run's copy,
        # set by the CLI) or, by default, the data folder's, absolute
        self.tokenizer_path: str | None = None
        self.data_dir: str | None = None  # absolute: the eval sets the probes read
        self.languages: list[str] = []

    def configure_model(self) -> None:
        if self.compile and not isinstance(self.model, torch._dynamo.eval_frame.OptimizedModule):
            self.model = torch.compile(self.model)

    def setup(self, stage: str) -> None:
        dm = self.trainer.datamodule
        if dm is not None:
            self.languages = list(dm.languages)
            self.tokenizer_path = self.tokenizer_path or str(Path(dm.tokenizer_dir).resolve())
            self.data_dir = str(Path(dm.data_dir).resolve())
            self._tokenizer_hash = dm.index["tokenizer_hash"]

    def on_fit_start(self) -> None:
        rank_zero_info(f"model: GPT-2 {self.arch}, {count_parameters(self.model) / 1e6:.1f}M parameters")

    def _loss_BT(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        ids_BT = batch["input_ids"]
        x_BT, y_BT = ids_BT[:, :-1], ids_BT[:, 1:]
        return self.model(x_BT, y_BT)

    def _exact(self, value: float) -> torch.Tensor:
        # float64 so that token counts in the billions log exactly
        return torch.tensor(float(value), dtype=torch.float64)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss_BT = self._loss_BT(batch)
        # every rank trains a batch of the same shape, so no all-reduce (a host sync) is needed
        self.tokens_seen += loss_BT.numel() * self.trainer.world_size
        self.flops_per_batch = self.flops_per_token * loss_BT.numel()
        loss = loss_BT.mean()
        lr = self.optimizers().param_groups[0]["lr"]
        self.log_dict(
            {
                keys.train("loss"): loss.detach(),
                keys.train("lr"): self._exact(lr),
                keys.TOKENS_SEEN: self._exact(self.tokens_seen),
                keys.STEP: self._exact(self.global_step + 1),
            },
            on_step=True,
            on_epoch=False,
        )
        # Lightning writes this row to the loggers only after the step's checkpoint is
        # saved; the checkpoint carries it so a run killed in between loses nothing
        # the loss stays a tensor here (no device sync in the step); it becomes a float on save
        self.train_row = {
            keys.STEP: self.global_step + 1,
            keys.train("loss"): loss.detach(),
            keys.train("lr"): lr,
            keys.TOKENS_SEEN: self.tokens_seen,
        }
        self.log("loss", loss.detach(), prog_bar=True, logger=False)
        return loss

    def on_validation_epoch_start(self) -> None:
        n = max(len(self.languages), 1)
        self._val_sum_L = torch.zeros(n, dtype=torch.float64, device=self.device)
        self._val_count_L = torch.zeros(n, dtype=torch.float64, device=self.device)

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        loss_BT = self._loss_BT(batch)
        lang_B = batch["lang"]
        self._val_sum_L.index_add_(0, lang_B, loss_BT.sum(dim=1).double())
        self._val_count_L.index_add_(0, lang_B, torch.full_like(lang_B, loss_BT.shape[1]).double())

    def on_validation_epoch_end(self) -> None:
        if self.trainer.sanity_checking:
            return
        sum_L = self.trainer.strategy.reduce(self._val_sum_L, reduce_op="sum")
        count_L = self.trainer.strategy.reduce(self._val_count_L, reduce_op="sum")
        loss = float(sum_L.sum() / count_L.sum())
        metrics: dict[str, Any] = {keys.val("loss"): loss, keys.val_ppl(): math.exp(loss)}
        for lang, s, c in zip(self.languages, sum_L.tolist(), count_L.tolist(), strict=True):
            if c > 0:
                metrics[keys.val_ppl(lang)] = math.exp(s / c)
        metrics[keys.TOKENS_SEEN] = self._exact(self.tokens_seen)
        metrics[keys.STEP] = self._exact(self.global_step)
        self.log_dict(metrics, prog_bar=False)
        self.log("val_ppl", metrics[keys.val_ppl()], prog_bar=True, logger=False)

    def configure_optimizers(self):
        opt = torch.optim.AdamW(
            param_groups(self.model, self.optim.weight_decay),
            lr=self.optim.lr,
            betas=(self.optim.beta1, self.optim.beta2),
            fused=self.optim.fused,
        )
        total = self.trainer.max_steps  # not estimated_stepping_batches (Lightning #20550)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: lr_lambda(s, self.optim.warmup_steps, total, self.optim.min_lr_ratio)
        )
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def configure_gradient_clipping(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Clip by total norm as torch does for every optimizer and strategy: Lightning 2.6's own
        clipping refuses a fused AdamW under mixed precision, and norm clipping under FSDP."""
        if gradient_clip_algorithm not in (None, "norm"):
            super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)
            return
        if not gradient_clip_val:
            return
        scaler = getattr(self.trainer.precision_plugin, "scaler", None)  # 16-mixed only
        if scaler is not None and getattr(optimizer, "_step_supports_amp_scaling", False):
            # Lightning leaves a fused optimizer's gradients scaled for its step to unscale;
            # unscaled here, the scaler's step passes found_inf and no scale to the optimizer
            scaler.unscale_(optimizer)
        from torch.distributed.fsdp import FullyShardedDataParallel

        wrapped = self.trainer.strategy.model
        if isinstance(wrapped, FullyShardedDataParallel):  # each rank holds a shard of the gradients
            wrapped.clip_grad_norm_(gradient_clip_val)
        else:
            torch.nn.utils.clip_grad_norm_(self.parameters(), gradient_clip_val)

    def checkpoint_info(self) -> dict[str, Any]:
        """What every checkpoint says about itself, in JSON types: the weights file stores it
        as text, the full state (``on_save_checkpoint``) adds the RNG state."""
        return {
            "step": self.global_step,
            "tokens_seen": self.tokens_seen,
            "config": weights_config(self.run_config),
            "tokenizer_path": self.tokenizer_path,
            "data_dir": self.data_dir,
            "tokenizer_hash": getattr(self, "_tokenizer_hash", None),
            "gpt2_config": self._plain_model().config.to_dict(),
            "train_row": {k: float(v) if torch.is_tensor(v) else v for k, v in (self.train_row or {}).items()}
            or None,
        }

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["bytecanary"] = {**self.checkpoint_info(), "rng": torch.get_rng_state()}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        meta = checkpoint.get("bytecanary", {})
        self.tokens_seen = int(meta.get("tokens_seen", 0))
        self.train_row = meta.get("train_row")
        if "rng" in meta:
            torch.set_rng_state(meta["rng"])

    def hf_model(self) -> torch.nn.Module:
        """The live weights as a ``GPT2LMHeadModel`` (shared, not copied): what probes read."""
        return self._plain_model().hf()

    def _plain_model(self) -> GPT:
        return getattr(self.model, "_orig_mod", self.model)
