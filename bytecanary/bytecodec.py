"""Token ids <-> bytes for the three tokenizer families byte-aware models use (byte_fallback, gpt2, bytes).

A dense id -> bytes table makes a batch of ids one array lookup that feeds ``utf8.StreamScorer``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from bytecanary.utf8 import PAD

FAMILIES = ("byte_fallback", "gpt2", "bytes")


class UnsupportedTokenizerError(ValueError):
    """The tokenizer has no complete set of 256 byte tokens in any supported family."""


def gpt2_byte_alphabet() -> list[str]:
    """GPT-2's bytes-to-unicode table: entry b is the printable character spelling byte b."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    printable += range(ord("®"), ord("ÿ") + 1)
    shifted = iter(range(256, 512))
    return [chr(b) if b in printable else chr(next(shifted)) for b in range(256)]


def _byte_token_spellings(family: str) -> list[str]:
    if family == "byte_fallback":
        return [f"<0x{b:02X}>" for b in range(256)]
    if family == "gpt2":
        return gpt2_byte_alphabet()
    return [chr(b) for b in range(256)]


@dataclass(frozen=True)
class ByteCodec:
    """Dense id -> bytes table of one tokenizer, plus the ids of its 256 byte tokens."""

    family: str
    id_bytes: list[bytes]  # bytes of every id (b"" for special tokens and unused ids)
    table: np.ndarray  # (V, L) uint16, id_bytes padded with utf8.PAD
    lengths: np.ndarray  # (V,) number of bytes of each id
    byte_ids: np.ndarray  # (256,) id of the byte token for each byte value
    is_byte_token: np.ndarray  # (V,) True for the 256 byte tokens
    adds_leading_space: bool  # encoding "a" yields the bytes " a" (Metaspace prepend)

    @classmethod
    def from_tokenizer(cls, tokenizer: Any) -> ByteCodec:
        """Build the codec of a ``transformers`` tokenizer (``padded``: over a model's larger
        embedding)."""
        vocab: dict[str, int] = tokenizer.get_vocab()
        family, byte_ids = _detect_family(vocab, getattr(tokenizer, "name_or_path", "tokenizer"))
        size = max(len(tokenizer), max(vocab.values()) + 1)
        special = set(tokenizer.all_special_ids)
        id_bytes = [b""] * size
        for token, i in vocab.items():
            if i not in special:
                id_bytes[i] = _token_bytes(token, family)
        for b, i in enumerate(byte_ids):
            id_bytes[i] = bytes([b])
        lengths = np.fromiter(map(len, id_bytes), dtype=np.int64, count=size)
        table = np.full((size, max(int(lengths.max()), 1)), PAD, dtype=np.uint16)
        table[np.arange(table.shape[1]) < lengths[:, None]] = np.frombuffer(b"".join(id_bytes), np.uint8)
        is_byte = np.zeros(size, dtype=bool)
        is_byte[byte_ids] = True
        probe = tokenizer.encode("a", add_special_tokens=False)
        leading = b"".join(id_bytes[i] for i in probe) == b" a"
        return cls(family, id_bytes, table, lengths, byte_ids, is_byte, leading)

    def padded(self, size: int) -> ByteCodec:
        """This codec over ``size`` ids: the ids beyond the tokenizer's (a model's padded
        embedding, which an early checkpoint may emit) are tokens with no bytes."""
        extra = size - len(self.id_bytes)
        if extra <= 0:
            return self
        return replace(
            self,
            id_bytes=self.id_bytes + [b""] * extra,
            table=np.vstack([self.table, np.full((extra, self.table.shape[1]), PAD, self.table.dtype)]),
            lengths=np.concatenate([self.lengths, np.zeros(extra, self.lengths.dtype)]),
            is_byte_token=np.concatenate([self.is_byte_token, np.zeros(extra, dtype=bool)]),
        )

    def decode(self, ids: Iterable[int]) -> bytes:
        """Bytes of a token sequence (no cleanup, no replacement of invalid UTF-8)."""
        return b"".join(self.id_bytes[i] for i in ids)

    def chunk(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(N, L) padded bytes and (N,) lengths of one token per stream: feeds StreamScorer."""
        ids = np.asarray(ids)
        return self.table[ids], self.lengths[ids]

    def encode_bytes(self, data: bytes) -> list[int]:
        """Byte-token ids spelling ``data`` one byte per token."""
        return self.byte_ids[np.frombuffer(data, np.uint8)].tolist()


def _detect_family(vocab: dict[str, int], name: str) -> tuple[str, np.ndarray]:
    missing = {}
    for family in FAMILIES:
        spellings = _byte_token_spellings(family)
        absent = [s for s in spellings if s not in vocab]
        if not absent:
            return family, np.array([vocab[s] for s in spellings], dtype=np.int64)
        missing[family] = absent
    detail = "; ".join(
        f"{fam}: {len(a)} of 256 missing, e.g. {', '.join(map(repr, a[:3]))}" for fam, a in missing.items()
    )
    raise UnsupportedTokenizerError(
        f"{name}: unsupported tokenizer, no complete set of byte tokens ({detail})"
    )


_GPT2_DECODER = {c: b for b, c in enumerate(gpt2_byte_alphabet())}


def _token_bytes(token: str, family: str) -> bytes:
    if family == "byte_fallback":
        return token.replace("▁", " ").encode("utf-8")
    if family == "gpt2" and all(c in _GPT2_DECODER for c in token):
        return bytes(_GPT2_DECODER[c] for c in token)
    return token.encode("utf-8")  # added tokens, and ByT5's single-char byte tokens
