"""Eval sets for the UTF-8 probes ("Beyond Perplexity: UTF-8 Validity in Byte-aware LMs",
arXiv:2606.14122, sections 3.1 and 3.3) and their loaders, in the paper's published formats so its
own files load too (docs/data.md, "Stages"; docs/utf8-probes.md, "Trial mode and eval sets").
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bytecanary.data.languages import LANGUAGES, Language, block_characters, in_blocks
from bytecanary.errors import BytecanaryError
from bytecanary.io import read_text

TIERS = ("common", "uncommon", "rare", "unseen", "unseen_3b")


@dataclass(frozen=True)
class CharEntry:
    """One Level 0 character (a ``char_frequencies`` entry)."""

    char: str
    count: int
    frequency: float
    tier: str

    def to_json(self) -> dict:
        cp = ord(self.char)
        return {
            "char": self.char,
            "codepoint": cp,
            "hex": f"U+{cp:04X}",
            "count": self.count,
            "frequency": self.frequency,
            "tier": self.tier,
        }


@dataclass(frozen=True)
class Level0Set:
    language: str
    description: str
    entries: list[CharEntry]


@dataclass(frozen=True)
class Level1Sample:
    language: str
    term: str
    sentence_prompt: str
    tier: str | None = None
    source: str | None = None  # "heldout" or "template"


# --- building -------------------------------------------------------------------------


def tier_characters(
    counts: dict[str, int], lang: Language, tier_mass: tuple[float, float]
) -> dict[str, list[str]]:
    """Every character of the language's eval blocks, by tier (before sampling)."""
    seen = sorted(
        ((c, n) for c, n in counts.items() if n > 0 and in_blocks(c, lang.eval_blocks)),
        key=lambda cn: (-cn[1], cn[0]),
    )
    total = sum(n for _, n in seen)
    tiers: dict[str, list[str]] = {t: [] for t in TIERS}
    before = 0
    for char, n in seen:
        share = before / total
        tiers["common" if share < tier_mass[0] else "uncommon" if share < tier_mass[1] else "rare"].append(
            char
        )
        before += n
    unseen = [c for c in block_characters(lang.eval_blocks) if counts.get(c, 0) == 0]
    tiers["unseen"] = unseen
    tiers["unseen_3b"] = [c for c in unseen if len(c.encode()) == 3 and in_blocks(c, lang.unseen_3b_blocks)]
    return tiers


def build_level0(
    counts: dict[str, int],
    lang: Language,
    tier_mass: tuple[float, float],
    max_per_tier: int,
    seed: int,
) -> Level0Set:
    """Sample up to ``max_per_tier`` characters of each tier (seeded)."""
    total = sum(counts.values()) or 1
    rng = np.random.default_rng([seed, sorted(LANGUAGES).index(lang.code)])
    entries = []
    for tier, chars in tier_characters(counts, lang, tier_mass).items():
        if len(chars) > max_per_tier:
            chars = [chars[i] for i in sorted(rng.choice(len(chars), max_per_tier, replace=False))]
        entries += [CharEntry(c, counts.get(c, 0), counts.get(c, 0) / total, tier) for c in chars]
    description = (
        f"Level 0 characters for {lang.code}: tiers by share of occurrences "
        f"(common < {tier_mass[0]}, uncommon < {tier_mass[1]}, rare after), unseen = zero count"
    )
    return Level0Set(lang.code, description, entries)


def sentences(doc: str, lang: Language) -> Iterable[str]:
    ends = "".join(re.escape(e.strip()) for e in lang.sentence_ends)
    for paragraph in doc.split("\n"):
        yield from (s.strip() for s in re.findall(rf"[^{ends}]*[{ends}]?", paragraph) if s.strip())


def build_level1(
    heldout_docs: Iterable[str],
    level0: Level0Set,
    targets: dict[str, str],
    n: int,
    min_context: int,
    seed: int,
) -> list[Level1Sample]:
    """Held-out sentences reaching a target character (``targets``: char -> tier), one per
    term, cut right after it; template sentences fill up to ``n``."""
    lang = LANGUAGES[level0.language]
    found: dict[str, Level1Sample] = {}
    for doc in heldout_docs:
        for sentence in sentences(doc, lang):
            for i, char in enumerate(sentence):
                if i >= min_context and char in targets and char not in found:
                    found[char] = Level1Sample(lang.code, char, sentence[: i + 1], targets[char], "heldout")
                    break
    rng = np.random.default_rng([seed, 1, sorted(LANGUAGES).index(lang.code)])
    samples = list(found.values())
    if len(samples) > n:
        samples = [samples[i] for i in sorted(rng.choice(len(samples), n, replace=False))]
    fill = [e for e in level0.entries if e.tier in ("rare", "unseen") and e.char not in found]
    for i in rng.permutation(len(fill))[: n - len(samples)]:
        e = fill[i]
        samples.append(Level1Sample(lang.code, e.char, lang.template.format(c=e.char), e.tier, "template"))
    return samples


