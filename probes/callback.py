"""Fire the configured probes at every checkpoint of a training run.

Subclassing ``Checkpoint`` makes Lightning run this after ``ModelCheckpoint`` in the same
hook, so the probes see the weights just written. The model is put in eval mode under
``no_grad`` and restored after. Under DDP every rank probes its share of the samples,
and rank 0 aggregates the shares: the metrics equal a single-process run. Results are
logged to every logger with ``tokens_seen`` (W&B plots them beside ``val/ppl``) and
appended to ``probes.jsonl`` next to the checkpoints, with each probe's version and
fingerprint. A probe that raises is recorded as failed and training goes on, unless
``strict``.
"""

from __future__ import annotations

import time
import traceback
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.callbacks import Checkpoint
from lightning.pytorch.utilities import rank_zero_info

from probes.common import build_probes
from probes.records import append_record, make_record
from probes.registry import Probe


class ProbeCallback(Checkpoint):
    def __init__(
        self,
        probes: list[dict[str, Any] | Probe],
        every_tokens: int | None = None,
        strict: bool = False,
        out: str | Path | None = None,
        source: str | None = None,
    ) -> None:
        """
        Args:
            probes: ``[{name: level0, trial: true}, ...]``, as in the YAML ``probes`` section.
            every_tokens: also fire every this many training tokens (None: checkpoints only).
            strict: a failing probe stops training.
            out: records file (default: ``probes.jsonl`` beside the checkpoints folder).
            source: where ``probes`` came from (a YAML path), named by a bad spec's error.
        """
        self.probes = build_probes(probes, source)
        self.every_tokens, self.strict, self.out = every_tokens, strict, out
        self._prepared: list[Any] | None = None
        self._fingerprints: list[str] = []
        self._last_step = -1
        self._next_tokens = every_tokens or 0

    def _setup_probes(self, trainer) -> None:
        from transformers import AutoTokenizer

        dm = trainer.datamodule
        self._tokenizer = AutoTokenizer.from_pretrained(str(dm.tokenizer_dir))
        data_dir = Path(dm.data_dir)
        self._prepared = [p.prepare(self._tokenizer, data_dir) for p in self.probes]
        self._fingerprints = [p.fingerprint(data_dir) for p in self.probes]
        if self.out is None:
            ckpt_dir = getattr(trainer.checkpoint_callback, "dirpath", None) or trainer.default_root_dir
            self.out = Path(ckpt_dir).parent / "probes.jsonl" if ckpt_dir else Path("probes.jsonl")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if step == self._last_step:
            return
        ckpt = trainer.checkpoint_callback
        saved = ckpt is not None and getattr(ckpt, "_last_global_step_saved", -1) == step
        tokens = getattr(pl_module, "tokens_seen", None)
        due = bool(self.every_tokens) and tokens is not None and tokens >= self._next_tokens
        if saved or due:
            if due:
                while self._next_tokens <= tokens:
                    self._next_tokens += self.every_tokens
            # with no monitored metric, best_model_path is the step file just written
            path = (getattr(ckpt, "best_model_path", None) or ckpt._last_checkpoint_saved) if saved else None
            self.fire(trainer, pl_module, str(path) if path else None)

    def fire(self, trainer, pl_module, checkpoint: str | None) -> None:
        """Run every probe on the current weights (all ranks) and record the results."""
        if self._prepared is None:
            self._setup_probes(trainer)
        self._last_step = trainer.global_step
        model = getattr(pl_module, "model", pl_module)
        model = getattr(model, "_orig_mod", model)
        was_training = model.training
        model.eval()
        try:
            for probe, prepared, params in zip(self.probes, self._prepared, self._fingerprints, strict=True):
                self._run_one(trainer, pl_module, model, probe, prepared, params, checkpoint)
        finally:
            model.train(was_training)

    def _run_one(self, trainer, pl_module, model, probe: Probe, prepared, params: str, checkpoint) -> None:
        start = time.perf_counter()
        try:
            with torch.no_grad():
                payload: Any = probe.compute(
                    model, self._tokenizer, prepared, trainer.global_rank, trainer.world_size
                )
        except Exception as err:  # recorded, not raised: one probe must not stop training
            payload = {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()}
        payloads = _gather(payload, trainer.world_size)
        error, metrics = None, None
        if trainer.is_global_zero:
            failed = [p for p in payloads if isinstance(p, dict) and "error" in p]
            if failed:
                error = failed[0]["error"]
            else:
                try:
                    metrics = probe.aggregate(prepared, payloads)
                except Exception as err:
                    error = f"{type(err).__name__}: {err}"
            seconds = time.perf_counter() - start
            tokens = getattr(pl_module, "tokens_seen", None)
            record = make_record(
                checkpoint,
                trainer.global_step,
                tokens,
                probe.name,
                metrics,
                seconds,
                error,
                version=probe.version,
                params=params,
            )
            append_record(self.out, record)
            if metrics:
                for logger in trainer.loggers:
                    extra = {"tokens_seen": tokens} if tokens is not None else {}
                    logger.log_metrics({**metrics, **extra}, step=trainer.global_step)
            status = f"failed: {error}" if error else f"{len(metrics)} metrics"
            rank_zero_info(f"probe {probe.name} at step {trainer.global_step}: {seconds:.1f} s, {status}")
        failed_anywhere = trainer.strategy.broadcast(error is not None, src=0)
        if failed_anywhere and self.strict:
            raise RuntimeError(f"probe {probe.name} failed at step {trainer.global_step} (strict): {error}")


def _gather(payload: Any, world: int) -> list[Any]:
    if world == 1 or not torch.distributed.is_initialized():
        return [payload]
    gathered: list[Any] = [None] * world
    torch.distributed.all_gather_object(gathered, payload)
    return gathered
