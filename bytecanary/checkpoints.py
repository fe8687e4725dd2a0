"""A run's checkpoint files (weights file, full training state) and its heartbeat and finished markers,
read without Lightning and never through pickle, so a sidecar or a report can read any run folder
(docs/training.md, "Checkpoints").
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bytecanary.errors import BytecanaryError
from bytecanary.io import atomic_path, read_json

WEIGHTS = ".safetensors"  # the weights file of a step
STATE = ".ckpt"  # Lightning's full training state
META_KEY = "bytecanary"  # the weights file's metadata key
_STEP = re.compile(r"step[_-]?(\d+)")


FINISHED = "finished.json"  # in a run folder once training reached its last step
HEARTBEAT = "heartbeat.json"  # in a run folder: the training process that runs it, renewed as it runs


def run_folder(folder: str | Path) -> Path:
    """The run folder of ``folder``: itself, or the parent of a run's ``checkpoints/``."""
    folder = Path(folder)
    return folder.parent if folder.name == "checkpoints" and not (folder / "checkpoints").is_dir() else folder


@dataclass(frozen=True)
class Finished:
    """``FINISHED``: the step training reached, and the attempt (one training process) that reached it."""

    step: int
    tokens_seen: int | None = None
    attempt: str | None = None
    """None in markers written before attempts had ids."""


@dataclass(frozen=True)
class Heartbeat:
    """``HEARTBEAT``: which process trains the run in which attempt, when it last said so, and
    when it left training (normally or by an error), so a sidecar can tell a training on its way
    from one that stopped."""

    pid: int
    host: str
    attempt: str
    every: float
    """Seconds between beats: a beat older than a few of these is a missed one."""
    started: float
    updated: float
    ended: float | None = None


def process_gone(host: str, pid: int) -> bool:
    """Whether process ``pid`` of ``host`` is known to have ended: it ran on this host and no
    such process exists (a process on another host is never known gone)."""
    if host != socket.gethostname():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's
        return False
    return False


def _fits(value: Any, kinds: tuple[type | None, ...]) -> bool:
    """``value`` is of one of ``kinds`` (None: may be absent); a bool is no number, a float finite."""
    if value is None or isinstance(value, bool):
        return value is None and None in kinds
    if float in kinds and isinstance(value, (int, float)):
        return math.isfinite(value)
    return any(kind is not None and isinstance(value, kind) for kind in kinds)


def _read_typed(path: Path, fields: dict[str, tuple[type | None, ...]]) -> dict[str, Any]:
    """The ``fields`` of the JSON object in ``path``; one error naming the file and the first
    field of the wrong type."""
    try:
        row = read_json(path)
    except OSError as err:
        raise BytecanaryError(f"{path}: {err.strerror or err}") from None
    if not isinstance(row, dict):
        raise BytecanaryError(f"{path}: expected a JSON object, got {type(row).__name__}")
    for name, kinds in fields.items():
        if not _fits(row.get(name), kinds):
            raise BytecanaryError(f"{path}: {name!r} has the wrong type ({row.get(name)!r})")
    return {name: row.get(name) for name in fields}


def read_finished(folder: str | Path) -> Finished | None:
    """``FINISHED`` of the run of ``folder``, None where there is none; one error naming the
    file when it does not read or holds the wrong types."""
    path = run_folder(folder) / FINISHED
    if not path.exists():
        return None
    return Finished(**_read_typed(path, {"step": (int,), "tokens_seen": (int, None), "attempt": (str, None)}))


def read_heartbeat(folder: str | Path) -> Heartbeat | None:
    """``HEARTBEAT`` of the run of ``folder``, None where there is none (a run trained before
    heartbeats, or not started yet); one error naming the file when it does not read."""
    path = run_folder(folder) / HEARTBEAT
    if not path.exists():
        return None
    fields = {"pid": (int,), "host": (str,), "attempt": (str,), "every": (float,), "started": (float,)}
    return Heartbeat(**_read_typed(path, {**fields, "updated": (float,), "ended": (float, None)}))


def reported(read: Callable[[Path], Any], folder: Path, on_bad: Callable[[str], None] | None) -> Any:
    """``read(folder)``, or None after telling ``on_bad`` why it did not read."""
    try:
        return read(folder)
    except BytecanaryError as err:
        if on_bad is not None:
            on_bad(f"{err}; taken as absent")
        return None


def finished_step(folder: str | Path, on_bad: Callable[[str], None] | None = None) -> int | None:
    """The last step of a finished run (``folder``: the run or its ``checkpoints/``), or None while it
    trains, after it stopped early, or where the marker is an earlier attempt's (the run was resumed);
    a file that does not read counts as absent, and ``on_bad`` hears why."""
    done = reported(read_finished, Path(folder), on_bad)
    if done is None:
        return None
    beat = reported(read_heartbeat, Path(folder), on_bad)
    return done.step if beat is None or beat.attempt == done.attempt else None


