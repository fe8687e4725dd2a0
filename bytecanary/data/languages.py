"""What each language means to the corpus and the eval sets: scripts, blocks, punctuation; evaluation
characters are multi-byte characters of the language's own Unicode blocks (arXiv:2606.14122, section 3.1).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass

# Unicode blocks as inclusive (first, last) code point ranges
LATIN_1_LETTERS = [(0x00C0, 0x00D6), (0x00D8, 0x00F6), (0x00F8, 0x00FF)]
LATIN_EXTENDED = [(0x0100, 0x024F)]  # Latin Extended-A and -B: 2 bytes
LATIN_EXTENDED_ADDITIONAL = [(0x1E00, 0x1EFF)]  # 3 bytes
HIRAGANA = [(0x3041, 0x3096)]
KATAKANA = [(0x30A1, 0x30FA)]
HANGUL_SYLLABLES = [(0xAC00, 0xD7A3)]
CJK_UNIFIED = [(0x4E00, 0x9FFF)]
CJK_EXT_A = [(0x3400, 0x4DBF)]
CJK_EXT_B = [(0x20000, 0x2A6DF)]  # 4 bytes


@dataclass(frozen=True)
class Language:
    """One language: which characters it writes and how its sentences look."""

    code: str
    word_blocks: list[tuple[int, int]]  # characters a corpus word may use (besides ASCII for en)
    eval_blocks: list[tuple[int, int]]  # where eval characters come from, seen or unseen
    unseen_3b_blocks: list[tuple[int, int]]  # 3-byte blocks for the unseen_3b control tier
    word_separator: str  # between words: " " or "" (no spaces in Japanese and Chinese)
    sentence_ends: tuple[str, ...]  # sentence-final punctuation, most common first
    comma: str
    template: str  # a Level 1 sentence around a character {c}, when held-out text runs short

    @functools.cached_property
    def word_pattern(self) -> re.Pattern[str]:
        """Strings of the characters a word may use: one match per word, where testing each
        character against each block takes seconds over a 300,000-word list."""
        ranges = [(0, 0x7F)] * (self.code == "en") + self.word_blocks
        return re.compile("[" + "".join(f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in ranges) + "]*")


LANGUAGES: dict[str, Language] = {
    "en": Language(
        "en",
        LATIN_1_LETTERS + LATIN_EXTENDED,
        LATIN_1_LETTERS + LATIN_EXTENDED + LATIN_EXTENDED_ADDITIONAL,
        LATIN_EXTENDED_ADDITIONAL,
        " ",
        (". ", "? ", "! "),
        ", ",
        "The word is spelled with the letter {c}",
    ),
    "ja": Language(
        "ja",
        HIRAGANA + KATAKANA + [(0x30FC, 0x30FC)] + CJK_UNIFIED,
        HIRAGANA + KATAKANA + CJK_UNIFIED,
        CJK_UNIFIED,
        "",
        ("。", "？", "！"),
        "、",
        "この言葉には「{c}",
    ),
    "ko": Language(
        "ko",
        HANGUL_SYLLABLES,
        HANGUL_SYLLABLES,
        HANGUL_SYLLABLES,
        " ",
        (". ", "? ", "! "),
        ", ",
        "이 단어에는 {c}",
    ),
    "zh": Language(
        "zh",
        CJK_UNIFIED + CJK_EXT_A + CJK_EXT_B,
        CJK_UNIFIED + CJK_EXT_A + CJK_EXT_B,
        CJK_UNIFIED + CJK_EXT_A,
        "",
        ("。", "？", "！"),
        "，",
        "这个词里有一个字「{c}",
    ),
}


def in_blocks(char: str, blocks: list[tuple[int, int]]) -> bool:
    cp = ord(char)
    return any(lo <= cp <= hi for lo, hi in blocks)


def is_assigned(char: str) -> bool:
    """True for code points Unicode assigns (not unassigned, surrogate or private use)."""
    return unicodedata.category(char) not in ("Cn", "Cs", "Co")


def block_characters(blocks: list[tuple[int, int]]) -> list[str]:
    """Every assigned character of ``blocks``, in code point order."""
    return [c for lo, hi in blocks for c in map(chr, range(lo, hi + 1)) if is_assigned(c)]


def is_word_of(word: str, lang: Language) -> bool:
    """Whether a word-list entry belongs to the language's script (drops Latin words
    from CJK lists, digits, symbols)."""
    if lang.code == "en" and not word.replace("'", "").isalpha():
        return False
    return lang.word_pattern.fullmatch(word) is not None
