"""Checkpoints on a log-spaced + regular schedule, since UTF-8 validity moves fastest early: a weights
file kept per step for the probes, one rolling training state for resume, atomic writes and safe loads
(docs/training.md#checkpoints, docs/faults.md)."""

from __future__ import annotations

import fcntl
import os
import shutil
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO

from bytecanary.checkpoints import (
    WEIGHTS,
    checkpoint_meta,
    load_checkpoint,
    read_heartbeat,
    reported,
    save_weights,
    step_of,
    training_states,
)
from bytecanary.errors import BytecanaryError
from bytecanary.io import atomic_dir, atomic_path, named, warn
from bytecanary.train.model import count_parameters
from bytecanary.versions import LIGHTNING, require, require_attrs

# ModelCheckpoint's private names ScheduledCheckpoint overrides or reads: Lightning has no public
# way to link ``last.ckpt`` atomically, to skip the full copy it writes without a step file, or
# to name the weights file exactly as the step file
_PRIVATE_METHODS = (
    "_save_last_checkpoint",
    "_link_checkpoint",
    "_should_skip_saving_checkpoint",
    "_monitor_candidates",
)
_PRIVATE_STATE = ("_last_global_step_saved", "_last_checkpoint_saved")
_WHY = "ScheduledCheckpoint's overrides of ModelCheckpoint internals"


class _KeepWriteError:
    """A file for ``torch.save`` that keeps the ``OSError`` of a failed write: torch turns it
    into a RuntimeError that does not say why (disk full, file too large)."""

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


# What an estimate allows for headers, per file and per tensor, above the tensors' bytes: the
# weights file's JSON header and metadata (the run's config), the full state's pickle, zip
# records and RNG state. Measured: 6 KB / 46 KB on the micro model (28 tensors), 34 KB /
# 358 KB on the 355M (292 tensors, docs/performance.md); these allow about twice that.
WEIGHTS_HEADER = (8 * 1024, 256)
STATE_HEADER = (64 * 1024, 2048)


def checkpoint_bytes(model: torch.nn.Module, weights_dtype: str) -> tuple[int, int]:
    """Bytes of (a weights file, a full training state) of ``model``, headers included, a little
    over the real files, so a disk sized by them never fills; works on the meta device."""
    n, tensors = count_parameters(model), len(list(model.parameters()))  # the tied embedding once
    weights = n * getattr(torch, weights_dtype).itemsize + WEIGHTS_HEADER[0] + tensors * WEIGHTS_HEADER[1]
    # the full state: fp32 master weights and AdamW's two fp32 moments, 12 bytes a parameter
    return weights, n * 12 + STATE_HEADER[0] + tensors * STATE_HEADER[1]


def human_bytes(n: float) -> str:
    """``2.1 MB``: decimal units, as disks are sold."""
    units = ["B", "KB", "MB", "GB", "TB"]
    while n >= 1000 and len(units) > 1:
        n, units = n / 1000, units[1:]
    return f"{n:.1f} {units[0]}"