# --- files ----------------------------------------------------------------------------


def level0_json(s: Level0Set) -> dict:
    return {
        "description": s.description,
        "language": s.language,
        "char_frequencies": [e.to_json() for e in s.entries],
    }


def level1_json(samples: list[Level1Sample]) -> list[dict]:
    return [{k: v for k, v in vars(s).items() if v is not None} for s in samples]


def _read_json(path: Path) -> object:
    """A JSON eval-set file, refused when empty, not UTF-8, malformed, or holding a lone
    surrogate (a ``\\ud800`` escape: no UTF-8 bytes encode it) anywhere."""
    text = read_text(path, "eval-set file")
    if not text.strip():
        raise BytecanaryError(f"{path}: empty file (no JSON)")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise BytecanaryError(f"{path}: invalid JSON ({err.msg}, line {err.lineno})") from None
    check_no_surrogates(data, str(path))
    return data


def lone_surrogate(text: str) -> str | None:
    """The first lone surrogate code point in ``text`` (as ``U+D800``), else None."""
    found = next((c for c in text if 0xD800 <= ord(c) <= 0xDFFF), None)
    return None if found is None else f"U+{ord(found):04X}"


def _surrogate_path(value: object, path: tuple) -> tuple[tuple, str, bool] | None:
    """(key path, code point, whether a key holds it) of the first string, value or key,
    holding a lone surrogate."""
    if isinstance(value, str):
        cp = lone_surrogate(value)
        return None if cp is None else (path, cp, False)
    children = (
        value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    )
    for key, child in children:
        if isinstance(key, str) and lone_surrogate(key):
            return (*path, key), lone_surrogate(key) or "", True
        found = _surrogate_path(child, (*path, key))
        if found:
            return found
    return None


def check_no_surrogates(data: object, where: str) -> None:
    """Refuse a lone surrogate anywhere in parsed JSON with one line naming the entry and
    field: ``FILE: char_frequencies[3]: 'char' holds a lone surrogate (U+D800) ...``."""
    found = _surrogate_path(data, ())
    if found is None:
        return
    path, cp, is_key = found
    last = max((i for i, k in enumerate(path) if isinstance(k, str)), default=-1)
    entry = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in path[: max(last, 0)]).lstrip(".")
    indices = "".join(f"[{k}]" for k in path[last + 1 :])
    name = "value" if last < 0 else f"key {path[last]!r}" if is_key else repr(path[last])
    at = f"{where}: {entry}: " if entry else f"{where}: "
    raise BytecanaryError(f"{at}{name}{indices} holds a lone surrogate ({cp}), which no UTF-8 bytes encode")


def checked_entry(item: object, where: str, required: tuple[str, ...]) -> dict:
    """An eval-set entry: an object holding every ``required`` key."""
    if not isinstance(item, dict):
        raise BytecanaryError(f"{where}: expected an object, got {item!r}")
    missing = [k for k in required if k not in item]
    if missing:
        raise BytecanaryError(f"{where}: missing {', '.join(missing)}")
    return item


# Unicode blocks that name a character's language in a file that mixes languages (as the
# paper's own tool grouped them: kanji count as zh); everything else is OTHER
SCRIPT_LANGUAGES = (
    ("ko", [(0x1100, 0x11FF), (0x3130, 0x318F), (0xA960, 0xA97F), (0xAC00, 0xD7FF)]),  # Hangul
    ("ja", [(0x3040, 0x30FF), (0x31F0, 0x31FF), (0xFF65, 0xFF9F), (0x1B000, 0x1B16F)]),  # kana
    ("zh", [(0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x323AF)]),  # Han
)
OTHER = "other"


def script_language(char: str) -> str:
    """The language a character's Unicode block names (``other`` outside Hangul, kana, Han)."""
    return next((lang for lang, blocks in SCRIPT_LANGUAGES if in_blocks(char, blocks)), OTHER)


def _file_language(path: Path, data: dict) -> str | None:
    """The language a file names for all its entries: its top-level ``language`` (our own
    files), else a language code in its name (``level0_ja.json``); None for a mixed file."""
    lang = data.get("language")
    if lang is None:
        return next((t for t in re.split(r"[^a-z]+", path.stem.lower()) if t in LANGUAGES), None)
    if not isinstance(lang, str) or lang not in LANGUAGES:
        raise BytecanaryError(f"{path}: 'language' must be one of {', '.join(LANGUAGES)}, got {lang!r}")
    return lang


