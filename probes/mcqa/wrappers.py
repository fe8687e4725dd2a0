"""Prompt wrappers and the format-sensitivity indices FSI / PSI / nFSI ("Format Sensitivity
Index", arXiv 2607.09665): five formats of the same content, each ending where the answer field
begins so a base model fills it, padded to equal characters (docs/mcqa-probes.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

import numpy as np

from bytecanary import stats
from bytecanary.probes.mcqa.prompts import content, labels
from bytecanary.probes.mcqa.tasks import McqaItem

# family (keys.WRAPPER_FAMILIES) -> (template with {content} and {pad}, opening of the answer, answer key)
_WRAPPERS: dict[str, tuple[str, str, str]] = {
    "plain": ("{content}\n{pad}", "Answer:", "answer"),
    "json": (
        'Return a JSON object: {{"answer": "<letter>"}}. No extra keys. No markdown.{pad}\n{content}\n',
        '{"answer": "',
        "answer",
    ),
    "structured": ("task: multiple choice\n{content}\nformat: answer: <letter>\n{pad}", "answer:", "answer"),
    "structured_delim": (
        "### task\nmultiple choice\n### question\n{content}\n{pad}### format\nanswer: <letter>\n",
        "### answer:",
        "answer",
    ),
    "deliberate": (
        "{pad}Think step by step in the scratchpad, then write: final answer: <letter>\n{content}\n",
        "scratchpad:",
        "final answer",
    ),
}

# family -> stop strings: where its answer is complete. The strict formats of plain,
# structured and structured_delim are anchored at the opening and end with their line (or,
# for structured_delim, at ``###``), so a strict grade reads the same with or without what
# follows the stop. json also ends at its line: the opening and the asked-for object are
# one line, and the text is cut before the stop, so ``}`` cannot be one (an object broken
# over lines after the opening is the one strict answer a newline loses). deliberate's
# scratchpad runs over lines, so it ends at a blank line or where a new question starts:
# past either, no text answers this item (the end of the final-answer line cannot be a
# stop string, the cut would drop the answer).
STOPS: dict[str, tuple[str, ...]] = {
    "plain": ("\n",),
    "json": ("\n",),
    "structured": ("\n",),
    "structured_delim": ("\n", "###"),
    "deliberate": ("\n\n", "\nQuestion:"),
}

_STRICT = {
    "plain": re.compile(r"\AAnswer: ([A-J])[.)]?(?:\s|\Z)"),
    "structured": re.compile(r"\Aanswer: ([A-J])[ \t]*(?:\n|\Z)"),
    "structured_delim": re.compile(r"\A### answer: ([A-J])[ \t]*(?:\n|###|\Z)"),
    "deliberate": re.compile(r"^final answer: ([A-J])[ \t]*$", re.MULTILINE),
}
_OVERHEAD = {f: len(t.format(content="", pad="")) + len(o) for f, (t, o, _) in _WRAPPERS.items()}


def wrap(item: McqaItem, family: str) -> str:
    """The prompt of ``item`` under ``family``, padded to the common character budget."""
    template, opening, _ = _WRAPPERS[family]
    pad = " " * (max(_OVERHEAD.values()) - _OVERHEAD[family])
    return template.format(content=content(item), pad=pad) + opening


def response(family: str, generation: str) -> str:
    """What extraction reads: the wrapper's opening and the model's continuation."""
    return _WRAPPERS[family][1] + generation


def extract_strict(family: str, text: str, n_choices: int) -> int:
    """Option index under the wrapper's exact format, or -1 (unparsable)."""
    names = labels("A.", n_choices)
    if family == "json":
        try:
            obj, _ = json.JSONDecoder().raw_decode(text.lstrip())
        except json.JSONDecodeError:
            return -1
        ok = isinstance(obj, dict) and set(obj) == {"answer"} and obj["answer"] in names
        return names.index(obj["answer"]) if ok else -1
    found = _STRICT[family].findall(text)
    return names.index(found[-1]) if found and found[-1] in names else -1


def extract_normalised(family: str, text: str, choices: Sequence[str]) -> int:
    """Option index forgiving case, brackets, quotes, markdown and option text; or -1."""
    names = labels("A.", len(choices))
    key = re.escape(_WRAPPERS[family][2]).replace(r"\ ", r"\s*")
    text = text.replace("```json", "").replace("```", "")
    pattern = rf"{key}[\s\"'*]*[:=：-]\s*[\"'(\[*]*\s*([a-j])(?![a-z0-9])"
    found = [m.group(1).upper() for m in re.finditer(pattern, text, re.IGNORECASE)]
    found = [f for f in found if f in names]
    if found:
        return names.index(found[-1])
    hits = [(text.find(c), -len(c), i) for i, c in enumerate(choices) if c and c in text]
    return min(hits)[2] if hits else -1


def delta_tok(token_counts: np.ndarray) -> np.ndarray:
    """(max - min) / mean of the prompt token counts over wrappers (last axis), eq. 1."""
    counts = np.asarray(token_counts, dtype=np.float64)
    return (counts.max(-1) - counts.min(-1)) / counts.mean(-1)


def sensitivity(correct: np.ndarray, parsable: np.ndarray, n_resamples: int = 1000, seed: int = 0) -> dict:
    """FSI, PSI, nFSI (eqs. 2-4) with percentile bootstrap 95% CIs over items (none when
    ``n_resamples`` is 0); ``correct``, ``parsable``: (items, wrappers, seeds) 0/1 arrays. A resample
    draws whole items, so every wrapper sees the same items.
    """

    def indices(rows: np.ndarray) -> dict[str, float]:
        acc = correct[rows].mean(axis=(0, 2))
        par = parsable[rows].mean(axis=(0, 2))
        fsi = float(acc.max() - acc.min())
        return {"fsi": fsi, "psi": float(par.max() - par.min()), "nfsi": fsi / (float(acc.mean()) + 1e-6)}

    out = indices(np.arange(len(correct)))
    if n_resamples:
        drawn = [indices(rows) for rows in stats.resamples(len(correct), n_resamples, seed)]
        for name in ("fsi", "psi", "nfsi"):
            out[f"{name}_lo"], out[f"{name}_hi"] = stats.percentile_ci([d[name] for d in drawn])
    return out
