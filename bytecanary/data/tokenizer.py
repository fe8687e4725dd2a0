"""Train and save the tokenizer (HF ``tokenizers``), loadable with ``AutoTokenizer``: ``byte_fallback``
(the paper's, spelling rare characters in ``<0xNN>`` byte tokens, lossless SentencePiece-style
whitespace), ``gpt2`` (byte-level BPE) or ``bytes`` (docs/data.md, "Stages").
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from bytecanary.data.config import TokenizerConfig

SPECIALS = {"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>"}
BYTE_TOKENS = [f"<0x{b:02X}>" for b in range(256)]
SPACE = "▁"


def kept_alphabet(char_counts: Counter[str], coverage: float, limit: int) -> list[str]:
    """Most frequent characters covering ``coverage`` of all occurrences (at most ``limit``)."""
    total = sum(char_counts.values())
    kept, covered = [], 0
    for char, count in sorted(char_counts.items(), key=lambda kv: (-kv[1], kv[0])):
        if covered >= coverage * total or len(kept) >= limit:
            break
        kept.append(char)
        covered += count
    return kept


def _byte_fallback(cfg: TokenizerConfig, texts: list[str], show_progress: bool) -> Tokenizer:
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(text.replace(" ", SPACE))
    counts[SPACE] += len(texts)  # the prepended ▁ of every document
    specials = [*SPECIALS.values(), *BYTE_TOKENS]
    room = cfg.vocab_size - len(specials) - 1  # keep at least one merge's worth of room
    alphabet = kept_alphabet(counts, cfg.character_coverage, room)
    tok = Tokenizer(models.BPE(unk_token=SPECIALS["unk_token"], byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend(SPACE), normalizers.Replace(" ", SPACE)])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="never", split=True)
    tok.decoder = decoders.Sequence(
        [
            decoders.Replace(SPACE, " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(" ", 1, 0),
        ]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=cfg.vocab_size,
        special_tokens=specials,
        initial_alphabet=alphabet,
        limit_alphabet=len(alphabet),
        max_token_length=cfg.max_token_length,
        show_progress=show_progress,
    )
    tok.train_from_iterator(texts, trainer)
    return tok


def _gpt2(cfg: TokenizerConfig, texts: list[str], show_progress: bool) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=cfg.vocab_size,
        special_tokens=list(SPECIALS.values()),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        max_token_length=cfg.max_token_length,
        show_progress=show_progress,
    )
    tok.train_from_iterator(texts, trainer)
    return tok


def _bytes() -> Tokenizer:
    vocab = {token: i for i, token in enumerate([*SPECIALS.values(), *BYTE_TOKENS])}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=SPECIALS["unk_token"], byte_fallback=True))
    tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse()])
    return tok


def train_tokenizer(
    cfg: TokenizerConfig, texts: Iterable[str], show_progress: bool = True
) -> PreTrainedTokenizerFast:
    """Train the configured tokenizer on ``texts`` and wrap it for ``transformers``."""
    texts = list(texts)
    if cfg.kind == "byte_fallback":
        tok = _byte_fallback(cfg, texts, show_progress)
    elif cfg.kind == "gpt2":
        tok = _gpt2(cfg, texts, show_progress)
    else:
        tok = _bytes()
    return PreTrainedTokenizerFast(tokenizer_object=tok, clean_up_tokenization_spaces=False, **SPECIALS)


def save_tokenizer(tokenizer: PreTrainedTokenizerFast, out_dir: Path) -> str:
    """``save_pretrained`` into ``out_dir``; returns the sha256 of its tokenizer.json."""
    tokenizer.save_pretrained(str(out_dir))
    return tokenizer_hash(out_dir)


def tokenizer_hash(tokenizer_dir: Path) -> str:
    """Identity of a trained tokenizer: retraining on the same text can differ, so
    shards and checkpoints record this hash rather than the config's."""
    return hashlib.sha256((Path(tokenizer_dir) / "tokenizer.json").read_bytes()).hexdigest()[:16]
