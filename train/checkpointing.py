"""Checkpoints: atomic writes, a log-spaced early schedule, safe loading, HF export.

UTF-8 validity changes fastest early in training, so besides every ``every_n_steps``
the schedule saves at steps 1, 2, 4, ..., ``log_spaced_until`` (as Pythia does). Every
write goes to a temporary file in the target folder, is fsynced and renamed, so a crash
mid-save never loses the previous checkpoint; a full disk is an error naming the file.
Resuming takes the newest checkpoint that loads, by step: a truncated or corrupt file is
skipped with a warning, never hiding the good ones. The run folder keeps a copy of the
tokenizer, which checkpoints name relative to themselves, so a run folder is self-contained.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO

from bytecanary.checkpoints import (
    checkpoint_data_dir,
    checkpoint_meta,
    gpt2_from_checkpoint,
    load_checkpoint,
    step_checkpoints,
    step_of,
    tokenizer_dir,
)
from bytecanary.errors import BytecanaryError
from bytecanary.io import atomic_dir, atomic_path, named, refuse_foreign_dir, warn


class _KeepWriteError:
    """A file for ``torch.save`` that keeps the ``OSError`` of a failed write: torch turns it
    into a RuntimeError that no longer says why (disk full, file too large)."""

    def __init__(self, f: Any) -> None:
        self.f, self.error = f, None

    def write(self, data: Any) -> int:
        try:
            return self.f.write(data)
        except OSError as err:
            self.error = err
            raise

    def flush(self) -> None:
        self.f.flush()


class AtomicCheckpointIO(TorchCheckpointIO):
    """Write via temp file + fsync + rename in the target folder; load with weights_only."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options=None) -> None:
        with atomic_path(path) as tmp, open(tmp, "wb") as f:
            out = _KeepWriteError(f)
            try:
                torch.save(checkpoint, out)
            except RuntimeError:
                if out.error is None:
                    raise
                raise named(out.error, path) from None

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
            enable_version_counter=False,  # a resumed run rewrites a step in place (bit for bit)
        )
        self.every_n_steps = every_n_steps
        self.early_steps = log_spaced_steps(log_spaced_until)

    def is_scheduled(self, step: int, max_steps: int) -> bool:
        return step % self.every_n_steps == 0 or step in self.early_steps or step == max_steps

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.is_scheduled(trainer.global_step, trainer.max_steps):
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)


def _loadable_step(path: Path) -> int | None:
    """The checkpoint's step, or None (with a warning naming it) when it does not load."""
    try:
        return int(checkpoint_meta(load_checkpoint(path), path)["step"])
    except BytecanaryError as err:
        warn(f"{err}; skipped")
        return None


def latest_checkpoint(folder: Path) -> Path | None:
    """The newest checkpoint that loads, by step (not mtime): ``last.ckpt``, or a newer step
    file when a crash came between writing it and updating ``last.ckpt``. Corrupt ones are
    skipped with a warning; None when nothing loads."""
    last = folder / "last.ckpt"
    last_step = _loadable_step(last) if last.is_file() else None
    for path in reversed(step_checkpoints(folder) if folder.is_dir() else []):
        if last_step is not None and step_of(path.name) <= last_step:
            break
        if _loadable_step(path) is not None:
            return path
    return last if last_step is not None else None


def keep_tokenizer(source: Path, run_dir: Path, copy: bool = True) -> str:
    """Copy the tokenizer folder into the run (``copy``: rank 0 only), so its checkpoints load
    from any working directory, after the data folder moved; returns the path checkpoints
    store, relative to the checkpoints folder. A copy that differs means another tokenizer
    trained this run: an error, not a silent swap under the old checkpoints."""
    target = run_dir / "tokenizer"
    if copy and not target.exists():
        with atomic_dir(target) as tmp:
            shutil.copytree(source, tmp, dirs_exist_ok=True)
    elif copy and (target / "tokenizer.json").read_bytes() != (source / "tokenizer.json").read_bytes():
        raise BytecanaryError(f"{target}: differs from {source}: this run was trained with another tokenizer")
    return os.path.relpath(target, run_dir / "checkpoints")


RUN_FOLDER_MARKS = ("checkpoints", "metrics.jsonl", "probes.jsonl", "config.yaml")


def export(ckpt_path: str | Path, out_dir: str | Path, force: bool = False) -> Path:
    """Lightning checkpoint -> ``save_pretrained`` folder (safetensors + tokenizer) that
    ``AutoModelForCausalLM`` / ``AutoTokenizer`` load with no project code. A non-empty
    ``out_dir`` is replaced only with ``force``, and a run folder never. The folder is built
    beside ``out_dir`` and renamed into place, so a failed export leaves it as it was."""
    from safetensors import SafetensorError
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    refuse_foreign_dir(out_dir, force, RUN_FOLDER_MARKS)
    ckpt = load_checkpoint(ckpt_path)
    meta = checkpoint_meta(ckpt, ckpt_path)
    model = gpt2_from_checkpoint(ckpt, ckpt_path)
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir(meta, ckpt_path)))
    out = Path(out_dir)
    hf_logging.disable_progress_bar()  # one file: a bar on stderr says nothing
    with atomic_dir(out) as tmp:
        try:
            model.save_pretrained(str(tmp), safe_serialization=True)
        except SafetensorError as err:  # its I/O errors (disk full) arrive as SafetensorError
            raise BytecanaryError(f"{out / 'model.safetensors'}: {' '.join(str(err).split())}") from None
        tokenizer.save_pretrained(str(tmp))
        info = {k: meta.get(k) for k in ("step", "tokens_seen", "tokenizer_hash")}
        info["data_dir"] = str(checkpoint_data_dir(meta, ckpt_path))
        info["checkpoint"] = str(ckpt_path)
        (tmp / "bytecanary.json").write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
    return out
