"""Training throughput and model FLOPs utilisation (MFU), logged as ``perf/*`` with ``tokens_seen``;
FLOPs per token after PaLM (arXiv:2204.02311, appendix B), as nanoGPT counts them, over a dense
peak table of our own (docs/performance.md#throughput-in-the-logs)."""

from __future__ import annotations

import time
import warnings
from typing import Any

import torch
from lightning.fabric.utilities.throughput import get_available_flops
from lightning.pytorch.callbacks import ThroughputMonitor
from lightning.pytorch.trainer.states import RunningStage
from transformers import GPT2LMHeadModel

from bytecanary import keys
from bytecanary.versions import LIGHTNING, require, require_attrs

# PerfMonitor reuses ThroughputMonitor's timing (validation excluded) through its private
# per-step hook and throughput state; Lightning has no public hook for the rows it logs
_WHY = "PerfMonitor's override of ThroughputMonitor internals"

# Dense bf16/fp16 tensor-core peaks per GPU from NVIDIA's datasheets (the sparse figures
# are twice these). First match on the lower-case device name wins, so variants come first.
DENSE_BF16_PEAK: tuple[tuple[str, float], ...] = (
    ("h100 nvl", 835e12),
    ("h200 nvl", 835e12),
    ("h100 pcie", 756e12),
    ("h100", 989e12),  # SXM ("NVIDIA H100 80GB HBM3")
    ("h200", 989e12),  # SXM and GH200
    ("a100", 312e12),
)


def flops_per_token(model: GPT2LMHeadModel) -> int:
    """Training FLOPs (forward + backward) of one token at the model's full context length."""
    # 6 N + 12 L H Q T: N the matmul parameters (all but the position embedding; the tied
    # token embedding once, as the output projection), L layers, H heads, Q head width
    c = model.config
    n = sum(p.numel() for p in model.parameters()) - model.transformer.wpe.weight.numel()
    return 6 * n + 12 * c.n_layer * c.n_head * (c.n_embd // c.n_head) * c.n_positions


def compute_dtype(precision: str) -> torch.dtype:
    """The matmul dtype of a Lightning precision flag (``bf16-mixed`` -> bfloat16)."""
    return {"bf16": torch.bfloat16, "16": torch.float16, "64": torch.float64}.get(
        str(precision).split("-")[0], torch.float32
    )


def dense_peak_flops(device: torch.device, dtype: torch.dtype) -> float | None:
    """Our dense peak FLOP/s of one GPU at a 16-bit dtype; None for anything else."""
    if device.type != "cuda" or dtype not in (torch.bfloat16, torch.float16):
        return None
    name = torch.cuda.get_device_name(device).lower()
    return next((peak for chip, peak in DENSE_BF16_PEAK if chip in name), None)


def peak_flops(device: torch.device, dtype: torch.dtype) -> float | None:
    """Peak FLOP/s of one device: our dense table, then Lightning's; None where neither knows it."""
    return dense_peak_flops(device, dtype) or get_available_flops(device, dtype)


def perf_metrics(throughput: dict[str, float], world_size: int) -> dict[str, float]:
    """Lightning's ``Throughput.compute()`` as our keys: tokens and samples per second of all
    devices together, MFU per device (only where the peak is known)."""
    out = {}
    for theirs, ours, scale in (
        ("device/items_per_sec", "tokens_per_s", world_size),
        ("device/samples_per_sec", "samples_per_s", world_size),
        ("device/mfu", "mfu", 1),
    ):
        if theirs in throughput:
            out[keys.perf(ours)] = throughput[theirs] * scale
    return out


def _samples(batch: dict[str, torch.Tensor]) -> int:
    return batch["input_ids"].shape[0]


def _tokens(batch: dict[str, torch.Tensor]) -> int:
    """Target tokens (each window of T + 1 ids trains T), as ``tokens_seen`` counts them."""
    ids_BT = batch["input_ids"]
    return ids_BT.shape[0] * (ids_BT.shape[1] - 1)


class PerfMonitor(ThroughputMonitor):
    """Lightning's ``ThroughputMonitor`` logging ``perf/tokens_per_s``, ``perf/samples_per_s`` and
    ``perf/mfu`` at each log step, and ``perf/wall_seconds`` carried across resumes, so the share of a
    run spent in probes is read from the logs alone (the module supplies ``flops_per_batch``)."""

    def __init__(self) -> None:
        require("lightning", LIGHTNING, _WHY)
        require_attrs(ThroughputMonitor, ("_compute",), "lightning", LIGHTNING, _WHY)
        super().__init__(batch_size_fn=_samples, length_fn=_tokens)
        require_attrs(self, ("_throughputs", "kwargs"), "lightning", LIGHTNING, _WHY)
        self._wall_before = 0.0  # seconds of the run before this process resumed it
        self._wall_start = time.perf_counter()

    def state_dict(self) -> dict[str, Any]:
        return {"wall_seconds": self.wall_seconds()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._wall_before = float(state_dict.get("wall_seconds", 0.0))

    def wall_seconds(self) -> float:
        return self._wall_before + time.perf_counter() - self._wall_start

    def setup(self, trainer, pl_module, stage: str) -> None:
        self.kwargs.setdefault("window_size", trainer.log_every_n_steps + 1)
        peak = dense_peak_flops(trainer.strategy.root_device, compute_dtype(trainer.precision))
        with warnings.catch_warnings():
            if peak:  # Lightning would warn that it does not know a chip our table knows
                warnings.filterwarnings("ignore", message="FLOPs not found")
            super().setup(trainer, pl_module, stage)
        if peak:
            self.available_flops = peak
            for throughput in self._throughputs.values():
                throughput.available_flops = peak

    def on_train_start(self, trainer, *args: Any) -> None:
        super().on_train_start(trainer, *args)
        self._wall_start = time.perf_counter()

    def on_train_end(self, trainer, pl_module) -> None:
        """The last word: the final checkpoint's probes ran after the last log step."""
        row = {keys.perf("wall_seconds"): self.wall_seconds(), keys.TOKENS_SEEN: pl_module.tokens_seen}
        for logger in trainer.loggers:
            logger.log_metrics({**row, keys.STEP: trainer.global_step}, step=trainer.global_step)

    def _compute(self, trainer, iter_num: int | None = None) -> None:
        """Training rows only, renamed, on the ``tokens_seen`` axis (Lightning's own hook),
        written to the loggers at the step the row names, as Lightning writes a ``step`` key."""
        stage = trainer.state.stage
        if stage != RunningStage.TRAINING or not is_log_step(trainer):
            return
        metrics: dict[str, Any] = perf_metrics(self._throughputs[stage].compute(), trainer.world_size)
        metrics[keys.perf("wall_seconds")] = self.wall_seconds()
        metrics[keys.TOKENS_SEEN] = trainer.lightning_module.tokens_seen
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=trainer.global_step)
            logger.save()


def is_log_step(trainer) -> bool:
    """Whether this step writes logs, by Lightning's rule (its logger connector's ``should_update_logs``)
    from public attributes; called after the optimizer step, so ``global_step`` counts this one."""
    n = trainer.log_every_n_steps
    return bool(n) and (trainer.global_step % n == 0 or trainer.should_stop)
