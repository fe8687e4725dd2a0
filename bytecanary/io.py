"""File input and output that survive crashes and say what went wrong: atomic writes, output paths
checked before long work, readers that name ``file:line`` (docs/faults.md).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from tqdm.auto import tqdm

from bytecanary.errors import BytecanaryError


def warn(message: str) -> None:
    """One ``warning:`` line on stderr, above any progress bar rather than inside it."""
    tqdm.write(f"warning: {message}", file=sys.stderr)


def warn_once() -> Callable[[str], None]:
    """``warn``, saying each message once: a bad file looked at every interval warns once."""
    said: set[str] = set()

    def once(message: str) -> None:
        if message not in said:
            said.add(message)
            warn(message)

    return once


def cut_torn_tail(f: BinaryIO, data: bytes) -> bytes:
    """``data`` (the whole of ``f``, read under its lock) up to its last newline, ``f`` cut
    there: a writer that died mid-line left the rest, and under the lock nobody else writes."""
    whole = data.rfind(b"\n") + 1
    if whole < len(data):
        f.truncate(whole)
    return data[:whole]


def named(err: OSError, path: str | Path, tmp: str | Path | None = None) -> OSError:
    """``err`` naming what the user asked for: ``path`` when it names no file (a write that
    fails for lack of space names nothing), and ``path`` for our temp ``tmp`` in it."""
    name = None if err.filename is None else str(err.filename)
    if name is not None and (tmp is None or not name.startswith(str(tmp))):
        return err
    shown = str(path) if name is None else str(path) + name[len(str(tmp)) :]
    return OSError(err.errno, err.strerror or str(err), shown)  # errno picks the subclass


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_UMASK_LOCK = threading.Lock()
PROC_STATUS = Path("/proc/self/status")  # Linux: holds "Umask:" since 4.7


def current_umask() -> int:
    """The process's umask, read at each write: a test or a launcher may change it."""
    try:
        found = re.search(r"^Umask:\s*([0-7]+)$", PROC_STATUS.read_text(), re.M)
    except OSError:
        found = None
    if found:
        return int(found[1], 8)
    # os.umask reads only by setting: the strictest mask for that instant (a file another thread
    # creates then gets fewer permissions, never more), set back under a lock our readers share
    with _UMASK_LOCK:
        mask = os.umask(0o077)
        os.umask(mask)
    return mask


def _as_open_would(path: Path, umask: int) -> None:
    """Give ``path`` the mode ``open()`` (a file) or ``mkdir`` (a folder) would have: mkstemp,
    mkdtemp and writers that rename their own temp files (safetensors) leave 0600/0700, which
    a colleague or a sidecar under another uid cannot read. Execute bits are kept."""
    mode = path.lstat().st_mode
    if stat.S_ISLNK(mode):
        return
    base = 0o777 if stat.S_ISDIR(mode) else 0o666 | (mode & 0o111)
    os.chmod(path, base & ~umask)


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path`` atomically
    (same folder, fsync, ``os.replace``) with the mode ``open()`` would give it, on error it
    is removed."""
    path = check_output(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb") as f:
            os.fsync(f.fileno())
        _as_open_would(tmp_path, current_umask())
        os.replace(tmp_path, path)
        _fsync_dir(path.parent)
    except OSError as err:
        raise named(err, path, tmp_path) from err
    finally:
        tmp_path.unlink(missing_ok=True)


def remove_stale_temps(folder: str | Path) -> list[Path]:
    """Delete the temp files (``.*.tmp``) that killed atomic writes left in ``folder``. Only
    files: a temp folder may be a report or a stage being built by another process."""
    stale = [p for p in Path(folder).glob(".*.tmp") if p.is_file()]
    for p in stale:
        p.unlink(missing_ok=True)
    return stale


def output_problem(path: str | Path, folder: bool = False) -> str | None:
    """Why ``path`` cannot be written (a file, or a ``folder``), or None; creates nothing. A
    file's path ending in a slash names a folder, though ``Path`` drops the slash."""
    if not folder and str(path).endswith(("/", os.sep)):
        return f"{path}: ends in '/', so it names a folder, not a file"
    path = Path(path)
    if path.exists() and path.is_dir() != folder:
        return f"{path}: exists and is not a {'folder' if folder else 'file'}"
    nearest = next(p for p in path.absolute().parents if p.exists())
    if not nearest.is_dir():
        return f"{path}: {nearest} is a file, not a folder"
    if not os.access(nearest, os.W_OK):
        return f"{nearest}: not writable"
    return None


