"""Reading bytecanary's Lightning checkpoints without Lightning or project training code.

Used by ``bytecanary export`` and by the probes, which must load a checkpoint into a plain
``GPT2LMHeadModel``. Loading is ``weights_only=True`` (checkpoints may come from anyone);
a missing, truncated or corrupt file becomes one clear error naming it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bytecanary.errors import BytecanaryError


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
    """The checkpoint's tokenizer folder, checked to exist."""
    tok = Path(meta.get("tokenizer_path") or "")
    if not (tok / "tokenizer.json").is_file():
        raise BytecanaryError(f"{path}: its tokenizer folder {tok} is missing")
    return tok