def last_change(folder: str | Path) -> float:
    """When anything in the run of ``folder`` or its ``checkpoints/`` last changed (0 where
    nothing is there): the sign of life of a run trained before heartbeats."""
    run = run_folder(folder)
    times = [0.0]
    for where in (run, run / "checkpoints"):
        try:
            entries = [where, *where.iterdir()]
        except OSError:  # not there (yet), or not a folder
            continue
        for entry in entries:
            try:
                times.append(entry.stat().st_mtime)
            except OSError:  # replaced between the listing and now
                continue
    return max(times)


def step_of(name: str) -> int:
    """The step in a checkpoint's file or revision name (``step0000100.ckpt``, ``step1000``); -1 if none."""
    m = _STEP.search(name)
    return int(m.group(1)) if m else -1


def _step_files(folder: str | Path, suffix: str) -> list[Path]:
    files = [f for f in Path(folder).glob(f"step*{suffix}") if step_of(f.name) >= 0]
    return sorted(files, key=lambda f: (step_of(f.name), f.name))


def training_states(folder: str | Path) -> list[Path]:
    """``folder``'s full training states (``step*.ckpt``) in step order; ``last.ckpt``, which
    names the newest of them, is not listed."""
    return _step_files(folder, STATE)


def probe_checkpoints(folder: str | Path) -> list[Path]:
    """``folder``'s checkpoints to probe: its weights files (``step*.safetensors``) in step order."""
    return _step_files(folder, WEIGHTS)


def load_checkpoint(path: str | Path, map_location: Any = "cpu") -> dict[str, Any]:
    """A full training state: ``torch.load(..., weights_only=True)`` with errors that name the file."""
    import torch

    path = _existing(path)
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # pickle, zip and torch errors all mean "unreadable"
        raise BytecanaryError(
            f"{path}: not a loadable checkpoint (truncated or corrupt?): {_reason(err)}"
        ) from None


def _existing(path: str | Path) -> Path:
    path = Path(path)
    if not path.is_file():
        raise BytecanaryError(f"{path}: no such checkpoint file")
    return path


def _reason(err: Exception) -> str:
    """An exception as one line: its type and first line, with the line after a first line
    that ends in ":" (torch's "Error(s) in loading state_dict for ...:" says what only there)."""
    lines = [" ".join(line.split()) for line in str(err).splitlines() if line.strip()]
    text = " ".join(lines[:2]) if len(lines) > 1 and lines[0].endswith(":") else (lines or [""])[0]
    return f"{type(err).__name__}: {text[:300]}"


def checkpoint_meta(ckpt: dict[str, Any], path: str | Path) -> dict[str, Any]:
    """A full state's ``bytecanary`` section: step, tokens_seen, config, tokenizer_path, gpt2_config."""
    meta = ckpt.get(META_KEY)
    if not isinstance(meta, dict) or "gpt2_config" not in meta:
        raise BytecanaryError(f"{path}: not a bytecanary checkpoint (no 'bytecanary' section)")
    return meta


def gpt2_state(state: Mapping[str, Any]) -> dict[str, Any]:
    """A LightningModule's state dict (``model.`` keys, ``_orig_mod.`` under torch.compile)
    with ``GPT2LMHeadModel``'s keys."""
    return {
        k.removeprefix("model.").replace("_orig_mod.", ""): v
        for k, v in state.items()
        if k.startswith("model.")
    }


def save_weights(path: str | Path, state: Mapping[str, Any], meta: dict[str, Any], dtype: str) -> None:
    """Write the weights file: ``state`` (a LightningModule's) as ``dtype`` with ``meta``,
    atomically. A tied ``lm_head.weight`` is left out: it is ``transformer.wte.weight``, and
    safetensors refuses shared tensors."""
    import torch
    from safetensors import SafetensorError
    from safetensors.torch import save_file

    tensors = {
        k: v.detach().to(getattr(torch, dtype)).cpu().contiguous() for k, v in gpt2_state(state).items()
    }
    if meta["gpt2_config"].get("tie_word_embeddings", True):
        tensors.pop("lm_head.weight", None)
    with atomic_path(path) as tmp:
        try:
            save_file(tensors, str(tmp), metadata={META_KEY: json.dumps(meta)})
        except SafetensorError as err:  # its I/O errors (disk full) arrive as SafetensorError
            raise BytecanaryError(f"{path}: {' '.join(str(err).split())}") from None