def one_folder(name: str) -> bool:
    """Whether ``name`` names one folder inside another: not empty, not ``.`` or ``..``, no ``/``."""
    return bool(name.strip()) and name not in (".", "..") and "/" not in name


def check_output(path: str | Path, folder: bool = False) -> Path:
    """Fail now rather than after the work: ``path`` must be of the right kind if it exists
    (a file, or a ``folder``), and its parent folder must exist or be creatable."""
    problem = output_problem(path, folder)
    if problem:
        raise BytecanaryError(problem)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not os.access(path.parent, os.W_OK):
        raise BytecanaryError(f"{path.parent}: not writable")
    return path


def read_text(path: str | Path, what: str = "file") -> str:
    """A UTF-8 text file; a missing file or a non-UTF-8 byte is one error naming the file."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BytecanaryError(f"{path}: no such {what}") from None
    except UnicodeDecodeError as err:
        raise BytecanaryError(f"{path}: not UTF-8 ({err.reason} at byte {err.start})") from None


def read_json(path: str | Path, what: str = "JSON file") -> Any:
    """A JSON file; missing, non-UTF-8 or malformed is one error naming the file."""
    try:
        return json.loads(read_text(path, what))
    except json.JSONDecodeError as err:
        raise BytecanaryError(f"{path}: not valid JSON ({err.msg}, line {err.lineno}); truncated?") from None


def read_jsonl(
    path: str | Path,
    check: Callable[[dict[str, Any]], str | None] | None = None,
    on_bad: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """The objects of a UTF-8 JSONL file, as ``parse_jsonl`` reads them."""
    return parse_jsonl(read_text(path, "JSONL file"), path, check, on_bad)


def parse_jsonl(
    data: str | bytes,
    where: str | Path,
    check: Callable[[dict[str, Any]], str | None] | None = None,
    on_bad: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """The objects of JSONL ``data`` read from ``where``: a malformed (or ``check``-refused) line is
    an error naming ``where:line``, or with ``on_bad`` a message to it and the line skipped; an
    unterminated last line is a write in flight (or torn by a crash), skipped quietly."""
    lines = data.split(b"\n" if isinstance(data, bytes) else "\n")
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            if number == len(lines):  # no newline after it: torn
                break
            problem: str | None = f"not valid JSON ({getattr(err, 'msg', err)})"
        else:
            if not isinstance(row, dict):
                problem = f"expected a JSON object, got {type(row).__name__}"
            else:
                problem = check(row) if check else None
        if problem is None:
            rows.append(row)
        elif on_bad is not None:
            on_bad(f"{where}:{number}: {problem}; line skipped")
        else:
            raise BytecanaryError(f"{where}:{number}: {problem}")
    return rows


def write_json(path: str | Path, obj: Any) -> None:
    """Write JSON atomically (UTF-8, non-ASCII kept readable)."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


@contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield a fresh temporary folder beside ``path`` that takes its place on success and is deleted
    on error, so readers see the old folder or the new one, never half of one; callers decide
    whether replacing ``path`` is theirs to do."""
    path = check_output(path, folder=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    old = tmp.with_name(tmp.name.removesuffix(".tmp") + ".old")
    try:
        yield tmp
        umask = current_umask()
        for inside in [tmp, *tmp.rglob("*")]:  # the modes open() and mkdir would give
            _as_open_would(inside, umask)
        if path.exists():  # moved aside, removed only once the new folder is in place
            os.replace(path, old)
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except OSError as err:
        raise named(err, path, tmp) from err
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if old.is_symlink():  # rmtree refuses a link; the link itself is what was moved aside
            old.unlink()
        shutil.rmtree(old, ignore_errors=True)


def link_or_copy(src: Path, dst: Path) -> None:
    """``dst`` as a hard link to ``src`` (a copy where links are not allowed): a stage's
    task folder keeps its files until the stage is in place, so a kill loses nothing."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)
