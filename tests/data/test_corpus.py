"""Corpus sources: the synthetic default and local files through ``datasets``."""

import json
from collections import Counter

import pytest

from bytecanary.data.config import DatasetSource, SyntheticSource
from bytecanary.data.corpus import dataset_documents, synthetic_documents
from bytecanary.data.languages import LANGUAGES, in_blocks, is_word_of
from bytecanary.errors import BytecanaryError


def _docs(code: str, mb: float = 0.05, seed: int = 0) -> list[str]:
    return list(synthetic_documents(LANGUAGES[code], SyntheticSource(megabytes=mb), seed))


def test_a_word_of_a_language_is_made_of_its_letters_character_by_character():
    """``is_word_of`` against its definition spelled out per character, on each word list's
    head and the edges (empty, apostrophes, ASCII's last and the first non-ASCII code point)."""
    import wordfreq

    edges = ["", "'", "don't", "ab1", "\x7f", "\x80", "À", "×", "ǅ", "ẞ", "中a", "𠀀", "ア", "가", "ａ"]
    for code, lang in LANGUAGES.items():
        for words in (wordfreq.top_n_list(other, 3000) for other in LANGUAGES):
            for word in [*words, *edges]:
                own = all(in_blocks(c, lang.word_blocks) or (code == "en" and c.isascii()) for c in word)
                letters = code != "en" or word.replace("'", "").isalpha()
                assert is_word_of(word, lang) == (own and letters), (code, word)


def test_synthetic_is_deterministic_and_sized():
    a, b = _docs("zh"), _docs("zh")
    assert a == b and a != _docs("zh", seed=1)
    size = sum(len(d.encode()) for d in a)
    assert 50_000 <= size < 60_000


def test_spacing_and_punctuation_conventions():
    ja, zh, ko, en = _docs("ja"), _docs("zh"), _docs("ko"), _docs("en")
    assert not any(" " in d for d in ja + zh)  # no spaces between Japanese/Chinese words
    assert all(d.endswith(("。", "？", "！")) for d in ja + zh)
    assert sum(d.count(" ") for d in ko) > 1000 and sum(d.count(" ") for d in en) > 1000
    assert all(d[0].isupper() for d in en)


def test_character_frequencies_have_a_long_tail():
    counts = Counter("".join(_docs("zh", mb=0.3)))
    han = {c: n for c, n in counts.items() if in_blocks(c, LANGUAGES["zh"].eval_blocks)}
    singletons = sum(1 for n in han.values() if n == 1)
    assert len(han) > 1500 and singletons > 200
    assert max(han.values()) > 200 * sorted(han.values())[len(han) // 2]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def test_local_jsonl_parquet_and_txt(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"body": f"文書{i}です。"} for i in range(5)]
    jsonl = _jsonl(tmp_path / "a.jsonl", rows)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "a.parquet")
    (tmp_path / "a.txt").write_text("first line\nsecond line\n", encoding="utf-8")
    got = list(dataset_documents(DatasetSource("json", data_files=[jsonl], text_column="body"), "s"))
    assert got == [r["body"] for r in rows]
    src = DatasetSource("parquet", data_files=[str(tmp_path / "a.parquet")], text_column="body")
    assert list(dataset_documents(src, "s")) == got
    src = DatasetSource("text", data_files=[str(tmp_path / "a.txt")], max_documents=1)
    assert list(dataset_documents(src, "s")) == ["first line"]
    streamed = DatasetSource("json", data_files=[jsonl], text_column="body", streaming=True)
    assert list(dataset_documents(streamed, "s")) == got


def test_bad_sources_say_which_source_and_field(tmp_path):
    jsonl = _jsonl(tmp_path / "a.jsonl", [{"body": "x"}])
    with pytest.raises(
        BytecanaryError,
        match=r"sources\[2\] \(ja\): text_column 'text' not found \(columns: body\)",
    ):
        list(dataset_documents(DatasetSource("json", data_files=[jsonl]), "sources[2] (ja)"))
    bad = tmp_path / "latin1.txt"
    bad.write_bytes(b"ok line\ncaf\xe9\n")
    with pytest.raises(BytecanaryError, match=r"latin1\.txt is not UTF-8 \(byte 11"):
        list(dataset_documents(DatasetSource("text", data_files=[str(bad)]), "src"))
    empty = _jsonl(tmp_path / "empty.jsonl", [{"text": "  "}])
    with pytest.raises(BytecanaryError, match="produced no documents"):
        list(dataset_documents(DatasetSource("json", data_files=[empty]), "src"))
    with pytest.raises(BytecanaryError, match="no file matches"):
        list(dataset_documents(DatasetSource("json", data_files=[str(tmp_path / "nope.jsonl")]), "src"))
