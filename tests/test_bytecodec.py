"""Byte codec on tiny tokenizers of all three families."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from bytecanary import utf8
from bytecanary.bytecodec import ByteCodec, UnsupportedTokenizerError, gpt2_byte_alphabet

TEXTS = ["plain ascii", "日本語と𫝀", "한국어 文", "emoji 😀 and é", "  two  spaces", "\x00\x7f"]


def test_gpt2_alphabet_is_the_byte_level_alphabet():
    table = gpt2_byte_alphabet()
    assert len(set(table)) == 256
    assert set(table) == set(pre_tokenizers.ByteLevel.alphabet())
    assert table[ord("A")] == "A" and table[ord(" ")] == "Ġ"


def test_family_detection(any_tokenizer):
    family, tok = any_tokenizer
    codec = ByteCodec.from_tokenizer(tok)
    assert codec.family == family
    assert codec.is_byte_token.sum() == 256
    assert codec.adds_leading_space == (family == "byte_fallback")


@pytest.mark.parametrize("text", TEXTS)
def test_decode_equals_the_text_bytes(any_tokenizer, text):
    family, tok = any_tokenizer
    codec = ByteCodec.from_tokenizer(tok)
    want = text.encode()
    if family == "byte_fallback" and not text.startswith(" "):
        want = b" " + want  # Metaspace prepends ▁ unless the text already starts with one
    assert codec.decode(tok.encode(text, add_special_tokens=False)) == want


def test_special_tokens_have_no_bytes(any_tokenizer):
    _, tok = any_tokenizer
    codec = ByteCodec.from_tokenizer(tok)
    for i in tok.all_special_ids:
        assert codec.id_bytes[i] == b"" and codec.lengths[i] == 0


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=40))
def test_byte_tokens_round_trip_any_bytes(any_tokenizer, data):
    _, tok = any_tokenizer
    codec = _codec(tok)
    ids = codec.encode_bytes(data)
    assert all(codec.is_byte_token[i] for i in ids)
    assert codec.decode(ids) == data


def test_chunk_is_an_array_lookup_that_feeds_the_scorer(any_tokenizer):
    _, tok = any_tokenizer
    codec = _codec(tok)
    texts = ["日本語", "𫝀x", "abc"]
    ids = [tok.encode(t, add_special_tokens=False) for t in texts]
    steps = max(map(len, ids))
    scorer = utf8.StreamScorer(len(texts))
    for t in range(steps):
        column = np.array([seq[t] if t < len(seq) else tok.all_special_ids[0] for seq in ids])
        chunk, lengths = codec.chunk(column)
        np.testing.assert_array_equal(lengths, [len(codec.id_bytes[i]) for i in column])
        scorer.feed(chunk, lengths)
    want = utf8.score_batch([codec.decode(seq) for seq in ids])
    np.testing.assert_array_equal(scorer.scores().partial, want.partial)
    assert scorer.scores().strict.tolist() == [1.0, 1.0, 1.0]


def test_padded_model_vocabulary_decodes_extra_ids_to_nothing(byte_fallback_tokenizer):
    codec = ByteCodec.from_tokenizer(byte_fallback_tokenizer).padded(len(byte_fallback_tokenizer) + 7)
    assert len(codec.id_bytes) == len(byte_fallback_tokenizer) + 7
    assert codec.decode([len(byte_fallback_tokenizer) + 3]) == b""
    extra = np.array([len(byte_fallback_tokenizer) + 6])
    chunk, lengths = codec.chunk(extra)
    assert lengths.tolist() == [0] and not codec.is_byte_token[extra].any() and chunk.shape[0] == 1
    assert codec.padded(10) is codec  # never smaller than the tokenizer


def test_unsupported_tokenizer_names_the_missing_byte_tokens():
    vocab = {"<unk>": 0, "a": 1, "b": 2, "<0x00>": 3}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>")
    with pytest.raises(UnsupportedTokenizerError, match=r"byte_fallback: 255 of 256 missing.*<0x01>"):
        ByteCodec.from_tokenizer(fast)


_CACHE: dict[int, ByteCodec] = {}


def _codec(tok) -> ByteCodec:
    return _CACHE.setdefault(id(tok), ByteCodec.from_tokenizer(tok))
