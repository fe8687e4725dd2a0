"""Checkpoints: atomic writes, a log-spaced early schedule, safe loading, HF export.

UTF-8 validity changes fastest early in training, so besides every ``every_n_steps``
the schedule saves at steps 1, 2, 4, ..., ``log_spaced_until`` (as Pythia does). Every
write goes to a temporary file in the target folder, is fsynced and renamed, so a crash
mid-save never loses the previous checkpoint and ``last.ckpt`` always loads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO

from bytecanary.checkpoints import (
    checkpoint_meta,
    gpt2_from_checkpoint,
    load_checkpoint,
    tokenizer_dir,
)
from bytecanary.io import atomic_dir, atomic_path, refuse_foreign_dir


class AtomicCheckpointIO(TorchCheckpointIO):
    """Write via temp file + fsync + rename in the target folder; load with weights_only."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options=None) -> None:
        with atomic_path(path) as tmp:
            torch.save(checkpoint, tmp)

    def load_checkpoint(self, path, map_location=None, weights_only=None) -> dict[str, Any]:
        return load_checkpoint(path, map_location if map_location is not None else "cpu")


def log_spaced_steps(until: int | None) -> set[int]:
    """{1, 2, 4, ..., until}."""
    steps, s = set(), 1
    while until and s <= until:
        steps.add(s)
        s *= 2
    return steps


class ScheduledCheckpoint(ModelCheckpoint):
    """Save ``step{N}.ckpt`` every ``every_n_steps``, at the log-spaced early steps and at
    the last step, keeping all of them, plus ``last.ckpt``."""

    def __init__(self, dirpath: str | Path, every_n_steps: int, log_spaced_until: int | None) -> None:
        super().__init__(
            dirpath=dirpath,
            filename="step{step:07d}",
            auto_insert_metric_name=False,
            every_n_train_steps=1,
            save_top_k=-1,
            save_last=True,
        )
        self.every_n_steps = every_n_steps
        self.early_steps = log_spaced_steps(log_spaced_until)

    def is_scheduled(self, step: int, max_steps: int) -> bool:
        return step % self.every_n_steps == 0 or step in self.early_steps or step == max_steps

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.is_scheduled(trainer.global_step, trainer.max_steps):
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)


RUN_FOLDER_MARKS = ("checkpoints", "metrics.jsonl", "probes.jsonl", "config.yaml")


def export(ckpt_path: str | Path, out_dir: str | Path, force: bool = False) -> Path:
    """Lightning checkpoint -> ``save_pretrained`` folder (safetensors + tokenizer) that
    ``AutoModelForCausalLM`` / ``AutoTokenizer`` load with no project code. A non-empty
    ``out_dir`` is replaced only with ``force``, and a run folder never."""
    from transformers import AutoTokenizer

    refuse_foreign_dir(out_dir, force, RUN_FOLDER_MARKS)
    ckpt = load_checkpoint(ckpt_path)
    meta = checkpoint_meta(ckpt, ckpt_path)
    model = gpt2_from_checkpoint(ckpt, ckpt_path)
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir(meta, ckpt_path)))
    out = Path(out_dir)
    with atomic_dir(out) as tmp:
        model.save_pretrained(str(tmp), safe_serialization=True)
        tokenizer.save_pretrained(str(tmp))
        info = {k: meta.get(k) for k in ("step", "tokens_seen", "tokenizer_hash")}
        info["data_dir"] = str(tokenizer_dir(meta, ckpt_path).parent)
        info["checkpoint"] = str(ckpt_path)
        (tmp / "bytecanary.json").write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
    return out
