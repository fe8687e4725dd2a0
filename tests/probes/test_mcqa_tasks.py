"""MCQA tasks: benchmark schemas through `datasets` from small local files; the embedded pool."""

import json

import pytest

from bytecanary.data import wordcomp
from bytecanary.data.chunks import split_documents
from bytecanary.data.corpus import word_distribution
from bytecanary.errors import BytecanaryError
from bytecanary.probes.mcqa.tasks import McqaItem, TaskSource, load_task, word_completion_items

ROWS = {
    "mmlu": ({"question": "2+2?", "choices": ["3", "4", "5", "6"], "answer": 1}, 1),
    "arc": (
        {
            "question": "Sky?",
            "choices": {"text": ["red", "blue", "green"], "label": ["1", "2", "3"]},
            "answerKey": "2",
        },
        1,
    ),
    "commonsenseqa": (
        {"question": "Q", "choices": {"text": list("vwxyz"), "label": list("ABCDE")}, "answerKey": "E"},
        4,
    ),
    "hellaswag": ({"ctx": "She opened the door and", "endings": ["a", "b", "c", "d"], "label": "2"}, 2),
    "cmmlu": (
        {"Question": "中国的首都?", "A": "上海", "B": "北京", "C": "广州", "D": "深圳", "Answer": "B"},
        1,
    ),
    "kmmlu": (
        {"question": "한국의 수도?", "A": "부산", "B": "대구", "C": "인천", "D": "서울", "answer": 4},
        3,
    ),
    "jcommonsenseqa": (
        {
            "question": "日本の首都は?",
            **{f"choice{i}": c for i, c in enumerate(["大阪", "京都", "東京", "札幌", "福岡"])},
            "label": 2,
        },
        2,
    ),
}


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("schema", sorted(ROWS))
def test_every_schema_loads_from_local_files(schema, tmp_path):
    row, answer = ROWS[schema]
    src = TaskSource(name=schema, schema=schema, language="en", path="json", split="train",
                     data_files=[_jsonl(tmp_path / "t.jsonl", [row, row])])  # fmt: skip
    items = load_task(src)
    assert len(items) == 2 and items[0].answer == answer
    assert items[0].continuation == (schema == "hellaswag")
    assert len(items[0].choices) == (
        5 if schema in ("commonsenseqa", "jcommonsenseqa") else 4 - (schema == "arc")
    )


def test_parquet_and_a_column_mapping(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [
        {"prompt": "1+1?", "options": ["1", "2"], "gold": 1},
        {"prompt": "0+0?", "options": ["0", "9"], "gold": 0},
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "t.parquet")
    mapping = {"question": "prompt", "choices": "options", "answer": "gold"}
    src = TaskSource(name="mine", schema="mmlu", language="en", path="parquet", split="train",
                     data_files=[str(tmp_path / "t.parquet")], columns=mapping)  # fmt: skip
    assert load_task(src) == [
        McqaItem("mine", "en", "1+1?", ("1", "2"), 1, item_id="0"),  # no id column: the row index
        McqaItem("mine", "en", "0+0?", ("0", "9"), 0, item_id="1"),
    ]


def test_item_ids_and_a_language_column(tmp_path):
    rows = [
        {"qid": "a7", "question": "1+1?", "choices": ["1", "2"], "answer": 1, "lang": "ko"},
        {"qid": "b3", "question": "0+0?", "choices": ["0", "9"], "answer": 0, "lang": "en"},
    ]
    columns = {"id": "qid", "language": "lang"}
    src = TaskSource(name="mix", schema="mmlu", path="json", split="train",
                     data_files=[_jsonl(tmp_path / "t.jsonl", rows)], columns=columns)  # fmt: skip
    items = load_task(src)
    assert [(i.task, i.language, i.item_id) for i in items] == [
        ("mix_ko", "ko", "a7"),
        ("mix_en", "en", "b3"),
    ]
    src.columns = {"id": "uid", "language": "lang"}
    with pytest.raises(BytecanaryError, match=r"row 0: column 'uid' not found"):
        load_task(src)
    src.data_files = [_jsonl(tmp_path / "u.jsonl", [{**rows[0], "lang": "fr"}])]
    src.columns = {"language": "lang"}
    with pytest.raises(BytecanaryError, match=r"row 0: language 'fr' is not one of en, ja, ko, zh"):
        load_task(src)
    with pytest.raises(ValueError, match=r"language: give the task's language, or columns: \{language"):
        TaskSource(name="x", schema="mmlu", path="json")


def test_bad_rows_name_the_task_row_and_column(tmp_path):
    row = {"question": "2+2?", "choices": ["3", "4"]}
    src = TaskSource(name="m", schema="mmlu", language="en", path="json", split="train",
                     data_files=[_jsonl(tmp_path / "t.jsonl", [row])])  # fmt: skip
    with pytest.raises(BytecanaryError, match=r"task 'm' \(json\) row 0: column 'answer' not found"):
        load_task(src)
    bad = {"question": "2+2?", "choices": ["3", "4"], "answer": 7}
    src.data_files = [_jsonl(tmp_path / "u.jsonl", [bad])]
    with pytest.raises(BytecanaryError, match="points outside the 2 choices"):
        load_task(src)
    with pytest.raises(ValueError, match="unknown schema"):
        TaskSource(name="x", schema="squad", language="en", path="json")


def test_embedded_word_completion_items(small_data):
    for lang in ("en", "ja"):
        items = word_completion_items(small_data, lang, 12, seed=0)
        assert len(items) == 12 and items == word_completion_items(small_data, lang, 12, seed=5)
        pool = wordcomp.load_items(small_data / "evalsets" / wordcomp.file_name(lang))
        assert [(i.question, list(i.choices), i.answer) for i in items] == [
            (r["question"], r["choices"], r["answer"]) for r in pool[:12]
        ]
        assert [i.answer for i in items] == [k % 4 for k in range(12)]  # positions balanced
        words = set(word_distribution(lang, 20_000)[0])
        held_out = "\n".join(split_documents(small_data / "corpus", lang, "val"))
        for item in items:
            right = item.choices[item.answer]
            assert item.task == f"wordcomp_{lang}" and item.language == lang
            assert len({len(c) for c in item.choices}) == 1 and len(set(item.choices)) == 4
            assert item.question in held_out or item.question[: -len(right)] in held_out
            tail = item.question.split(" ")[-1] if lang == "en" else item.question[-len(right) :]
            assert any(w.endswith(right) and w.startswith(tail[-(len(w) - len(right)) :]) for w in words)
            assert item.continuation and item.delimiter == ""


def test_embedded_items_need_a_prepared_pool(tmp_path):
    with pytest.raises(BytecanaryError, match=r"mcqa_wordcomp_ko\.jsonl: .*run `bytecanary prepare`"):
        word_completion_items(tmp_path, "ko", 8)
