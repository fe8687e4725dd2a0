"""MCQA views: each item as the model sees it under every protocol (options rotated by
``rotation``), encoded once. Only the unrotated views of a task's first items generate:
a generated answer costs far more than a scored one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from bytecanary.bytecodec import ByteCodec
from bytecanary.errors import BytecanaryError
from bytecanary.probes.mcqa import keys, wrappers
from bytecanary.probes.mcqa.encoding import (
    encode_pair,
    letter_merged,
    letter_separate,
    lm_eval_pair,
    text_ids,
)
from bytecanary.probes.mcqa.lm_eval_tasks import LmEvalItem
from bytecanary.probes.mcqa.prompts import dashed, labels, render, rotate
from bytecanary.probes.mcqa.tasks import McqaItem


@dataclass(frozen=True)
class View:
    """One presentation of an item: its options rotated by ``rotation``. Generative
    protocols run on the unrotated view only (``prompts`` is empty for the others)."""

    item: McqaItem
    rotation: int
    encodings: dict[str, tuple[list[int], list[list[int]]]]  # protocol -> (prompt ids, continuations)
    prompts: dict[str, list[int]] = field(default_factory=dict)  # generative protocol -> prompt ids
    choice_prompts: dict[str, list[list[int]]] = field(default_factory=dict)
    """Protocol -> one prompt per choice, where the choices are contexts (a multiple-input
    task's cloze); the ``encodings`` prompt is then what they share, for the records."""


def cloze_encoding(tokenizer: Any, item: McqaItem, special: bool | None) -> tuple[list[int], list[list[int]]]:
    """Each option's full text after the question (or continuing the context), encoded as
    lm-evaluation-harness does: an lm-eval task's prompt is its whole context encoded alone
    (``lm_eval_pair``); our own tasks' is what every option's whole encoding shares.
    """
    if isinstance(item, LmEvalItem):
        with _naming(item):
            pairs = [
                lm_eval_pair(tokenizer, item.context, f"{item.delimiter}{c}", special) for c in item.choices
            ]
        return pairs[0][0], [cont for _, cont in pairs]
    context = item.question if item.continuation else f"Question: {item.question}\nAnswer:"
    delimiter = item.delimiter if item.continuation else " "
    pairs = [encode_pair(tokenizer, context, f"{delimiter}{choice}") for choice in item.choices]
    wholes = [ctx + cont for ctx, cont in pairs]
    shared = len(pairs[0][0])
    for whole in wholes:  # the shared prompt: the context, unless a boundary merged differently
        while whole[:shared] != wholes[0][:shared]:
            shared -= 1
    return wholes[0][:shared], [whole[shared:] for whole in wholes]


def multiple_input_encoding(
    tokenizer: Any, item: LmEvalItem, special: bool | None
) -> tuple[list[list[int]], list[list[int]]]:
    """(one prompt per choice, one continuation per choice) of a multiple-input item, as
    lm-eval encodes its requests: ``target_delimiter + target`` after each choice's context."""
    with _naming(item):
        pairs = [lm_eval_pair(tokenizer, c, f"{item.delimiter}{item.target}", special) for c in item.contexts]
    return [prompt for prompt, _ in pairs], [cont for _, cont in pairs]


@contextlib.contextmanager
def _naming(item: LmEvalItem) -> Iterator[None]:
    """An encoding refused (``lm_eval_pair``) as one line naming the task and document."""
    try:
        yield
    except BytecanaryError as err:
        raise BytecanaryError(f"lm-eval task {item.task!r} doc {item.doc_id}: {err}") from None


def shared_prefix(rows: Sequence[list[int]]) -> list[int]:
    """The ids every row begins with."""
    n = min(map(len, rows))
    for row in rows:
        n = next((i for i in range(n) if row[i] != rows[0][i]), n)
    return rows[0][:n]


def view_tokens(view: View) -> int:
    """The tokens of a view's longest row: its longest prompt and its continuations."""
    rows = [len(p) + sum(map(len, conts)) for p, conts in view.encodings.values()]
    return max(rows + [len(p) for p in view.prompts.values()], default=0)


def generative_prompt(protocol: str, item: McqaItem) -> str:
    return (
        dashed(item) if protocol == keys.DASHED else wrappers.wrap(item, protocol.removeprefix(keys.WRAPPER))
    )


def scored_encodings(
    tokenizer: Any, codec: ByteCodec, item: McqaItem, prompt: str, label_format: str, scored: Sequence[str]
) -> dict[str, tuple[list[int], list[list[int]]]]:
    """(prompt ids, one continuation per option) of every scored protocol; an lm-eval
    task's prompts with the special tokens ``special_tokens`` gives it, our own tasks' without."""
    names = labels(label_format, len(item.choices))
    special = special_tokens(item)
    enc: dict[str, tuple[list[int], list[list[int]]]] = {}
    for protocol in scored:
        if protocol == keys.SEPARATE:
            e = letter_separate(tokenizer, codec, prompt, names, special)
            enc[protocol] = (e.prompt_ids, e.continuations)
        elif protocol == keys.MERGED:
            e = letter_merged(tokenizer, codec, prompt, names, special)
            enc[protocol] = (e.prompt_ids, e.continuations)
        else:
            enc[protocol] = cloze_encoding(tokenizer, item, special)
    return enc


def special_tokens(item: McqaItem) -> bool | None:
    """Whether an item's prompts get the tokenizer's special tokens (BOS): an lm-eval task's
    as its setting says (None: as lm-eval does), our own tasks' never (their documented encoding)."""
    return item.special_tokens if isinstance(item, LmEvalItem) else False


def build_views(
    tokenizer: Any,
    items: Sequence[tuple[McqaItem, tuple[McqaItem, ...]]],
    scored: Sequence[str],
    generated: Sequence[str],
    label_format: str,
    permutations: bool,
    generative_limit: int | None,
) -> list[View]:
    """Every view of every (item, its shots): all rotations with ``permutations``, the
    generative prompts on the first ``generative_limit`` items of each task (None: all)."""
    codec = ByteCodec.from_tokenizer(tokenizer)
    views = []
    seen: dict[str, int] = {}
    for item, shots in items:
        seen[item.task] = seen.get(item.task, 0) + 1
        generative = generated if generative_limit is None or seen[item.task] <= generative_limit else []
        for r in range(len(item.choices) if permutations else 1):
            shown = rotate(item, r)
            if isinstance(shown, LmEvalItem) and shown.contexts:
                views.append(_multiple_input_view(tokenizer, shown, r, scored))
                continue
            prompt = render(shown, label_format, shots)
            enc = scored_encodings(tokenizer, codec, shown, prompt, label_format, scored)
            gen = {
                p: text_ids(tokenizer, generative_prompt(p, shown), special_tokens(shown))
                for p in (generative if r == 0 else [])
            }
            views.append(View(shown, r, enc, gen))
    return views


def _multiple_input_view(tokenizer: Any, item: LmEvalItem, rotation: int, scored: Sequence[str]) -> View:
    """A multiple-input item's view: cloze only, each choice's context its own prompt. The
    letter and generative protocols do not apply: the document has no question to label
    choices under (the probe says so once, ``McqaProbe.validate``)."""
    if keys.CLOZE not in scored:
        return View(item, rotation, {})
    prompts, conts = multiple_input_encoding(tokenizer, item, item.special_tokens)
    return View(item, rotation, {keys.CLOZE: (shared_prefix(prompts), conts)}, {}, {keys.CLOZE: prompts})
