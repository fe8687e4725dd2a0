"""MCQA items from real benchmarks through ``datasets``, in one normalised shape.

Each schema names where a benchmark keeps its question, its choices and its answer;
a YAML ``columns`` mapping overrides any of those names for a dataset that differs.
Hub datasets and local json/jsonl/parquet files load the same way.

| schema | question | choices | answer |
|---|---|---|---|
| mmlu | question | choices (list) | answer (index) |
| arc, commonsenseqa | question | choices.text (list) | answerKey, matched in choices.label |
| hellaswag | ctx | endings (list) | label (index) |
| cmmlu | Question | A, B, C, D | Answer (letter) |
| kmmlu | question | A, B, C, D | answer (1-based) |
| jcommonsenseqa | question | choice0..choice4 | label (index) |

An item's id is the row's ``id`` column when it has one (``columns: {id: ...}`` names
another), else its row index. A file that mixes languages names its language column
(``columns: {language: lang}``); its items then form one task per language,
``<name>_<lang>``, so metrics and records are per language as for the embedded tasks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from bytecanary.data import wordcomp
from bytecanary.data.languages import LANGUAGES
from bytecanary.errors import BytecanaryError

Schema = Literal["mmlu", "arc", "commonsenseqa", "hellaswag", "cmmlu", "kmmlu", "jcommonsenseqa"]

# schema -> (question column, choice columns or one list column, answer column, how to read the answer)
_SCHEMAS: dict[str, tuple[str, list[str] | str, str, str]] = {
    "mmlu": ("question", "choices", "answer", "index"),
    "arc": ("question", "choices.text", "answerKey", "label"),
    "commonsenseqa": ("question", "choices.text", "answerKey", "label"),
    "hellaswag": ("ctx", "endings", "label", "index"),
    "cmmlu": ("Question", ["A", "B", "C", "D"], "Answer", "letter"),
    "kmmlu": ("question", ["A", "B", "C", "D"], "answer", "one_based"),
    "jcommonsenseqa": ("question", [f"choice{i}" for i in range(5)], "label", "index"),
}


@dataclass(frozen=True)
class McqaItem:
    """One multiple-choice question; ``continuation`` items (HellaSwag) have a context
    that the right choice continues rather than a question it answers."""

    task: str
    language: str
    question: str
    choices: tuple[str, ...]
    answer: int
    continuation: bool = False
    delimiter: str = " "  # between a continuation item's context and its ending (cloze)
    item_id: str = ""  # the dataset's id of the item, else its index in the task


@dataclass
class TaskSource:
    """A benchmark through ``datasets``: hub id, or a builder with local ``data_files``."""

    name: str
    """Task name in metric keys: probe/mcqa/<name>/... (``<name>_<lang>`` with a language column)."""
    schema: Schema
    path: str
    """Hub id, or ``json`` / ``parquet`` with ``data_files``."""
    language: str | None = None
    """The items' language; None when ``columns`` names a language column."""
    config: str | None = None
    split: str = "test"
    data_files: list[str] | None = None
    columns: dict[str, str] = field(default_factory=dict)
    """Overrides: {question: ..., choices: ..., answer: ..., choice_labels: ..., id: ...},
    and ``language``: the column holding each row's language."""
    limit: int | None = None

    def __post_init__(self) -> None:
        if self.language is None and "language" not in self.columns:
            raise ValueError("language: give the task's language, or columns: {language: <column>}")
        if self.language is not None and self.language not in LANGUAGES:
            raise ValueError(f"language: unknown language {self.language!r} (known: {', '.join(LANGUAGES)})")
        if self.schema not in _SCHEMAS:
            raise ValueError(f"schema: unknown schema {self.schema!r} (known: {', '.join(_SCHEMAS)})")


def _get(row: dict[str, Any], column: str, where: str) -> Any:
    """``row[column]``, following dots into nested records (``choices.text``)."""
    value: Any = row
    for part in column.split("."):
        if not isinstance(value, dict) or part not in value:
            raise BytecanaryError(f"{where}: column {column!r} not found (columns: {', '.join(row)})")
        value = value[part]
    return value


def _answer(raw: Any, how: str, labels: list[str], n: int, where: str) -> int:
    try:
        if how == "index":
            index = int(raw)
        elif how == "one_based":
            index = int(raw) - 1
        elif how == "letter":
            index = "ABCDEFGHIJ".index(str(raw).strip().upper())
        else:
            index = [str(x) for x in labels].index(str(raw).strip())
    except (ValueError, TypeError):
        raise BytecanaryError(f"{where}: answer {raw!r} is not a valid {how} answer") from None
    if not 0 <= index < n:
        raise BytecanaryError(f"{where}: answer {raw!r} points outside the {n} choices")
    return index


def _language(src: TaskSource, row: dict[str, Any], where: str) -> str:
    """The row's language: the task's own, or its language column's."""
    if src.language is not None:
        return src.language
    lang = _get(row, src.columns["language"], where)
    if lang not in LANGUAGES:
        raise BytecanaryError(f"{where}: language {lang!r} is not one of {', '.join(LANGUAGES)}")
    return lang