def _char_entry(item: object, where: str) -> CharEntry:
    """One ``char_frequencies`` entry, every field checked."""
    item = checked_entry(item, where, ("char", "count", "tier"))
    char = item["char"]
    if not isinstance(char, str) or len(char) != 1:
        raise BytecanaryError(f"{where}: 'char' must be one character, got {char!r}")
    if "codepoint" in item and item["codepoint"] != ord(char):
        raise BytecanaryError(
            f"{where}: 'codepoint' {item['codepoint']!r} is not that of {char!r} ({ord(char)})"
        )
    if "hex" in item and str(item["hex"]).upper() != f"U+{ord(char):04X}":
        raise BytecanaryError(f"{where}: 'hex' {item['hex']!r} is not that of {char!r} (U+{ord(char):04X})")
    count = item["count"]
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise BytecanaryError(f"{where}: 'count' must be a non-negative integer, got {count!r}")
    freq = item.get("frequency", 0.0)
    if not isinstance(freq, int | float) or isinstance(freq, bool) or not 0 <= freq <= 1:
        raise BytecanaryError(f"{where}: 'frequency' must be a number in [0, 1], got {freq!r}")
    tier = item["tier"]
    if not isinstance(tier, str) or not re.fullmatch(r"[a-z0-9_]+", tier):
        raise BytecanaryError(f"{where}: 'tier' must be a lower-case name, got {tier!r}")
    return CharEntry(char, count, float(freq), tier)


def load_level0(path: str | Path) -> list[Level0Set]:
    """Read a Level 0 file in the published format, checking every entry: one set per
    language found (the file's ``language``, else each character's script), sorted."""
    path = Path(path)
    data = _read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("char_frequencies"), list):
        raise BytecanaryError(f'{path}: expected an object with a "char_frequencies" list')
    language = _file_language(path, data)
    by_language: dict[str, list[CharEntry]] = {}
    first: dict[tuple[str, str, str], int] = {}  # (language, char, tier) -> its entry's index
    for i, item in enumerate(data["char_frequencies"]):
        entry = _char_entry(item, f"{path}: char_frequencies[{i}]")
        lang = language or script_language(entry.char)
        seen = first.setdefault((lang, entry.char, entry.tier), i)
        if seen != i:  # the same item id (<lang>:U+XXXX) twice in one tier
            raise BytecanaryError(
                f"{path}: char_frequencies[{i}]: 'char' {entry.char!r} (U+{ord(entry.char):04X}, "
                f"tier {entry.tier!r}) repeats char_frequencies[{seen}]"
            )
        by_language.setdefault(lang, []).append(entry)
    if not by_language:
        raise BytecanaryError(f"{path}: char_frequencies: no characters")
    description = data.get("description") or ""
    if not isinstance(description, str):
        raise BytecanaryError(f"{path}: 'description' must be text, got {description!r}")
    return [Level0Set(lang, description, by_language[lang]) for lang in sorted(by_language)]


def load_level1(path: str | Path) -> list[Level1Sample]:
    """Read a Level 1 file (a JSON list of {language, term, sentence_prompt})."""
    path = Path(path)
    data = _read_json(path)
    if not isinstance(data, list):
        raise BytecanaryError(f"{path}: expected a JSON list of samples")
    if not data:
        raise BytecanaryError(f"{path}: no samples (an empty list)")
    samples = []
    for i, item in enumerate(data):
        where = f"{path}: [{i}]"
        item = checked_entry(item, where, ("language", "term", "sentence_prompt"))
        lang, term, prompt = item["language"], item["term"], item["sentence_prompt"]
        if not isinstance(lang, str) or lang not in LANGUAGES:
            raise BytecanaryError(f"{where}: unknown language {lang!r} (known: {', '.join(LANGUAGES)})")
        if not isinstance(term, str) or not term:
            raise BytecanaryError(f"{where}: 'term' must be non-empty text")
        if not isinstance(prompt, str) or not prompt.endswith(term):
            raise BytecanaryError(f"{where}: 'sentence_prompt' must end with the term {term!r}")
        for key in ("tier", "source"):
            if not isinstance(item.get(key), str | None):
                raise BytecanaryError(f"{where}: {key!r} must be text, got {item[key]!r}")
        samples.append(Level1Sample(lang, term, prompt, item.get("tier"), item.get("source")))
    return samples
