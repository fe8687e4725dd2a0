"""Tiny tokenizers of every supported family, built in-process (nothing downloads)."""

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import ByT5Tokenizer, PreTrainedTokenizerFast

SAMPLE_TEXT = [
    "The quick brown fox jumps over the lazy dog.",
    "日本語の文章です。東京は大きい。",
    "한국어 문장입니다. 서울은 큽니다.",
    "中文句子。北京很大。",
] * 20


def _byte_fallback_tokenizer() -> PreTrainedTokenizerFast:
    specials = ["<unk>", "<s>", "</s>", "<pad>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Sequence(
        [
            decoders.Replace("▁", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(" ", 1, 0),
        ]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=specials + [f"<0x{b:02X}>" for b in range(256)],
        limit_alphabet=60,
        show_progress=False,
    )
    tok.train_from_iterator(SAMPLE_TEXT, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
    )


def _gpt2_tokenizer() -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(SAMPLE_TEXT, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>"
    )


@pytest.fixture(scope="session")
def byte_fallback_tokenizer() -> PreTrainedTokenizerFast:
    return _byte_fallback_tokenizer()


@pytest.fixture(scope="session")
def gpt2_tokenizer() -> PreTrainedTokenizerFast:
    return _gpt2_tokenizer()


@pytest.fixture(scope="session")
def bytes_tokenizer() -> ByT5Tokenizer:
    return ByT5Tokenizer()


@pytest.fixture(scope="session", params=["byte_fallback", "gpt2", "bytes"])
def any_tokenizer(request, byte_fallback_tokenizer, gpt2_tokenizer, bytes_tokenizer):
    return request.param, {
        "byte_fallback": byte_fallback_tokenizer,
        "gpt2": gpt2_tokenizer,
        "bytes": bytes_tokenizer,
    }[request.param]
