"""How MCQA answers are tokenised: the space-tokenization trap (the space-tokenization trap
MCQA paper, sections 1.1-1.2).

Letter scoring reads the answer after ``Answer:``. *Merged*: the prompt ends ``Answer:``
and the continuation is `` A`` (one token with its word-boundary marker, as the model
writes it). *Separate*: the prompt ends with the space as a token of its own and the
continuation is the bare letter. A SentencePiece-style tokenizer encodes both ``"A"`` and
``" A"`` as ``▁A``, and lm-evaluation-harness moves a trailing space into the
continuation, so *separate* silently becomes *merged* unless the ids are built by hand,
as here: the tokenizer's own space token, then the letter's plain token (or its byte
tokens when the vocabulary has none).

Cloze scoring follows lm-evaluation-harness's ``_encode_pair`` for causal models, so
the numbers are comparable with that harness: trailing whitespace of the context moves
to the continuation, and context + continuation are encoded together and split at the
context's length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bytecanary.bytecodec import ByteCodec


def _ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


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


def letter_separate(tokenizer: Any, codec: ByteCodec, prompt: str, labels: list[str]) -> LetterEncoding:
    """``[..., "Answer:", <space>]`` + bare letter: the space is its own token."""
    base = _ids(tokenizer, prompt.rstrip())
    space = token_for_bytes(codec, b" ")
    return LetterEncoding(base + space, [token_for_bytes(codec, label.encode()) for label in labels])


def letter_merged(tokenizer: Any, codec: ByteCodec, prompt: str, labels: list[str]) -> LetterEncoding:
    """``[..., "Answer:"]`` + `` A``: the letter with its word-boundary marker, exactly the
    tokens the tokenizer writes after the prompt."""
    context = prompt.rstrip()
    base = _ids(tokenizer, context)
    return LetterEncoding(base, [encode_pair(tokenizer, context, f" {label}")[1] for label in labels])


def encode_pair(tokenizer: Any, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """lm-evaluation-harness's ``_encode_pair``: (context ids, continuation ids)."""
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces:
        continuation = context[-n_spaces:] + continuation
        context = context[:-n_spaces]
    whole = _ids(tokenizer, context + continuation)
    n_context = len(_ids(tokenizer, context))
    return whole[:n_context], whole[n_context:]
