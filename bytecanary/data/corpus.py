"""Corpus sources: real text from Debian packages, synthetic text from ``wordfreq``'s word lists
(with the long tail of rare CJK characters the UTF-8 probes need), anything ``datasets`` loads;
all seeded, so the same config gives the same text (docs/data.md, "Stages").
"""

from __future__ import annotations

import codecs
import gzip
import hashlib
import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from bytecanary.data.config import DatasetSource, FilesSource, SourceConfig, SyntheticSource
from bytecanary.data.debian import debian_documents
from bytecanary.data.languages import LANGUAGES, Language, is_word_of
from bytecanary.errors import BytecanaryError, described


@dataclass(frozen=True)
class Document:
    """One corpus document. ``key`` names a document that has translations in other
    languages (a help page's path); it alone decides the document's split."""

    text: str
    key: str | None = None


def held_out(key: str, seed: int, val_fraction: float) -> bool:
    """Whether the document with this key is validation: a seeded hash of the key below
    ``val_fraction``, so a page and its translations land in the same split."""
    digest = hashlib.sha256(f"{seed}:val:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < val_fraction


_WORDLISTS = ("large", "best")


@lru_cache(maxsize=8)
def word_distribution(code: str, vocabulary: int) -> tuple[list[str], np.ndarray]:
    """The ``vocabulary`` most frequent words of the language's script, and their CDF; the
    word list is checked only as far as they reach (a CJK list holds 300,000 entries)."""
    import wordfreq

    lang = LANGUAGES[code]
    wordlist = next(w for w in _WORDLISTS if lang.code in wordfreq.available_languages(w))
    freqs = wordfreq.get_frequency_dict(lang.code, wordlist=wordlist)
    ranked = sorted(freqs.items(), key=lambda kv: (-kv[1], kv[0]))
    words = list(itertools.islice(((w, f) for w, f in ranked if is_word_of(w, lang)), vocabulary))
    cdf = np.cumsum([f for _, f in words])
    return [w for w, _ in words], cdf / cdf[-1]


def synthetic_documents(lang: Language, src: SyntheticSource, seed: int) -> Iterator[str]:
    """Documents of 1-3 paragraphs of 2-8 sentences, until ``src.megabytes`` is reached."""
    words, cdf = word_distribution(lang.code, src.vocabulary)
    rng = np.random.default_rng([seed, sorted(LANGUAGES).index(lang.code)])
    budget = int(src.megabytes * 1_000_000)
    mean_words = 12 if lang.word_separator else 16  # CJK words are shorter
    while budget > 0:
        paragraphs = []
        for _ in range(rng.integers(1, 4)):
            sentences = []
            for _ in range(rng.integers(2, 9)):
                n = max(3, int(rng.poisson(mean_words)))
                picks = [words[i] for i in np.searchsorted(cdf, rng.random(n), side="right")]
                for i in np.flatnonzero(rng.random(n - 1) < 0.08):  # a comma now and then
                    picks[i] += lang.comma.rstrip() if lang.word_separator else lang.comma
                sentence = lang.word_separator.join(picks)
                if lang.code == "en":
                    sentence = sentence[0].upper() + sentence[1:]
                end = lang.sentence_ends[int(rng.choice(3, p=[0.85, 0.1, 0.05]))]
                sentences.append(sentence + end)
            paragraphs.append("".join(sentences).rstrip())
        doc = "\n".join(paragraphs)
        budget -= len(doc.encode("utf-8"))
        yield doc


def _check_utf8(path: Path, where: str) -> None:
    """Fail on the first non-UTF-8 byte of a local text file, naming file, offset and line."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset, lines = 0, 0  # bytes and newlines before this chunk
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as err:
                # err.object: the decoder's held bytes (an unfinished character, no newline), then chunk
                at = offset - (len(err.object) - len(chunk)) + err.start
                line = lines + err.object[: err.start].count(b"\n") + 1
                raise BytecanaryError(
                    f"{where}: {path} is not UTF-8 (byte {at}, line {line}: {err.reason})"
                ) from None
            offset += len(chunk)
            lines += chunk.count(b"\n")
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        raise BytecanaryError(f"{where}: {path} is not UTF-8 (truncated at the end)") from None


def dataset_documents(src: DatasetSource, where: str) -> Iterator[str]:
    """Texts of one ``datasets`` source, capped by ``max_documents`` / ``max_megabytes``."""
    import datasets

    for pattern in src.data_files or []:
        files = sorted(Path().glob(pattern)) if any(c in pattern for c in "*?[") else [Path(pattern)]
        if not files or not all(f.exists() for f in files):
            raise BytecanaryError(f"{where}: data_files: no file matches {pattern!r}")
        for file in files:
            if file.suffix not in (".parquet", ".arrow"):
                _check_utf8(file, where)
    try:
        ds = datasets.load_dataset(
            src.path,
            src.name,
            split=src.split,
            data_files=src.data_files,
            streaming=src.streaming,
            revision=src.revision,
            **src.builder_kwargs,
        )
    except Exception as err:  # datasets raises many types; all mean "this source won't load"
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise BytecanaryError(f"{where}: cannot load {src.path!r}: {type(err).__name__}: {first}") from None
    columns = ds.column_names
    if columns is not None and src.text_column not in columns:
        raise BytecanaryError(
            f"{where}: text_column {src.text_column!r} not found (columns: {', '.join(columns)})"
        )
    budget = int(src.max_megabytes * 1_000_000) if src.max_megabytes else None
    produced = 0
    for row in ds:
        if src.text_column not in row:
            raise BytecanaryError(f"{where}: text_column {src.text_column!r} not found in a row")
        text = row[src.text_column]
        if not isinstance(text, str):
            raise BytecanaryError(
                f"{where}: text_column {src.text_column!r} holds {type(text).__name__}, not text"
            )
        if not text.strip():
            continue
        yield text
        produced += 1
        if budget is not None:
            budget -= len(text.encode("utf-8"))
            if budget <= 0:
                break
        if src.max_documents is not None and produced >= src.max_documents:
            break
    if produced == 0:
        raise BytecanaryError(f"{where}: the source produced no documents")


def source_documents(src: SourceConfig, index: int, seed: int) -> Iterator[Document]:
    """The source's documents; only ``debian`` pages carry a key."""
    where = f"sources[{index}] ({src.language})"
    lang = LANGUAGES[src.language]
    if src.debian is not None:
        return (Document(text, key) for key, text in debian_documents(src.debian, lang, seed, where))
    if src.synthetic is not None:
        return map(Document, synthetic_documents(lang, src.synthetic, seed))
    return map(Document, dataset_documents(src.dataset, where))


def source_name(src: SourceConfig) -> str:
    """How ``index.json`` and the demo name a source."""
    if src.debian is not None:
        return f"debian({', '.join(src.debian.packages)})"
    if src.synthetic is not None:
        return f"synthetic(wordfreq, {src.synthetic.megabytes} MB)"
    if src.files is not None:
        return f"files({src.files.path}/{src.files.pattern})"
    return f"{src.dataset.path}" + (f"/{src.dataset.name}" if src.dataset.name else "")


def source_files(src: FilesSource, where: str) -> list[Path]:
    """The files of a ``files`` source in name order (that order is the corpus order)."""
    folder = Path(src.path).expanduser()
    if not folder.is_dir():
        raise BytecanaryError(f"{where}: files.path: {folder} is not a folder")
    files = sorted(p for p in folder.glob(src.pattern) if p.is_file())
    if not files:
        raise BytecanaryError(f"{where}: files.pattern: no file in {folder} matches {src.pattern!r}")
    return files


def _json_rows(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, object) of a JSONL file; a line that is not UTF-8 or not JSON is an error
    naming it (read as bytes: no UTF-8 character holds a newline byte)."""
    opener = gzip.open if path.suffix == ".gz" else open
    offset = 0
    with opener(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                at = offset + err.start
                raise BytecanaryError(f"{path}: line {number}: not UTF-8 (byte {at}: {err.reason})") from None
            offset += len(raw)
            if line.strip():
                try:
                    yield number, json.loads(line)
                except json.JSONDecodeError as err:
                    raise BytecanaryError(f"{path}: line {number}: not JSON ({err.msg})") from None


def _parquet_texts(path: Path, column: str) -> Iterator[tuple[int, Any]]:
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
        if column not in parquet.schema_arrow.names:
            names = ", ".join(parquet.schema_arrow.names)
            raise BytecanaryError(f"{path}: text_column {column!r} not found (columns: {names})")
        row = 0
        for batch in parquet.iter_batches(columns=[column], batch_size=4096):
            for text in batch.column(0).to_pylist():
                row += 1
                yield row, text
    except (OSError, ValueError) as err:  # pyarrow's ArrowInvalid is a ValueError
        raise BytecanaryError(f"{path}: not a readable Parquet file ({described(err)})") from None


def file_documents(path: Path, column: str) -> Iterator[tuple[int, str]]:
    """(row number, text) of one local file; a bad row is one error naming file and row."""
    if path.suffix == ".parquet":
        rows = _parquet_texts(path, column)
    else:
        rows = ((n, row.get(column) if isinstance(row, dict) else None) for n, row in _json_rows(path))
    for number, text in rows:
        if not isinstance(text, str):
            kind = "nothing" if text is None else type(text).__name__
            raise BytecanaryError(f"{path}: row {number}: text_column {column!r} holds {kind}, not text")
        if text.strip():
            yield number, text
