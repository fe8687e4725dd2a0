"""Atomic file output: a crash never leaves a half-written file or folder behind."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bytecanary.errors import BytecanaryError


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path`` atomically
    (same folder, fsync, ``os.replace``), on error it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp_path, path)
        _fsync_dir(path.parent)
    finally:
        tmp_path.unlink(missing_ok=True)


def read_text(path: str | Path, what: str = "file") -> str:
    """A UTF-8 text file; a missing file or a non-UTF-8 byte is one error naming the file."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BytecanaryError(f"{path}: no such {what}") from None
    except UnicodeDecodeError as err:
        raise BytecanaryError(f"{path}: not UTF-8 ({err.reason} at byte {err.start})") from None


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The objects of a JSONL file. A malformed line is an error naming ``file:line``; an
    unterminated last line is a write in flight (or torn by a crash) and is skipped, as
    ``probes.jsonl`` readers do."""
    text = read_text(path, "JSONL file")
    lines = text.split("\n")
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            if number == len(lines):
                break
            raise BytecanaryError(f"{path}:{number}: not valid JSON ({err.msg})") from None
        if not isinstance(row, dict):
            raise BytecanaryError(f"{path}:{number}: expected a JSON object, got {type(row).__name__}")
        rows.append(row)
    return rows


def write_json(path: str | Path, obj: Any) -> None:
    """Write JSON atomically (UTF-8, non-ASCII kept readable)."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


@contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield a fresh temporary folder beside ``path``; on success it takes the place of
    ``path`` (an older ``path`` is moved aside first and removed only once the new one is
    in place), on error it is deleted. Callers decide whether replacing ``path`` is theirs
    to do (``refuse_foreign_dir``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    old = tmp.with_name(tmp.name.removesuffix(".tmp") + ".old")
    try:
        yield tmp
        if path.exists():
            os.replace(path, old)
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)


def refuse_foreign_dir(path: str | Path, force: bool, protected: tuple[str, ...] = ()) -> None:
    """An output folder may be replaced only when it is absent or empty, or with ``force``;
    a folder holding any of ``protected`` (a run folder's ``checkpoints``) never."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise BytecanaryError(f"{path}: exists and is not a folder")
    if not path.is_dir() or not any(path.iterdir()):
        return
    held = [name for name in protected if (path / name).exists()]
    if held:
        raise BytecanaryError(
            f"{path}: holds {', '.join(held)}; refusing to replace it, choose another folder"
        )
    if not force:
        raise BytecanaryError(f"{path}: not empty; pass --force to replace it, or choose another folder")
