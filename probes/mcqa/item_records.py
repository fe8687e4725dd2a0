"""Per-item MCQA records: one JSON line per (item view, protocol), enough to recompute every
metric and to join across checkpoints by fields alone (docs/mcqa-probes.md).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bytecanary.probes.mcqa import keys
from bytecanary.probes.mcqa.generation import GradedAnswers
from bytecanary.probes.mcqa.lm_eval_tasks import LmEvalItem
from bytecanary.probes.mcqa.views import View


def write_item_records(
    path: str | Path,
    probe: str,
    context: dict[str, Any],
    views: Sequence[View],
    per_view: dict[str, list[np.ndarray]],
    graded: GradedAnswers | None,
) -> None:
    """Append one line per view and protocol to ``path`` (``per_view``: the scored
    protocols' log-likelihoods; ``graded``: the generative ones' answers, None without any);
    (checkpoint, task, protocol, item_id, rotation) names a line."""
    generated = list(graded.by_protocol) if graded is not None else []
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
            if isinstance(v.item, LmEvalItem):  # joins with lm-eval's --log_samples lines by doc_id
                item.update(source="lm_eval", task_version=v.item.task_version, doc_id=v.item.doc_id)
            rows = []
            for p, lls in per_view.items():
                if p not in v.encodings:  # a protocol that does not apply to the task
                    continue
                prompt_ids, conts = v.encodings[p]
                row = {"protocol": p, "ll": lls[i].tolist(), "continuation_ids": conts}
                row["prompt_tail_ids"] = prompt_ids[-3:]
                if p in v.choice_prompts:  # the choices are contexts: each its own prompt
                    row["choice_prompt_tail_ids"] = [own[-3:] for own in v.choice_prompts[p]]
                rows.append(row)
            for j, p in enumerate(generated if v.prompts else []):
                g = graded.by_protocol[p]
                row = {
                    "protocol": p,
                    "generated": list(graded.texts[i, j]),
                    "prediction": g.predicted[i].tolist(),
                    "prediction_normalised": g.normalised[i].tolist(),
                    "prompt_tokens": len(v.prompts[p]),
                }
                if p == keys.DASHED:
                    row["rule"] = list(g.rule[i])
                rows.append(row)
            f.writelines(json.dumps({**item, **row}, ensure_ascii=False) + "\n" for row in rows)
