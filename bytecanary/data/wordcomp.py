"""The embedded word-completion MCQA task, built from held-out text by ``bytecanary prepare``: it moves
as a small model learns words, where a benchmark sits at chance, and its distractors match the gold's
token count so an untrained model scores chance (docs/mcqa-probes.md, "Word completion starts at chance").
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from bytecanary.data.corpus import word_distribution
from bytecanary.data.evalsets import checked_entry, sentences
from bytecanary.data.languages import LANGUAGES, Language
from bytecanary.errors import BytecanaryError
from bytecanary.io import atomic_path, read_text

VOCABULARY = 20_000  # target words come from the language's most frequent wordfreq words
MIN_CONTEXT = 8  # characters of the sentence before the target word
FIRST_BATCH = 16  # candidate distractors encoded at once, doubling until three match
FIELDS = ("id", "task", "language", "question", "choices", "answer", "continuation", "delimiter")
_TYPES = {"id": str, "task": str, "language": str, "question": str, "continuation": bool, "delimiter": str}


def file_name(language: str) -> str:
    return f"mcqa_wordcomp_{language}.jsonl"


def _vocabulary(language: str) -> set[str]:
    minimum = 4 if language == "en" else 2  # English halves of at least two letters
    return {w for w in word_distribution(language, VOCABULARY)[0] if len(w) >= minimum}


def _words(sentence: str, lang: Language, known: set[str], longest: int) -> Iterator[tuple[int, str]]:
    """(position, word) of each vocabulary word: a token between separators (stripped of
    punctuation), or, in a script without separators, the longest word at each character."""
    if lang.word_separator:
        pos = 0
        for token in sentence.split(lang.word_separator):
            if token.strip(".,?!") in known:
                yield pos, token.strip(".,?!")
            pos += len(token) + len(lang.word_separator)
        return
    for pos in range(len(sentence) - 1):
        for k in range(longest, 1, -1):
            if sentence[pos : pos + k] in known:
                yield pos, sentence[pos : pos + k]
                break


def _endings(known: set[str]) -> dict[int, list[str]]:
    """Distinct second halves of the vocabulary by length, sorted so the seeded draw is stable."""
    by_length: dict[int, set[str]] = {}
    for word in known:
        by_length.setdefault(len(word) - len(word) // 2, set()).add(word[len(word) // 2 :])
    return {length: sorted(halves) for length, halves in by_length.items()}


def _token_counts(tokenizer: Any, texts: list[str]) -> list[int]:
    """Tokens of each text as the probe encodes it (no special tokens), in one batch."""
    return [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]


def _distractors(tokenizer: Any, question: str, right: str, candidates: list[str]) -> list[str]:
    """The first three ``candidates`` that give ``question`` as many tokens as ``right``
    does (fewer when too few do), encoded in doubling batches: most items need one."""
    want = _token_counts(tokenizer, [question + right])[0]
    picked: list[str] = []
    start, size = 0, FIRST_BATCH
    while start < len(candidates) and len(picked) < 3:
        batch = candidates[start : start + size]
        counts = _token_counts(tokenizer, [question + e for e in batch])
        picked += [e for e, count in zip(batch, counts, strict=True) if count == want]
        start, size = start + size, size * 2
    return picked[:3]


def build_items(
    heldout_docs: Iterable[str], language: str, n: int, seed: int, tokenizer: Any
) -> tuple[list[dict], int]:
    """Up to ``n`` items from the held-out documents' word occurrences in a seeded order, and how many
    occurrences were dropped for want of three distractors (same length, no word with the first half,
    the gold's token count under ``tokenizer``, the run's)."""
    lang = LANGUAGES[language]
    known = _vocabulary(language)
    longest = max(map(len, known))
    found = [
        (sentence[:pos], word)
        for doc in heldout_docs
        for sentence in sentences(doc, lang)
        for pos, word in _words(sentence, lang, known, longest)
        if pos >= MIN_CONTEXT
    ]
    endings = _endings(known)
    rng = np.random.default_rng([seed, 7, sorted(LANGUAGES).index(language)])
    items: list[dict] = []
    dropped = 0
    for i in rng.permutation(len(found)):
        context, word = found[i]
        half = len(word) // 2
        question, right = context + word[:half], word[half:]
        # an ending that makes another vocabulary word of the first half would be right too
        pool = [e for e in endings[len(right)] if word[:half] + e not in known]
        others = _distractors(tokenizer, question, right, [pool[j] for j in rng.permutation(len(pool))])
        if len(others) < 3:
            dropped += 1
            continue
        answer = len(items) % 4
        items.append(
            {
                "id": f"wordcomp_{language}-{len(items)}",
                "task": f"wordcomp_{language}",
                "language": language,
                "question": question,
                "choices": [*others[:answer], right, *others[answer:]],
                "answer": answer,
                "continuation": True,
                "delimiter": "",
            }
        )
        if len(items) == n:
            break
    return items, dropped


def write_items(path: Path, items: list[dict]) -> None:
    """One JSON object per line, replacing ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text("".join(json.dumps(i, ensure_ascii=False) + "\n" for i in items), encoding="utf-8")


def _checked(item: object, where: str) -> dict:
    item = checked_entry(item, where, FIELDS)
    for key, kind in _TYPES.items():
        if not isinstance(item[key], kind):
            raise BytecanaryError(f"{where}: {key!r} must be {kind.__name__}, got {item[key]!r}")
    if item["language"] not in LANGUAGES:
        raise BytecanaryError(f"{where}: unknown language {item['language']!r}")
    choices, answer = item["choices"], item["answer"]
    if not isinstance(choices, list) or len(choices) < 2 or not all(isinstance(c, str) for c in choices):
        raise BytecanaryError(f"{where}: 'choices' must be a list of at least two texts")
    if not isinstance(answer, int) or isinstance(answer, bool) or not 0 <= answer < len(choices):
        raise BytecanaryError(f"{where}: 'answer' must index 'choices', got {answer!r}")
    return item


def load_items(path: str | Path) -> list[dict]:
    """Every item of a pool file, each line checked. The file is written atomically, so
    every non-blank line must parse (``read_jsonl`` skips a torn last line, as a log being
    written may have)."""
    path = Path(path)
    if not path.is_file():
        raise BytecanaryError(f"{path}: no word-completion items; run `bytecanary prepare` for this data")
    items = []
    # split on "\n" only: held-out text may hold U+2028 or U+0085, which splitlines() splits on
    for number, line in enumerate(read_text(path, "eval-set file").split("\n"), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as err:
            raise BytecanaryError(f"{path}:{number}: not valid JSON ({err.msg})") from None
        items.append(_checked(item, f"{path}:{number}"))
    return items