class ScheduledCheckpoint(ModelCheckpoint):
    """At each scheduled step: the weights file ``step{N}.safetensors`` (kept), then the full
    training state ``step{N}.ckpt`` with ``last.ckpt`` linked to it; then the older full states
    are deleted, but multiples of ``keep_state_every``."""

    def __init__(
        self,
        dirpath: str | Path,
        every_n_steps: int,
        log_spaced_until: int | None,
        weights_dtype: str = "bfloat16",
        keep_state_every: int | None = None,
    ) -> None:
        require("lightning", LIGHTNING, _WHY)
        require_attrs(ModelCheckpoint, _PRIVATE_METHODS, "lightning", LIGHTNING, _WHY)
        super().__init__(
            dirpath=dirpath,
            filename="step{step:07d}",
            auto_insert_metric_name=False,
            every_n_train_steps=1,
            save_top_k=-1,  # every step file is written; deleting old ones is ours (_drop_old_states)
            save_last="link",
            enable_version_counter=False,  # a resumed run rewrites a step in place (bit for bit)
        )
        require_attrs(self, _PRIVATE_STATE, "lightning", LIGHTNING, _WHY)
        self.every_n_steps = every_n_steps
        self.early_steps = log_spaced_steps(log_spaced_until)
        self.weights_dtype = weights_dtype
        self.keep_state_every = keep_state_every
        self.weights_path: Path | None = None  # the weights file written at the current step

    def is_scheduled(self, step: int, max_steps: int) -> bool:
        return step % self.every_n_steps == 0 or step in self.early_steps or step == max_steps

    def scheduled_steps(self, max_steps: int) -> list[int]:
        """Every planned checkpoint step up to ``max_steps``, in order."""
        return [s for s in range(1, max_steps + 1) if self.is_scheduled(s, max_steps)]

    def keeps_state(self, step: int) -> bool:
        return bool(self.keep_state_every) and step % self.keep_state_every == 0

    def disk_use(self, model: torch.nn.Module, max_steps: int) -> tuple[int, int, int]:
        """(full states left at the end, bytes at the end, most bytes held at once) by ``max_steps``;
        the peak counts each full state written beside the previous one, deleted only after it."""
        weights, state = checkpoint_bytes(model, self.weights_dtype)
        steps = self.scheduled_steps(max_steps)
        held: set[int] = set()
        peak = 0
        for i, step in enumerate(steps, start=1):
            held.add(step)  # beside the newest of the older ones, before _drop_old_states
            peak = max(peak, i * weights + len(held) * state)
            held = {s for s in held if s == step or self.keeps_state(s)}
        return len(held), len(steps) * weights + len(held) * state, peak

    def disk_plan(self, model: torch.nn.Module, max_steps: int) -> str:
        """One line: bytes per checkpoint, the disk the schedule fills by ``max_steps`` (every
        weights file, the kept full states and the newest) and the most it holds at once."""
        steps = len(self.scheduled_steps(max_steps))
        weights, state = checkpoint_bytes(model, self.weights_dtype)
        states, end, peak = self.disk_use(model, max_steps)
        return (
            f"checkpoints: {steps} x {human_bytes(weights)} weights ({self.weights_dtype}) "
            f"+ {states} x {human_bytes(state)} training state = {human_bytes(end)} projected, "
            f"{human_bytes(peak)} at peak while a training state is replaced"
        )

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.weights_path = None
        step = trainer.global_step
        if not self.is_scheduled(step, trainer.max_steps) or self._should_skip_saving_checkpoint(trainer):
            return
        # the weights file first: a crash before the full state retrains this step and rewrites it bit for bit
        self.weights_path = self._save_weights(trainer, pl_module)
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        if trainer.is_global_zero and self._last_global_step_saved == step:
            self._drop_old_states(step)

    def _save_weights(self, trainer, pl_module) -> Path:
        """Every rank gathers the weights (FSDP shards them), rank 0 writes the file, and the
        others wait for it, so every rank can read it."""
        name = self.format_checkpoint_name(self._monitor_candidates(trainer))
        path = Path(name).with_suffix(WEIGHTS)
        state = trainer.strategy.lightning_module_state_dict()
        if trainer.is_global_zero:
            save_weights(path, state, pl_module.checkpoint_info(), self.weights_dtype)
        trainer.strategy.barrier()
        return path

    def _drop_old_states(self, newest: int) -> None:
        """Delete the full states older than ``newest``, but those ``keep_state_every`` keeps
        (each step's weights file stays). Lightning's own records name only the newest, so
        none goes stale."""
        for path in training_states(self.dirpath):
            step = step_of(path.name)
            if step < newest and not self.keeps_state(step):
                path.unlink(missing_ok=True)

    def _save_last_checkpoint(self, trainer, monitor_candidates) -> None:
        """``last.ckpt`` is only ever a link to a step file: without one saved in this process
        (a resumed run that is already done), Lightning would write a full copy."""
        if self._last_checkpoint_saved:
            super()._save_last_checkpoint(trainer, monitor_candidates)

    @staticmethod
    def _link_checkpoint(trainer, filepath: str, linkpath: str) -> None:
        """Point ``linkpath`` at ``filepath`` (relative) atomically: a new link beside it
        replaces the old one, so ``last.ckpt`` is never missing (Lightning removes it first)."""
        if trainer.is_global_zero and os.path.abspath(filepath) != os.path.abspath(linkpath):
            link = Path(linkpath)
            tmp = link.with_name(f".{link.name}.{uuid.uuid4().hex[:8]}.tmp")
            try:
                os.symlink(os.path.relpath(filepath, link.parent), tmp)
                os.replace(tmp, link)
            finally:
                tmp.unlink(missing_ok=True)
        trainer.strategy.barrier()


def _loadable_step(path: Path) -> int | None:
    """The checkpoint's step, or None (with a warning naming it) when it does not load."""
    try:
        return int(checkpoint_meta(load_checkpoint(path), path)["step"])
    except BytecanaryError as err:
        warn(f"{err}; skipped")
        return None