def _read_safetensors(path: Path, tensors: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            raw = (f.metadata() or {}).get(META_KEY)
            state = {k: f.get_tensor(k) for k in f.keys()} if tensors else {}  # noqa: SIM118 (not a dict)
    except SafetensorError as err:
        raise BytecanaryError(
            f"{path}: not a loadable weights file (truncated or corrupt?): {_reason(err)}"
        ) from None
    try:
        meta = json.loads(raw) if raw is not None else None
    except json.JSONDecodeError:
        meta = None
    if not isinstance(meta, dict) or "gpt2_config" not in meta:
        raise BytecanaryError(f"{path}: not a bytecanary weights file (no 'bytecanary' metadata)")
    return meta, state


def weights_id(path: str | Path) -> str | None:
    """What a weights file is, wherever it lies: a hash of its safetensors header (the run's metadata
    and the tensors' layout), so moving or copying a run keeps its records; None for a file without
    a readable header (its records fall back to its path)."""
    try:
        with open(path, "rb") as f:
            size = int.from_bytes(f.read(8), "little")
            header = f.read(size) if 0 < size < 100_000_000 else b""
    except OSError:
        return None
    if len(header) != size or META_KEY.encode() not in header:
        return None
    return "sha256:" + hashlib.sha256(header).hexdigest()[:16]


def read_meta(path: str | Path) -> dict[str, Any]:
    """A checkpoint's metadata; of a weights file only its header is read."""
    path = _existing(path)
    if path.suffix == WEIGHTS:
        return _read_safetensors(path, tensors=False)[0]
    return checkpoint_meta(load_checkpoint(path), path)


def read_weights(path: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(metadata, GPT-2 state dict as stored) of a weights file or a full state."""
    path = _existing(path)
    if path.suffix == WEIGHTS:
        return _read_safetensors(path, tensors=True)
    ckpt = load_checkpoint(path)
    return checkpoint_meta(ckpt, path), gpt2_state(ckpt["state_dict"])


def _check_shapes(path: str | Path, state: Mapping[str, Any], expected: Mapping[str, Any]) -> None:
    """One line naming the first tensor whose shape differs from the model's config."""
    for name, tensor in state.items():
        want = expected.get(name)
        if want is not None and tuple(tensor.shape) != tuple(want.shape):
            raise BytecanaryError(
                f"{path}: weights do not fit the GPT-2 config: {name} is {list(tensor.shape)} "
                f"in the file, {list(want.shape)} in the config"
            )


def load_gpt2(path: str | Path, into: Any = None) -> tuple[dict[str, Any], Any]:
    """(metadata, fp32 ``GPT2LMHeadModel`` in eval mode) of a weights file or a full state.
    ``into``, a model of the same config (on any device), is loaded in place rather than a
    new model built: a probe model reused across checkpoints."""
    from transformers import GPT2Config, GPT2LMHeadModel

    meta, state = read_weights(path)
    model = into if into is not None else GPT2LMHeadModel(GPT2Config.from_dict(meta["gpt2_config"])).float()
    _check_shapes(path, state, model.state_dict())
    try:
        result = model.load_state_dict(state, strict=False)  # copies, casting to fp32
    except RuntimeError as err:  # a shape that does not fit
        raise BytecanaryError(f"{path}: weights do not fit the GPT-2 config: {_reason(err)}") from None
    tied = model.config.tie_word_embeddings
    missing = [k for k in result.missing_keys if not (tied and k == "lm_head.weight")]
    if missing or result.unexpected_keys:
        raise BytecanaryError(
            f"{path}: weights do not fit the GPT-2 config "
            f"(missing {missing[:3]}, unexpected {result.unexpected_keys[:3]})"
        )
    return meta, model.eval()


def tokenizer_dir(meta: dict[str, Any], path: str | Path) -> Path:
    """The checkpoint's tokenizer folder, checked to exist: the stored path, which is
    absolute or (the run's copy) relative to the checkpoint's folder (``../tokenizer``), so a
    run folder can move; else the data folder's own (a weights file copied out of its run)."""
    stored = Path(meta.get("tokenizer_path") or "")
    candidates = [stored if stored.is_absolute() else Path(path).parent / stored]
    if meta.get("data_dir"):
        candidates.append(Path(meta["data_dir"]) / "tokenizer")
    for tok in candidates:
        if (tok / "tokenizer.json").is_file():
            return tok
    raise BytecanaryError(f"{path}: its tokenizer folder {stored} is missing")


def checkpoint_data_dir(meta: dict[str, Any]) -> Path | None:
    """The data folder the checkpoint was trained on (its eval sets), as it records it; None
    for a model trained without a data module (the probes then read ``data/default``)."""
    return Path(meta["data_dir"]) if meta.get("data_dir") else None
