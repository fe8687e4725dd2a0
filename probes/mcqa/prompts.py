"""MCQA prompts: label formats, k-shot blocks, cyclic permutations of the options.

A block is ``Question: ...``, one line per option, then ``Answer:`` with no trailing
space (the space belongs to the scoring strategy, see ``encoding``). Shots are full
blocks followed by `` <label>``.
"""

from __future__ import annotations

from dataclasses import replace

from probes.mcqa.tasks import McqaItem

LABEL_FORMATS = {"A.": "{label}. {text}", "(A)": "({label}) {text}", "1.": "{label}. {text}"}


def labels(label_format: str, n: int) -> list[str]:
    if label_format not in LABEL_FORMATS:
        raise ValueError(f"label_format must be one of {', '.join(LABEL_FORMATS)}, got {label_format!r}")
    return [str(i + 1) for i in range(n)] if label_format == "1." else list("ABCDEFGHIJ"[:n])


def block(item: McqaItem, label_format: str, answered: bool = False) -> str:
    names = labels(label_format, len(item.choices))
    lines = [f"Question: {item.question}"]
    lines += [
        LABEL_FORMATS[label_format].format(label=n, text=c) for n, c in zip(names, item.choices, strict=True)
    ]
    lines.append("Answer:" + (f" {names[item.answer]}" if answered else ""))
    return "\n".join(lines)


def render(item: McqaItem, label_format: str = "A.", shots: tuple[McqaItem, ...] = ()) -> str:
    """The prompt for ``item`` after ``shots`` solved examples; ends with ``Answer:``."""
    return "\n\n".join([*(block(s, label_format, answered=True) for s in shots), block(item, label_format)])


def rotate(item: McqaItem, r: int) -> McqaItem:
    """Options moved ``r`` places (cyclically), the answer following its option."""
    n = len(item.choices)
    choices = tuple(item.choices[(i - r) % n] for i in range(n))
    return replace(item, choices=choices, answer=(item.answer + r) % n)
