"""The embedded word-completion pool: written by prepare, its distractors matched in token count."""

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from transformers import AutoTokenizer

from bytecanary.data import wordcomp
from bytecanary.data.chunks import split_documents
from bytecanary.data.corpus import word_distribution
from bytecanary.data.evalsets import sentences
from bytecanary.data.languages import LANGUAGES
from bytecanary.data.prepare import prepare
from bytecanary.errors import BytecanaryError

from ..conftest import SMALL

POOL = 256  # the default eval.wordcomp_per_language; the small data has more occurrences


def reference_items(data_dir: Path, language: str, n: int, seed: int, tok: Any) -> tuple[list[tuple], int]:
    """The reference, written out plainly: (question, choices, answer) of the first ``n``
    items and the occurrences dropped on the way. The order and the vocabulary halves are
    those the probe drew when it built the items from held-out text itself; the distractors
    are the first three endings, in a seeded order, that spell no vocabulary word with the
    first half and give the question the gold ending's token count under ``tok``, each
    encoded on its own as the probe encodes a text."""
    lang = LANGUAGES[language]
    minimum = 4 if language == "en" else 2
    vocab = [w for w in word_distribution(language, 20_000)[0] if len(w) >= minimum]
    known = set(vocab)
    longest = max(map(len, vocab))
    found: list[tuple[str, str]] = []
    for doc in split_documents(Path(data_dir) / "corpus", language, "val"):
        for sentence in sentences(doc, lang):
            if lang.word_separator:
                pos = 0
                for token in sentence.split(lang.word_separator):
                    word = token.strip(".,?!")
                    if word in known and pos >= 8:
                        found.append((sentence[:pos], word))
                    pos += len(token) + 1
            else:
                for pos in range(8, len(sentence) - 1):
                    word = next(
                        (
                            sentence[pos : pos + k]
                            for k in range(longest, 1, -1)
                            if sentence[pos : pos + k] in known
                        ),
                        None,
                    )
                    if word:
                        found.append((sentence[:pos], word))
    rng = np.random.default_rng([seed, 7, sorted(LANGUAGES).index(language)])
    by_length: dict[int, set[str]] = {}
    for word in known:
        by_length.setdefault(len(word) - len(word) // 2, set()).add(word[len(word) // 2 :])
    endings = {n: sorted(e) for n, e in by_length.items()}
    items: list[tuple] = []
    dropped = 0
    for i in rng.permutation(len(found)):
        context, word = found[i]
        half = len(word) // 2
        question, right = context + word[:half], word[half:]
        pool = [e for e in endings[len(right)] if word[:half] + e not in known]
        want = len(tok.encode(question + right, add_special_tokens=False))
        others = []
        for j in rng.permutation(len(pool)):
            if len(tok.encode(question + pool[j], add_special_tokens=False)) == want:
                others.append(pool[j])
                if len(others) == 3:
                    break
        if len(others) < 3:
            dropped += 1
            continue
        answer = len(items) % 4
        items.append((question, (*others[:answer], right, *others[answer:]), answer))
        if len(items) == n:
            break
    return items, dropped


@pytest.fixture(scope="module")
def tok(small_data):
    return AutoTokenizer.from_pretrained(str(small_data / "tokenizer"))


def _pool(data: Path, lang: str) -> Path:
    return data / "evalsets" / wordcomp.file_name(lang)


@pytest.mark.parametrize("lang", sorted(SMALL["mixture"]))
def test_pool_holds_the_reference_items(small_data, tok, lang):
    items = wordcomp.load_items(_pool(small_data, lang))
    want, dropped = reference_items(small_data, lang, POOL, SMALL["seed"], tok)
    assert len(items) == len(want) == POOL
    for got, (question, choices, answer) in zip(items, want, strict=True):
        assert (got["question"], tuple(got["choices"]), got["answer"]) == (question, choices, answer)
    stage = json.loads((small_data / "evalsets" / "stage.json").read_text(encoding="utf-8"))
    assert stage["sizes"][lang]["wordcomp_dropped"] == dropped
    # the first n of the pool are the n items a probe asking for n drew
    got12 = [(i["question"], tuple(i["choices"]), i["answer"]) for i in items[:12]]
    assert got12 == reference_items(small_data, lang, 12, SMALL["seed"], tok)[0]


def test_distractors_match_the_gold_token_count_and_are_no_words(small_data, tok):
    for lang in SMALL["mixture"]:
        known = set(word_distribution(lang, 20_000)[0])
        for item in wordcomp.load_items(_pool(small_data, lang)):
            question, right = item["question"], item["choices"][item["answer"]]
            counts = {len(tok.encode(question + c, add_special_tokens=False)) for c in item["choices"]}
            assert len(counts) == 1, item
            # the question ends with the first half of a word that ``right`` completes (a half
            # as long as ``right`` or one shorter); no distractor spells a word with it
            others = [c for c in item["choices"] if c != right]
            halves = [
                question[-k:] for k in (len(right), len(right) - 1) if k and question[-k:] + right in known
            ]
            assert any(not any(half + c in known for c in others) for half in halves), item


def test_dropped_occurrences_are_counted(small_data, gpt2_tokenizer):
    """The test suite's 400-token GPT-2 tokenizer splits Korean into bytes: some endings
    find no three distractors of their token count, and those occurrences are dropped."""
    docs = list(split_documents(small_data / "corpus", "ko", "val"))
    items, dropped = wordcomp.build_items(docs, "ko", POOL, SMALL["seed"], gpt2_tokenizer)
    want, want_dropped = reference_items(small_data, "ko", POOL, SMALL["seed"], gpt2_tokenizer)
    assert [(i["question"], tuple(i["choices"]), i["answer"]) for i in items] == want
    assert dropped == want_dropped > 0


def test_file_shape(small_data):
    lines = _pool(small_data, "ja").read_text(encoding="utf-8").split("\n")
    assert lines[-1] == "" and len(lines) == POOL + 1
    for i, line in enumerate(lines[:-1]):
        item = json.loads(line)
        assert list(item) == list(wordcomp.FIELDS)
        assert item["id"] == f"wordcomp_ja-{i}" and item["task"] == "wordcomp_ja" and item["language"] == "ja"
        assert len(item["choices"]) == len(set(item["choices"])) == 4 and item["answer"] == i % 4
        assert len({len(c) for c in item["choices"]}) == 1
        assert item["continuation"] is True and item["delimiter"] == ""


def test_pool_size_bounds_the_items(small_data, tok):
    docs = list(split_documents(small_data / "corpus", "ko", "val"))
    few, _ = wordcomp.build_items(docs, "ko", 5, SMALL["seed"], tok)
    assert few == wordcomp.load_items(_pool(small_data, "ko"))[:5]
    assert wordcomp.build_items(docs, "ko", 5, SMALL["seed"] + 1, tok)[0] != few


def test_older_data_folder_gains_the_pool_without_new_shards(small_data, tmp_path, capsys):
    """A folder prepared before the pool existed: same hashes, no pool files."""
    data = tmp_path / "data"
    shutil.copytree(small_data, data)
    for lang in SMALL["mixture"]:
        _pool(data, lang).unlink()
    prepare(small_data.parent / "small.yaml", data)
    out = capsys.readouterr().out
    assert all(f"[{s}] up to date" in out for s in ("corpus", "tokenizer", "shards", "snapshot"))
    assert "[evalsets] done" in out
    for lang in SMALL["mixture"]:  # the same bytes as the first prepare wrote
        assert _pool(data, lang).read_bytes() == _pool(small_data, lang).read_bytes()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", r"x\.jsonl:2: not valid JSON"),
        ('["a list"]', r"x\.jsonl:2: expected an object"),
        ('{"question": "q"}', r"x\.jsonl:2: missing id, task, language, choices, answer"),
        ({"answer": 7}, r"x\.jsonl:2: 'answer' must index 'choices', got 7"),
        ({"choices": "abcd"}, r"x\.jsonl:2: 'choices' must be a list of at least two texts"),
        ({"language": "xx"}, r"x\.jsonl:2: unknown language 'xx'"),
        ({"continuation": 1}, r"x\.jsonl:2: 'continuation' must be bool, got 1"),
    ],
)
def test_malformed_line_names_file_and_line(small_data, tmp_path, line, message):
    good = _pool(small_data, "en").read_text(encoding="utf-8").split("\n")[0]
    if isinstance(line, dict):  # a good item with one field spoilt
        line = json.dumps({**json.loads(good), **line})
    path = tmp_path / "x.jsonl"
    path.write_text(f"{good}\n{line}\n{good}\n", encoding="utf-8")
    with pytest.raises(BytecanaryError, match=message) as info:
        wordcomp.load_items(path)
    assert "\n" not in str(info.value)


def test_missing_pool_says_to_prepare(tmp_path):
    with pytest.raises(BytecanaryError, match=r"mcqa_wordcomp_en\.jsonl: .*run `bytecanary prepare`"):
        wordcomp.load_items(tmp_path / "evalsets" / wordcomp.file_name("en"))
