"""Reading bytecanary's Lightning checkpoints without Lightning or project training code.

Used by ``bytecanary export``, by resuming and by the probes, which must load a checkpoint
into a plain ``GPT2LMHeadModel``. Loading is ``weights_only=True`` (checkpoints may come
from anyone); a missing, truncated or corrupt file becomes one clear error naming it. A
checkpoint finds its tokenizer relative to its own folder (the run's copy), so a run folder
can move and be read from any working directory.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from bytecanary.errors import BytecanaryError

_STEP = re.compile(r"step[_-]?(\d+)")


def step_of(name: str) -> int:
    """The step in a checkpoint's file or revision name (``step0000100.ckpt``, ``step1000``); -1 if none."""
    m = _STEP.search(name)
    return int(m.group(1)) if m else -1


def step_checkpoints(folder: str | Path) -> list[Path]:
    """``folder``'s ``*.ckpt`` files in step order, without ``last.ckpt`` (it repeats the newest step)."""
    files = [f for f in Path(folder).glob("*.ckpt") if f.name != "last.ckpt"]
    return sorted(files, key=lambda f: (step_of(f.name), f.name))


def load_checkpoint(path: str | Path, map_location: Any = "cpu") -> dict[str, Any]:
    """``torch.load(..., weights_only=True)`` with errors that name the file."""
    import torch

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


def checkpoint_meta(ckpt: dict[str, Any], path: str | Path) -> dict[str, Any]:
    """The ``bytecanary`` section: step, tokens_seen, config, tokenizer_path, gpt2_config."""
    meta = ckpt.get("bytecanary")
    if not isinstance(meta, dict) or "gpt2_config" not in meta:
        raise BytecanaryError(f"{path}: not a bytecanary checkpoint (no 'bytecanary' section)")
    return meta


def gpt2_from_checkpoint(ckpt: dict[str, Any], path: str | Path):
    """The checkpoint's weights in a ``transformers.GPT2LMHeadModel`` (eval mode)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    meta = checkpoint_meta(ckpt, path)
    model = GPT2LMHeadModel(GPT2Config.from_dict(meta["gpt2_config"]))
    state = {
        k.removeprefix("model.").replace("_orig_mod.", ""): v
        for k, v in ckpt["state_dict"].items()
        if k.startswith("model.")
    }
    result = model.load_state_dict(state, strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise BytecanaryError(
            f"{path}: weights do not fit the GPT-2 config "
            f"(missing {result.missing_keys[:3]}, unexpected {result.unexpected_keys[:3]})"
        )
    return model.eval()


def tokenizer_dir(meta: dict[str, Any], path: str | Path) -> Path:
    """The checkpoint's tokenizer folder, checked to exist. A relative path is the run's copy,
    relative to the checkpoint's folder (``../tokenizer``); checkpoints from before runs kept
    a copy stored it relative to the working directory; last, the data folder's own."""
    stored = Path(meta.get("tokenizer_path") or "")
    candidates = [stored] if stored.is_absolute() else [Path(path).parent / stored, stored]
    if meta.get("data_dir"):
        candidates.append(Path(meta["data_dir"]) / "tokenizer")
    for tok in candidates:
        if (tok / "tokenizer.json").is_file():
            return tok
    raise BytecanaryError(f"{path}: its tokenizer folder {stored} is missing")


def checkpoint_data_dir(meta: dict[str, Any], path: str | Path) -> Path:
    """The data folder the checkpoint was trained on (its eval sets): recorded in the
    checkpoint, or, in older ones, the folder that held the tokenizer."""
    return Path(meta["data_dir"]) if meta.get("data_dir") else tokenizer_dir(meta, path).parent
