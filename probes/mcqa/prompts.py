"""MCQA prompts: label formats, k-shot blocks, the dashed (M&D) prompt, cyclic permutations.
A block ends ``Answer:`` with no trailing space: the space belongs to the scoring strategy
(``encoding``).
"""

from __future__ import annotations

from dataclasses import replace

from bytecanary.probes.mcqa.tasks import McqaItem

LABEL_FORMATS = {"A.": "{label}. {text}", "(A)": "({label}) {text}", "1.": "{label}. {text}"}


def labels(label_format: str, n: int) -> list[str]:
    if label_format not in LABEL_FORMATS:
        raise ValueError(f"label_format must be one of {', '.join(LABEL_FORMATS)}, got {label_format!r}")
    return [str(i + 1) for i in range(n)] if label_format == "1." else list("ABCDEFGHIJ"[:n])


def content(item: McqaItem, label_format: str = "A.") -> str:
    """The question and one line per option: what every wrapper and block shares."""
    names = labels(label_format, len(item.choices))
    lines = [f"Question: {item.question}"]
    lines += [
        LABEL_FORMATS[label_format].format(label=n, text=c) for n, c in zip(names, item.choices, strict=True)
    ]
    return "\n".join(lines)


def block(item: McqaItem, label_format: str, answered: bool = False) -> str:
    answer = f" {labels(label_format, len(item.choices))[item.answer]}" if answered else ""
    return f"{content(item, label_format)}\nAnswer:{answer}"


def dashed(item: McqaItem) -> str:
    """Matched-and-Dashed (the M&D vs Select-and-Letter paper): every option labelled ``─``
    and the full answer text asked for. A continuation item ends with its context, so the
    answer is the model's next words; a question ends with ``Answer:``."""
    options = "\n".join(f"─ {c}" for c in item.choices)
    if item.continuation:
        return f"Options:\n{options}\nContinue the text with the correct option.\n\n{item.question}"
    return (
        f"Question: {item.question}\n{options}\n"
        "Answer with the full text of the correct option, not a label. Let's think step by step.\nAnswer:"
    )


def render(item: McqaItem, label_format: str = "A.", shots: tuple[McqaItem, ...] = ()) -> str:
    """The prompt for ``item`` after ``shots`` solved examples; ends with ``Answer:``."""
    return "\n\n".join([*(block(s, label_format, answered=True) for s in shots), block(item, label_format)])


def rotate(item: McqaItem, r: int) -> McqaItem:
    """Options moved ``r`` places (cyclically), the answer following its option (and, where
    the choices are contexts, their contexts with them)."""
    n = len(item.choices)
    moved = {"choices": tuple(item.choices[(i - r) % n] for i in range(n))}
    if getattr(item, "contexts", ()):
        moved["contexts"] = tuple(item.contexts[(i - r) % n] for i in range(n))
    return replace(item, **moved, answer=(item.answer + r) % n)
