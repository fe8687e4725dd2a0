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

from bytecanary.errors import BytecanaryError
from bytecanary.io import atomic_dir, atomic_path


def load_checkpoint(path: str | Path, map_location: Any = "cpu") -> dict[str, Any]:
    """``torch.load`` with ``weights_only=True``; a missing, truncated or corrupt file
    becomes one clear error naming it."""
    path = Path(path)
    if not path.is_file():
        raise BytecanaryError(f"{path}: no such checkpoint file")
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # pickle, zip and torch errors all mean "unreadable"
        first = str(err).strip().splitlines()[0][:200] if str(err).strip() else ""
        reason = f"{type(err).__name__}: {first}"
        raise BytecanaryError(
            f"{path}: not a loadable checkpoint (truncated or corrupt?): {reason}"
        ) from None


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

    def __init__(
        self, dirpath: str | Path, every_n_steps: int, log_spaced_until: int | None
    ) -> None:
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


def export(ckpt_path: str | Path, out_dir: str | Path) -> Path:
    """Lightning checkpoint -> ``save_pretrained`` folder (safetensors + tokenizer) that
    ``AutoModelForCausalLM`` / ``AutoTokenizer`` load with no project code."""
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    ckpt = load_checkpoint(ckpt_path)
    meta = ckpt.get("bytecanary")
    if not isinstance(meta, dict) or "gpt2_config" not in meta:
        raise BytecanaryError(f"{ckpt_path}: not a bytecanary checkpoint (no 'bytecanary' section)")
    model = GPT2LMHeadModel(GPT2Config.from_dict(meta["gpt2_config"]))
    state = {
        k.removeprefix("model.").replace("_orig_mod.", ""): v
        for k, v in ckpt["state_dict"].items()
        if k.startswith("model.")
    }
    result = model.load_state_dict(state, strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise BytecanaryError(
            f"{ckpt_path}: weights do not fit the GPT-2 config "
            f"(missing {result.missing_keys[:3]}, unexpected {result.unexpected_keys[:3]})"
        )
    tok_path = Path(meta.get("tokenizer_path") or "")
    if not (tok_path / "tokenizer.json").is_file():
        raise BytecanaryError(f"{ckpt_path}: its tokenizer folder {tok_path} is missing")
    tokenizer = AutoTokenizer.from_pretrained(str(tok_path))
    out = Path(out_dir)
    with atomic_dir(out) as tmp:
        model.save_pretrained(str(tmp), safe_serialization=True)
        tokenizer.save_pretrained(str(tmp))
        info = {k: meta.get(k) for k in ("step", "tokens_seen", "tokenizer_hash")}
        info["checkpoint"] = str(ckpt_path)
        (tmp / "bytecanary.json").write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
    return out