def latest_checkpoint(folder: Path) -> Path | None:
    """The newest full training state that loads, by step (not mtime): the step file
    ``last.ckpt`` links to, or a newer one when a crash came between writing it and moving
    the link. Corrupt ones are skipped with a warning; None when nothing loads."""
    for path in reversed(training_states(folder) if folder.is_dir() else []):
        if _loadable_step(path) is not None:
            return path
    return None


SHAPE = ("n_layer", "n_head", "n_embd", "n_positions")  # what a full state's weights must fit

# Training settings a resume may change, each said in a warning, and whether the restored state
# keeps the checkpoint's value whatever the config says: the optimizer's param groups (lr,
# betas, weight decay; the scheduler's base lr) and the RNG state are restored whole.
SETTINGS = {
    "model.optim.lr": True,
    "model.optim.beta1": True,
    "model.optim.beta2": True,
    "model.optim.weight_decay": True,
    "model.optim.warmup_steps": False,
    "model.optim.min_lr_ratio": False,
    "model.arch.dropout": False,
    "data.batch_size": False,
    "data.seed": False,
    "trainer.accumulate_grad_batches": False,
    "seed_everything": True,
}


def _at(config: Mapping[str, Any], field: str) -> Any:
    """The value of a dotted ``field`` of a nested config; None where it is absent."""
    for key in field.split("."):
        config = config.get(key) if isinstance(config, Mapping) else None
    return config


def check_resumable(path: Path, hparams: Mapping[str, Any], config: Mapping[str, Any]) -> list[str]:
    """Refuse, in one line naming the field, a full state whose shape is not ``hparams``', before the
    run folder changes (Lightning's load would fail deep inside fit); returns a warning line per
    training setting of ``config`` that differs from the checkpoint's."""
    ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    saved = ckpt.get("hyper_parameters") or {}
    arch = saved.get("arch") or {}
    pairs = [(f"model.arch.{k}", arch.get(k), hparams["arch"][k]) for k in SHAPE]
    pairs.append(("vocab_size (of the data's tokenizer)", saved.get("vocab_size"), hparams["vocab_size"]))
    for field, was, now in pairs:
        if was is not None and was != now:
            raise BytecanaryError(
                f"run.resume: {field} is {now} here but {was} in {path}: resume with the run's own "
                "config, or start another --run.name"
            )
    before = (ckpt.get("bytecanary") or {}).get("config") or {}
    changed = []
    for field, kept in SETTINGS.items():
        was, now = _at(before, field), _at(config, field)
        if was is not None and was != now:
            goes_on = f"the restored state keeps {was}" if kept else f"training goes on with {now}"
            changed.append(f"run.resume: {field} is {now} here but {was} in {path}; {goes_on}")
    return changed


@contextmanager
def hold_run(run_dir: Path) -> Iterator[None]:
    """Hold the run folder for this training (an advisory lock on the folder itself, released
    when the process ends however it ends): a second training of the same run is refused in
    one line before it changes a file, rather than racing the first over its files."""
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            beat = reported(read_heartbeat, run_dir, None)
            who = f" (pid {beat.pid} on {beat.host})" if beat is not None else ""
            raise BytecanaryError(
                f"{run_dir}: another training of this run is running{who}; wait for it to end, "
                "or choose another --run.name"
            ) from None
        yield
    finally:
        os.close(fd)


def check_tokenizer(source: Path, run_dir: Path) -> None:
    """The run's copy of the tokenizer, if it has one, is the data's (``source``): one that
    differs means another tokenizer trained this run, refused before the run folder changes,
    not swapped in silently under the old checkpoints."""
    target = run_dir / "tokenizer"
    if (
        target.exists()
        and (target / "tokenizer.json").read_bytes() != (source / "tokenizer.json").read_bytes()
    ):
        raise BytecanaryError(f"{target}: differs from {source}: this run was trained with another tokenizer")


def keep_tokenizer(source: Path, run_dir: Path, copy: bool = True) -> str:
    """Copy the tokenizer folder into the run (``copy``: rank 0 only; ``check_tokenizer``
    refused another one), so its checkpoints load from any working directory, after the data
    folder moved; returns the path checkpoints store, relative to the checkpoints folder."""
    target = run_dir / "tokenizer"
    if copy and not target.exists():
        with atomic_dir(target) as tmp:
            shutil.copytree(source, tmp, dirs_exist_ok=True)
    return os.path.relpath(target, run_dir / "checkpoints")
