"""MCQA items from real benchmarks through ``datasets``, in one normalised shape: a schema names
where a benchmark keeps question, choices and answer (docs/mcqa-probes.md); local files are
checked whole first, so a bad row is one line before any model loads.
"""

from __future__ import annotations

import csv
import io
import json
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from bytecanary.data import wordcomp
from bytecanary.data.evalsets import check_no_surrogates, lone_surrogate
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


def _text(value: Any, column: str, where: str) -> str:
    """A question or option as text: a string (no lone surrogate) or a number."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise BytecanaryError(f"{where}: column {column!r} must be text, got {value!r}")
    cp = lone_surrogate(value) if isinstance(value, str) else None
    if cp:
        raise BytecanaryError(
            f"{where}: column {column!r} holds a lone surrogate ({cp}), which no UTF-8 bytes encode"
        )
    return str(value)


def _list(value: Any, column: str, where: str) -> list:
    if not isinstance(value, list | tuple):
        raise BytecanaryError(f"{where}: column {column!r} must be a list, got {value!r}")
    return list(value)


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
    if not isinstance(lang, str) or lang not in LANGUAGES:
        raise BytecanaryError(f"{where}: language {lang!r} is not one of {', '.join(LANGUAGES)}")
    return lang


def _item_id(src: TaskSource, row: dict[str, Any], index: int, where: str) -> str:
    """The row's ``id`` column (or the column ``columns: {id: ...}`` names), else its index."""
    id_col = src.columns.get("id", "id" if "id" in row else None)  # a named column must exist
    if not id_col:
        return str(index)
    value = _get(row, id_col, where)
    if isinstance(value, bool) or not isinstance(value, str | int) or value == "":
        raise BytecanaryError(
            f"{where}: column {id_col!r} (the item id) must be text or an integer, got {value!r}"
        )
    return _text(value, id_col, where)


def item_from_row(src: TaskSource, row: dict[str, Any], index: int, where: str) -> McqaItem:
    q_col, c_cols, a_col, how = _SCHEMAS[src.schema]
    q_col = src.columns.get("question", q_col)
    c_cols = src.columns.get("choices", c_cols)
    a_col = src.columns.get("answer", a_col)
    if isinstance(c_cols, list):
        choices = [_text(_get(row, c, where), c, where) for c in c_cols]
        labels = list("ABCDEFGHIJ"[: len(choices)])
    else:
        choices = [_text(c, c_cols, where) for c in _list(_get(row, c_cols, where), c_cols, where)]
        label_col = src.columns.get(
            "choice_labels", c_cols.rsplit(".", 1)[0] + ".label" if "." in c_cols else ""
        )
        labels = _list(_get(row, label_col, where), label_col, where) if how == "label" else []
    if len(choices) < 2:
        raise BytecanaryError(f"{where}: needs at least two choices, got {len(choices)}")
    answer = _answer(_get(row, a_col, where), how, labels, len(choices), where)
    question = _text(_get(row, q_col, where), q_col, where)
    language = _language(src, row, where)
    task = src.name if src.language is not None else f"{src.name}_{language}"
    item_id = _item_id(src, row, index, where)
    hellaswag = src.schema == "hellaswag"
    return McqaItem(task, language, question, tuple(choices), answer, hellaswag, item_id=item_id)


# ``datasets`` builders whose data_files are local files (json and csv are text, checked whole)
_LOCAL_BUILDERS = ("json", "csv", "parquet", "arrow")


def _parts(src: TaskSource) -> list[tuple[str, list[str] | None, bool]]:
    """(where, data files, local) of each load: one per file of a builder over local files
    (its rows numbered in that file, the file checked first), else the whole source at once."""
    files = src.data_files or []
    if src.path in _LOCAL_BUILDERS and files and all(Path(f).is_file() for f in files):
        parts = [(f"{f}: task {src.name!r} ({src.path})", [f], True) for f in files]
        for where, (f,), _ in parts:
            _check_file(Path(f), src.path, where)
        return parts
    return [(f"task {src.name!r} ({src.path})", src.data_files, False)]


