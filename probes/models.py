"""What a probe asks of the model and tokenizer it measures: context, attention window,
output width, padding id.
"""

from __future__ import annotations

import inspect
from typing import Any


def context_size(model: Any) -> int:
    """The model's context in tokens (0: unknown, no limit applied)."""
    config = model.config
    return getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None) or 0


def sliding_window(model: Any) -> int | None:
    """The model's attention window where it has one in use (Mistral, Qwen2 with
    ``use_sliding_window``, Gemma-2/3's local layers), else None."""
    cfg = model.config.get_text_config()
    window = getattr(cfg, "sliding_window", None)
    return int(window) if window and getattr(cfg, "use_sliding_window", True) else None


def takes_positions(model: Any) -> bool:
    """Whether the forward reads ``position_ids``: one that takes none (ALiBi: BLOOM, MPT)
    places tokens by its attention mask alone, so it cannot be told that a row restarts."""
    return "position_ids" in inspect.signature(model.forward).parameters


def output_size(model: Any) -> int:
    """The ids the model's head scores: the tokenizer's, or more where the embedding is padded."""
    return int(model.get_output_embeddings().weight.shape[0])


def pad_id(tokenizer: Any) -> int:
    """The padding id: the tokenizer's own, else eos (masked out either way), else 0."""
    for token_id in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if token_id is not None:
            return int(token_id)
    return 0
