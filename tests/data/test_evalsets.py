"""Eval-set loaders: the published formats load; malformed entries are named by index."""

import json

import pytest

from bytecanary.data import evalsets
from bytecanary.errors import BytecanaryError


def _entry(char: str, count: int, tier: str) -> dict:
    """A ``char_frequencies`` entry with the published keys."""
    cp = ord(char)
    return {"char": char, "codepoint": cp, "hex": f"U+{cp:04X}", "count": count,
            "frequency": count / 1000, "tier": tier}  # fmt: skip


PUBLISHED = {  # the paper's format: no "language" field
    "description": "Korean characters by frequency",
    "char_frequencies": [_entry("가", 120, "common"), _entry("똠", 0, "unseen")],
}
# the shape of the paper's cjk_400.json: languages mixed in one file, no "language"
MIXED = {
    "description": "CJK characters by frequency",
    "char_frequencies": [
        _entry("中", 300, "common"),
        _entry("가", 120, "common"),
        _entry("ア", 40, "uncommon"),
        _entry("é", 2, "rare"),
        _entry("𫝀", 0, "unseen"),  # CJK Extension D, 4 bytes
        _entry("ㄱ", 0, "unseen"),  # Hangul Compatibility Jamo
        _entry("€", 1, "rare"),
    ],
}


def _write(path, obj):
    path.write_text(json.dumps(obj, ensure_ascii=False), encoding="utf-8")
    return path


def test_published_level0_format_loads(tmp_path):
    (s,) = evalsets.load_level0(_write(tmp_path / "chars.json", PUBLISHED))
    assert s.language == "ko" and [e.char for e in s.entries] == ["가", "똠"]
    assert s.entries[1] == evalsets.CharEntry("똠", 0, 0.0, "unseen")


def test_a_mixed_file_is_grouped_by_script_and_the_rest_is_other(tmp_path):
    sets = evalsets.load_level0(_write(tmp_path / "cjk_400.json", MIXED))
    got = {s.language: [e.char for e in s.entries] for s in sets}
    assert got == {"ja": ["ア"], "ko": ["가", "ㄱ"], "other": ["é", "€"], "zh": ["中", "𫝀"]}
    assert [s.language for s in sets] == sorted(got) and sets[0].description == MIXED["description"]


def test_a_language_the_file_names_holds_for_every_entry(tmp_path):
    (s,) = evalsets.load_level0(_write(tmp_path / "mine.json", {**MIXED, "language": "ja"}))
    assert s.language == "ja" and len(s.entries) == len(MIXED["char_frequencies"])
    (s,) = evalsets.load_level0(_write(tmp_path / "level0_ko.json", MIXED))
    assert s.language == "ko" and len(s.entries) == len(MIXED["char_frequencies"])


def test_round_trip_of_written_level0(tmp_path):
    s = evalsets.Level0Set("zh", "d", [evalsets.CharEntry("𫝀", 0, 0.0, "unseen")])
    loaded = evalsets.load_level0(_write(tmp_path / "any.json", evalsets.level0_json(s)))
    assert loaded == [s]
    assert evalsets.level0_json(s)["char_frequencies"][0]["hex"] == "U+2B740"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            {"char": "가", "count": 1, "tier": "common", "codepoint": 1},
            r"\[1\]: 'codepoint' 1 is not that of '가'",
        ),
        ({"char": "가", "count": 1, "tier": "common", "hex": "U+0041"}, r"\[1\]: 'hex' 'U\+0041'"),
        ({"char": "가나", "count": 1, "tier": "common"}, r"\[1\]: 'char' must be one character"),
        (
            {"char": "가", "count": -1, "tier": "common"},
            r"\[1\]: 'count' must be a non-negative integer",
        ),
        ({"char": "가", "count": 1}, r"\[1\]: missing tier"),
        ({"char": "가", "count": 1, "tier": "common", "frequency": "often"}, r"\[1\]: 'frequency'"),
        ("가", r"\[1\]: expected an object"),
    ],
)
def test_bad_level0_entries_are_named(tmp_path, entry, message):
    data = {**PUBLISHED, "char_frequencies": [PUBLISHED["char_frequencies"][0], entry]}
    path = _write(tmp_path / "level0_ko.json", data)
    with pytest.raises(BytecanaryError, match=rf"level0_ko\.json: char_frequencies{message}"):
        evalsets.load_level0(path)


def test_a_bad_language_an_empty_file_and_non_utf8_are_refused(tmp_path):
    with pytest.raises(BytecanaryError, match=r"x\.json: 'language' must be one of en, ja, ko, zh, got 'jp'"):
        evalsets.load_level0(_write(tmp_path / "x.json", {**PUBLISHED, "language": "jp"}))
    with pytest.raises(BytecanaryError, match="char_frequencies: no characters"):
        evalsets.load_level0(_write(tmp_path / "x.json", {**PUBLISHED, "char_frequencies": []}))
    bad = tmp_path / "level0_ja.json"
    bad.write_bytes(b"\xff{}")
    with pytest.raises(BytecanaryError, match="not UTF-8"):
        evalsets.load_level0(bad)


def test_level1_format(tmp_path):
    good = [{"language": "ja", "term": "鬱", "sentence_prompt": "気分が鬱", "extra": 1}]
    assert evalsets.load_level1(_write(tmp_path / "l1.json", good))[0].term == "鬱"
    bad = [*good, {"language": "ja", "term": "鬱", "sentence_prompt": "気分が"}]
    with pytest.raises(BytecanaryError, match=r"l1\.json: \[1\]: 'sentence_prompt' must end with the term"):
        evalsets.load_level1(_write(tmp_path / "l1.json", bad))
    with pytest.raises(BytecanaryError, match=r"\[0\]: unknown language 'jp'"):
        evalsets.load_level1(_write(tmp_path / "l1.json", [{**good[0], "language": "jp"}]))


def test_level1_builder_prefers_heldout_sentences_and_fills_with_templates():
    level0 = evalsets.Level0Set("zh", "", [evalsets.CharEntry(c, 0, 0.0, "unseen") for c in "鬱龘靐齉"])
    docs = ["今天天气很好鬱。我们去公园。", "这里没有目标字。"]
    samples = evalsets.build_level1(docs, level0, {c: "unseen" for c in "鬱龘靐齉"}, 3, 4, seed=0)
    assert samples[0] == evalsets.Level1Sample("zh", "鬱", "今天天气很好鬱", "unseen", "heldout")
    assert [s.source for s in samples] == ["heldout", "template", "template"]
    assert all(s.sentence_prompt.endswith(s.term) for s in samples)