def _check_file(path: Path, builder: str, where: str) -> None:
    """What ``datasets`` would fail on late or mangle, as one line naming the file and the
    entry: an empty file, bytes that are not UTF-8, malformed JSON, a lone surrogate."""
    if builder not in ("json", "csv"):
        if path.stat().st_size == 0:
            raise BytecanaryError(f"{where}: no rows (an empty file)")
        return
    raw = path.read_bytes()
    if not raw.strip():
        raise BytecanaryError(f"{where}: no rows (an empty file)")
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise BytecanaryError(f"{where}: not UTF-8 ({err.reason} at byte {err.start}, line {line})") from None
    if builder == "csv":
        if sum(1 for record in csv.reader(io.StringIO(text)) if record) < 2:
            raise BytecanaryError(f"{where}: no rows (a header at most)")
        return
    rows = _json_rows(text, where)
    if not rows:
        raise BytecanaryError(f"{where}: no rows")
    for i, row in enumerate(rows):
        check_no_surrogates(row, f"{where} row {i}")


def _json_rows(text: str, where: str) -> list[Any]:
    """The rows the ``json`` builder reads: a JSON list, else one JSON value per line."""
    if text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise BytecanaryError(f"{where}: invalid JSON ({err.msg}, line {err.lineno})") from None
        return data if isinstance(data, list) else [data]
    rows = []
    for number, line in enumerate(text.split("\n"), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                try:  # one JSON value over several lines: no rows the builder can read
                    kind = type(json.loads(text)).__name__
                except json.JSONDecodeError:
                    raise BytecanaryError(f"{where} line {number}: invalid JSON ({err.msg})") from None
                raise BytecanaryError(
                    f"{where}: expected JSON Lines or a JSON list of rows, got one {kind}"
                ) from None
    return rows


@contextmanager
def no_progress_bars(local: bool) -> Iterator[None]:
    """No "Generating train split" bars for a local file (stderr stays for errors)."""
    import datasets

    quiet = local and datasets.is_progress_bar_enabled()
    if quiet:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an environment variable may pin the setting
            datasets.disable_progress_bars()
    try:
        yield
    finally:
        if quiet:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                datasets.enable_progress_bars()


def _rows(src: TaskSource, files: list[str] | None, where: str, local: bool) -> Iterator[dict[str, Any]]:
    """The rows of one load; a load or a row that fails is one line naming ``where``."""
    import datasets

    try:
        with no_progress_bars(local):
            ds = datasets.load_dataset(src.path, src.config, split=src.split, data_files=files)
    except StopIteration:  # the json builder's word for a file without rows
        raise BytecanaryError(f"{where}: no rows") from None
    except Exception as err:  # datasets raises many types; all mean "this source won't load"
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise BytecanaryError(f"{where}: cannot load: {type(err).__name__}: {first}") from None
    rows = iter(ds)
    for i in range(len(ds)):
        try:
            yield next(rows)
        except UnicodeDecodeError as err:
            raise BytecanaryError(f"{where} row {i}: not UTF-8 text ({err.reason})") from None


def load_task(src: TaskSource) -> list[McqaItem]:
    """Every item of a benchmark (up to ``limit``), validated row by row; a local file is
    checked whole first, and an item id twice in a task is refused naming both rows."""
    items: list[McqaItem] = []
    first: dict[tuple[str, str], tuple[str, int]] = {}  # (task, item id) -> (where, row)
    for where, files, local in _parts(src):
        if src.limit is not None and len(items) >= src.limit:
            break
        n = 0
        for n, row in enumerate(_rows(src, files, where, local), 1):
            if src.limit is not None and len(items) >= src.limit:
                break
            # the item id of a row without one is its index over all files
            item = item_from_row(src, row, len(items), f"{where} row {n - 1}")
            seen = first.setdefault((item.task, item.item_id), (where, n - 1))
            if seen != (where, n - 1):
                _duplicate(src, item.item_id, seen, (where, n - 1))
            items.append(item)
        if not n:
            raise BytecanaryError(f"{where}: no rows")
    if not items:
        raise BytecanaryError(f"task {src.name!r} ({src.path}): no items")
    return items


def _duplicate(src: TaskSource, item_id: str, before: tuple[str, int], now: tuple[str, int]) -> None:
    """Refuse a task's item id twice (per-item records join by it), naming both rows."""
    column = src.columns.get("id", "id")
    if before[0] == now[0]:
        what = f"rows {before[1]} and {now[1]} have the same item id {item_id!r}"
    else:
        what = f"row {now[1]} has the item id {item_id!r} of {before[0].split(': ')[0]} row {before[1]}"
    raise BytecanaryError(f"{now[0]}: {what} (column {column!r})")


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
    """The embedded task's first ``n`` items, from the pool ``bytecanary prepare`` built from held-out
    text (``bytecanary.data.wordcomp``); the data config's seed chose them, and ``seed`` changes
    nothing (kept for the caller).
    """
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
