"""How MCQA answers are tokenised (the space-tokenization trap MCQA paper, sections 1.1-1.2):
letter ids built by hand so *separate* stays separate, and cloze pairs encoded as
lm-evaluation-harness encodes them, so the numbers compare with it (docs/mcqa-probes.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bytecanary.bytecodec import ByteCodec
from bytecanary.errors import BytecanaryError


def text_ids(tokenizer: Any, text: str, special: bool | None = False) -> list[int]:
    """``text``'s ids: with the tokenizer's special tokens (``special`` True), without them
    (False), or as lm-eval 0.4.13's ``HFLM.tok_encode`` by default (None: the tokenizer's own
    default, and none where the text already begins with the prefix token's text)."""
    if special is None and text.startswith(tokenizer.decode([prefix_token_id(tokenizer)])):
        special = False
    kwargs = {} if special is None else {"add_special_tokens": special}
    return list(tokenizer.encode(text, **kwargs))


def prefix_token_id(tokenizer: Any) -> int:
    """lm-eval's ``prefix_token_id``: the token an empty context stands for (BOS, else EOS)."""
    return tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id


def token_for_bytes(codec: ByteCodec, data: bytes) -> list[int]:
    """One non-byte token spelling exactly ``data`` if the vocabulary has it, else the
    byte tokens (a token of a single byte still wins over the byte token)."""
    for i, b in enumerate(codec.id_bytes):
        if b == data and not codec.is_byte_token[i]:
            return [i]
    return codec.encode_bytes(data)


@dataclass(frozen=True)
class LetterEncoding:
    """Prompt ids and one continuation per label, for one space strategy."""

    prompt_ids: list[int]
    continuations: list[list[int]]


def letter_separate(
    tokenizer: Any, codec: ByteCodec, prompt: str, labels: list[str], special: bool | None = False
) -> LetterEncoding:
    """``[..., "Answer:", <space>]`` + bare letter: the space is its own token (``special``:
    the prompt's special tokens, as ``text_ids``)."""
    base = text_ids(tokenizer, prompt.rstrip(), special)
    space = token_for_bytes(codec, b" ")
    return LetterEncoding(base + space, [token_for_bytes(codec, label.encode()) for label in labels])


def letter_merged(
    tokenizer: Any, codec: ByteCodec, prompt: str, labels: list[str], special: bool | None = False
) -> LetterEncoding:
    """``[..., "Answer:"]`` + `` A``: the letter with its word-boundary marker, exactly the
    tokens the tokenizer writes after the prompt (``special``: the prompt's special tokens)."""
    context = prompt.rstrip()
    pairs = [lm_eval_pair(tokenizer, context, f" {label}", special) for label in labels]
    return LetterEncoding(pairs[0][0], [cont for _, cont in pairs])


def _moved(context: str, continuation: str) -> tuple[str, str]:
    """lm-eval's whitespace move: the context's trailing whitespace starts the continuation."""
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces:
        return context[:-n_spaces], context[-n_spaces:] + continuation
    return context, continuation


def encode_pair(tokenizer: Any, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """Our own tasks' split: the whole encoding (no special tokens) cut at the context's
    length, (context ids, continuation ids)."""
    context, continuation = _moved(context, continuation)
    whole = text_ids(tokenizer, context + continuation)
    n_context = len(text_ids(tokenizer, context))
    return whole[:n_context], whole[n_context:]


def lm_eval_pair(
    tokenizer: Any, context: str, continuation: str, special: bool | None = None
) -> tuple[list[int], list[int]]:
    """lm-eval 0.4.13's (context ids, continuation ids) of one loglikelihood request (``_encode_pair``):
    the context encoded alone, the continuation what follows it in the whole encoding; ``special``:
    the special tokens as ``text_ids`` (None: lm-eval's default).
    """
    if not context:
        cont = text_ids(tokenizer, continuation, False)
        if cont and cont[0] == prefix_token_id(tokenizer):
            raise BytecanaryError(f"choice {continuation!r} begins with the prefix token's text")
        return [prefix_token_id(tokenizer)], cont
    context, continuation = _moved(context, continuation)
    context_ids = text_ids(tokenizer, context, special)
    cont = text_ids(tokenizer, context + continuation, special)[len(context_ids) :]
    if not cont:
        raise BytecanaryError(
            f"choice {continuation!r} has no tokens of its own after the context (the tokenizer merges it "
            "into the context's end; lm-eval refuses it too)"
        )
    return context_ids, cont