def item_from_row(src: TaskSource, row: dict[str, Any], index: int, where: str) -> McqaItem:
    q_col, c_cols, a_col, how = _SCHEMAS[src.schema]
    q_col = src.columns.get("question", q_col)
    c_cols = src.columns.get("choices", c_cols)
    a_col = src.columns.get("answer", a_col)
    if isinstance(c_cols, list):
        choices = [str(_get(row, c, where)) for c in c_cols]
        labels = list("ABCDEFGHIJ"[: len(choices)])
    else:
        choices = [str(c) for c in _get(row, c_cols, where)]
        label_col = src.columns.get(
            "choice_labels", c_cols.rsplit(".", 1)[0] + ".label" if "." in c_cols else ""
        )
        labels = list(_get(row, label_col, where)) if how == "label" else []
    if len(choices) < 2:
        raise BytecanaryError(f"{where}: needs at least two choices, got {len(choices)}")
    answer = _answer(_get(row, a_col, where), how, labels, len(choices), where)
    question = str(_get(row, q_col, where))
    language = _language(src, row, where)
    task = src.name if src.language is not None else f"{src.name}_{language}"
    id_col = src.columns.get("id", "id" if "id" in row else None)  # a named column must exist
    item_id = str(_get(row, id_col, where)) if id_col else str(index)
    hellaswag = src.schema == "hellaswag"
    return McqaItem(task, language, question, tuple(choices), answer, hellaswag, item_id=item_id)


def load_task(src: TaskSource) -> list[McqaItem]:
    """Every item of a benchmark (up to ``limit``), validated row by row."""
    import datasets

    where = f"task {src.name!r} ({src.path})"
    try:
        ds = datasets.load_dataset(src.path, src.config, split=src.split, data_files=src.data_files)
    except Exception as err:  # datasets raises many types; all mean "this source won't load"
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise BytecanaryError(f"{where}: cannot load: {type(err).__name__}: {first}") from None
    items = []
    for i, row in enumerate(ds):
        if src.limit is not None and i >= src.limit:
            break
        items.append(item_from_row(src, row, i, f"{where} row {i}"))
    if not items:
        raise BytecanaryError(f"{where}: no items")
    return items


def by_task(items: list[McqaItem]) -> list[list[McqaItem]]:
    """The items of each task, tasks in order of first appearance (a mixed file's languages)."""
    tasks: dict[str, list[McqaItem]] = {}
    for item in items:
        tasks.setdefault(item.task, []).append(item)
    return list(tasks.values())


# pseudo-word alphabets: common syllables or characters of each script
_ALPHABETS = {
    "en": "bcdfghjklmnprstvwz",
    "ja": "あいうえおかきくけこさしすせそたちつてとなにぬねのまみむめもやゆよらりるれろわ",
    "ko": "".join(chr(0xAC00 + 588 * i + 28 * j) for i in range(19) for j in range(0, 21, 4)),
    "zh": "".join(chr(c) for c in range(0x4E00, 0x4E00 + 400, 3)),
}


def _pseudo_word(rng: np.random.Generator, language: str) -> str:
    alphabet = _ALPHABETS[language]
    if language == "en":  # consonant-vowel syllables read like words
        return "".join(
            alphabet[rng.integers(len(alphabet))] + "aeiou"[rng.integers(5)]
            for _ in range(rng.integers(2, 4))
        )
    return "".join(alphabet[rng.integers(len(alphabet))] for _ in range(rng.integers(2, 4)))


def nonsense_items(language: str, n: int, seed: int = 0, n_choices: int = 4) -> list[McqaItem]:
    """NonsenseQA (the Matched-and-Dashed study's bias diagnostic): questions and options
    of pseudo-words, no option right in meaning, the gold label drawn uniformly. Accuracy
    away from 1/n_choices measures label or position bias, not knowledge."""
    rng = np.random.default_rng([seed, sorted(LANGUAGES).index(language)])
    sep = LANGUAGES[language].word_separator
    items = []
    for i in range(n):
        question = sep.join(_pseudo_word(rng, language) for _ in range(rng.integers(3, 6))) + "?"
        choices = tuple(_pseudo_word(rng, language) for _ in range(n_choices))
        answer = int(rng.integers(n_choices))
        items.append(McqaItem(f"nonsenseqa_{language}", language, question, choices, answer, item_id=str(i)))
    return items


def word_completion_items(data_dir: Path, language: str, n: int, seed: int = 0) -> list[McqaItem]:
    """The embedded task's first ``n`` items, from the pool ``bytecanary prepare`` built from
    the held-out text (``bytecanary.data.wordcomp``). The data config's seed chose the
    items; ``seed`` stays for the caller and changes nothing, so the items are those a
    probe with seed 0 drew from held-out text at probe time on data prepared with seed 0."""
    path = Path(data_dir) / "evalsets" / wordcomp.file_name(language)
    return [
        McqaItem(
            row["task"],
            row["language"],
            row["question"],
            tuple(row["choices"]),
            row["answer"],
            row["continuation"],
            row["delimiter"],
            row["id"],
        )
        for row in wordcomp.load_items(path)[:n]
    ]
