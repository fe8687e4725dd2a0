"""Per-item MCQA records: one JSON line per (item view, protocol), enough to recompute
every metric and to join across checkpoints by fields alone.

Each line starts with the probe's record context (checkpoint, step, tokens_seen, set by the
caller), then names the task, protocol, item id and rotation. Scored protocols keep the
choice log-likelihoods, the continuation ids and the prompt's last ids (the
space-tokenization trap lives there); generative protocols keep every generated text, its
strict and normalised predictions and, for M&D, the rule that fired.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from bytecanary.probes.mcqa.views import View

from bytecanary import keys


def write_item_records(
    path: str | Path,
    probe: str,
    context: dict[str, Any],
    views: Sequence[View],
    per_view: dict[str, list[np.ndarray]],
    graded: dict[str, np.ndarray],
    generated: Sequence[str],
) -> None:
    """Append one line per view and protocol to ``path`` (``per_view``: the scored
    protocols' log-likelihoods); (checkpoint, task, protocol, item_id, rotation) names a line."""
    with open(path, "a", encoding="utf-8") as f:
        for i, v in enumerate(views):
            item: dict[str, Any] = {
                **context,
                "probe": probe,
                "task": v.item.task,
                "language": v.item.language,
                "item_id": v.item.item_id,
                "rotation": v.rotation,
                "answer": v.item.answer,
                "choices": list(v.item.choices),
            }
            rows = []
            for p, lls in per_view.items():
                prompt_ids, conts = v.encodings[p]
                rows.append(
                    {
                        "protocol": p,
                        "ll": lls[i].tolist(),
                        "continuation_ids": conts,
                        "prompt_tail_ids": prompt_ids[-3:],
                    }
                )
            for j, p in enumerate(generated if v.prompts else []):
                row = {
                    "protocol": p,
                    "generated": list(graded["text"][i, j]),
                    "prediction": graded[p][i].tolist(),
                    "prediction_normalised": graded[f"{p}/normalised"][i].tolist(),
                    "prompt_tokens": len(v.prompts[p]),
                }
                if p == keys.DASHED:
                    row["rule"] = list(graded[f"{p}/rule"][i])
                rows.append(row)
            f.writelines(json.dumps({**item, **row}, ensure_ascii=False) + "\n" for row in rows)
