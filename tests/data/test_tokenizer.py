"""Trained tokenizers: lossless on any text, rare characters as byte tokens, HF-loadable."""

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

from bytecanary.bytecodec import ByteCodec
from bytecanary.data.config import SyntheticSource, TokenizerConfig
from bytecanary.data.corpus import synthetic_documents
from bytecanary.data.languages import LANGUAGES
from bytecanary.data.tokenizer import kept_alphabet, save_tokenizer, train_tokenizer


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    docs = []
    for code in LANGUAGES:
        docs += synthetic_documents(LANGUAGES[code], SyntheticSource(megabytes=0.1), seed=0)
    return docs


@pytest.fixture(scope="module")
def tokenizers(corpus, tmp_path_factory) -> dict:
    """Each kind trained once, saved and reloaded through AutoTokenizer."""
    loaded = {}
    for kind in ("byte_fallback", "gpt2", "bytes"):
        cfg = TokenizerConfig(kind=kind, vocab_size=1000, character_coverage=0.995)
        out = tmp_path_factory.mktemp(kind)
        save_tokenizer(train_tokenizer(cfg, corpus, show_progress=False), out)
        loaded[kind] = AutoTokenizer.from_pretrained(str(out))
    return loaded


@pytest.fixture(params=["byte_fallback", "gpt2", "bytes"])
def trained(request, tokenizers):
    return request.param, tokenizers[request.param]


def test_loads_with_auto_tokenizer_with_eos_and_pad(trained):
    kind, tok = trained
    assert tok.eos_token == "</s>" and tok.pad_token == "<pad>"
    assert tok.eos_token_id is not None and tok.pad_token_id is not None
    assert len(tok) == (260 if kind == "bytes" else 1000)
    assert ByteCodec.from_tokenizer(tok).family == ("gpt2" if kind == "gpt2" else "byte_fallback")


# any code point except surrogates and U+2581 (SentencePiece's own space marker)
_text = st.text(
    st.characters(exclude_categories=("Cs",), exclude_characters="▁")
    | st.sampled_from(["𠀀", "𪛖", "𫝀", " ", "\n", "語"]),
    max_size=40,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_text)
def test_round_trip_is_lossless(trained, text):
    _, tok = trained
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text


def test_round_trip_of_unseen_extension_b(trained):
    _, tok = trained
    text = "北京𠀀𠁁𪛖 and 𫝀"
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text
    codec = ByteCodec.from_tokenizer(tok)
    body = codec.decode(ids)
    assert body.endswith(text.encode())  # the byte codec agrees with the tokenizer


@pytest.mark.parametrize("kind", ["byte_fallback", "bytes"])  # GPT-2 has no byte fallback
def test_rare_characters_are_byte_tokens(corpus, tokenizers, kind):
    tok = tokenizers[kind]
    counts = Counter("".join(corpus).replace(" ", "▁"))
    alphabet = set(kept_alphabet(counts, 0.995, 10_000))
    rare = [c for c, n in counts.items() if c not in alphabet][:50]
    assert len(rare) >= 20
    codec = ByteCodec.from_tokenizer(tok)
    for char in rare:
        ids = tok.encode(char, add_special_tokens=False)
        byte_ids = [i for i in ids if codec.is_byte_token[i]]
        assert len(byte_ids) == len(char.encode()), char  # every byte of it is a byte token
    if kind == "byte_fallback":
        common = counts.most_common(3)[-1][0]
        assert not any(codec.is_byte_token[i] for i in tok.encode(common, add_special_tokens=False))


def test_kept_alphabet_covers_the_requested_share():
    counts = Counter({"a": 50, "b": 30, "c": 15, "d": 4, "e": 1})
    assert kept_alphabet(counts, 0.8, 10) == ["a", "b"]
    assert kept_alphabet(counts, 0.95, 10) == ["a", "b", "c"]
    assert kept_alphabet(counts, 1.0, 10) == ["a", "b", "c", "d", "e"]
    assert kept_alphabet(counts, 1.0, 2) == ["a", "b"]
