"""``probes.jsonl``: one typed record per (checkpoint, probe), its one reader (``read``), the one place
that appends (``append``, under ``flock``, each identity once) and the one merge rule (``merge``),
so restarts and concurrent writers converge (docs/faults.md). No torch: the report reads records.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bytecanary.errors import BytecanaryError
from bytecanary.io import cut_torn_tail, named, parse_jsonl

SCHEMA = 3  # bump when a field changes (2: checkpoint_id; 3: fingerprint, once params); none: schema 0
NO_METRICS = "no metrics (empty eval set?)"
Identity = tuple[str, str, int | None, str | None]


@dataclass(frozen=True)
class Context:
    """What a measurement was taken on: the fields every record and per-sample line starts with."""

    checkpoint: str | None
    """Where the checkpoint was (a weights file's resolved path, ``model@revision``); None for
    a fire on the live training module."""
    step: int | None
    tokens_seen: int | None
    checkpoint_id: str | None = None
    """What the checkpoint is, wherever it lies (``checkpoints.weights_id`` of a weights
    file); None where only its path names it."""

    def fields(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Record:
    """The result of one probe on one checkpoint."""

    checkpoint: str | None
    step: int | None
    tokens_seen: int | None
    probe: str
    version: int | None
    """The probe's version: bumped when its outputs change for the same parameters."""
    fingerprint: str | None
    """A hash of the probe's parameters, its eval files' contents and the dtype (records of
    schema 2 and before call it ``params``)."""
    status: str  # "ok" | "failed"
    error: str | None
    seconds: float
    threads: int | None
    """torch's intra-op threads while it ran: what ``seconds`` were spent on."""
    metrics: dict[str, float] = field(default_factory=dict)
    checkpoint_id: str | None = None
    """What the checkpoint is, wherever it lies; records without one are known by ``checkpoint``."""
    worker: str | None = None
    """Which of several workers on one records file computed it (``probes.claims``)."""
    dtype: str | None = None
    """What the model computed in (records without one: float32)."""
    batch_size: int | None = None
    """The batch size that ran: the probe's own, or half of it and less where that ran out of
    memory (the fingerprint keeps the configured one)."""
    measure: str | None = None
    """A hash of what the probe measures, as it declares (``Probe.measures``): records of one
    probe with the same measure are one curve (``merge``); records without one are told
    apart by their keys."""
    schema: int = SCHEMA

    @classmethod
    def of(
        cls,
        context: Context,
        probe: Any,
        fingerprint: str | None,
        metrics: dict[str, float] | None,
        **how: Any,
    ) -> Record:
        """The record of ``probe`` (name, version) at ``context``; ``how`` holds ``seconds``,
        ``threads``, ``error``, ``worker``, ``dtype``, ``batch_size`` and ``measure``. A run that raised
        nothing but measured nothing failed too."""
        error = how.get("error") or (None if metrics else NO_METRICS)
        return cls(
            **context.fields(),
            probe=probe.name,
            version=probe.version,
            fingerprint=fingerprint,
            status="failed" if error else "ok",
            error=error,
            seconds=round(how["seconds"], 3),
            threads=how["threads"],
            metrics=dict(metrics or {}),
            worker=how.get("worker"),
            dtype=how.get("dtype"),
            batch_size=how.get("batch_size"),
            measure=how.get("measure"),
        )

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def identity(self) -> Identity:
        where = self.checkpoint_id or self.checkpoint
        return identity(where, self.step, self.probe, self.version, self.fingerprint)

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)


def identity(
    checkpoint: str | None, step: int | None, probe: str, version: int | None, fingerprint: str | None
):
    """What makes two records the same result: the checkpoint (its ``checkpoint_id`` where it
    has one, so a moved or copied run is the same run; for a fire on the live module, which
    has no file, its step), the probe, its version and its fingerprint."""
    return (checkpoint if checkpoint is not None else f"live step {step}", probe, version, fingerprint)


FIELDS = set(Record.__dataclass_fields__)


def problem(row: Any) -> str | None:
    """What is wrong with a parsed line, if anything a reader relies on."""
    if not isinstance(row, dict):
        return f"expected a JSON object, got {type(row).__name__}"
    metrics = row.get("metrics")
    if not isinstance(metrics, dict) or not all(isinstance(v, int | float) for v in metrics.values()):
        return "'metrics' is not a mapping of numbers"
    if not isinstance(row.get("probe"), str) or not isinstance(row.get("tokens_seen", 0), int | None):
        return "'probe' or 'tokens_seen' has the wrong type"
    if row.get("status") not in ("ok", "failed"):
        return f"'status' is {row.get('status')!r}, not 'ok' or 'failed'"
    return None


def _record(row: dict[str, Any]) -> Record:
    known = {k: v for k, v in row.items() if k in FIELDS}
    if "params" in row and "fingerprint" not in row:  # schema 2 and before
        known["fingerprint"] = row["params"]
    defaults = {"version": None, "fingerprint": None, "error": None, "seconds": 0.0, "threads": None}
    return Record(**{"checkpoint": None, "step": None, "tokens_seen": None, **defaults, "schema": 0, **known})


def parse(data: bytes, where: str | Path, on_bad: Callable[[str], None] | None = None) -> list[Record]:
    """The records in ``data``. An unterminated last line is a write in flight (or torn by a
    crash) and is skipped quietly; any other bad line is skipped, and ``on_bad`` (e.g.
    ``warn``) hears of it as ``file:line: problem``."""
    return [_record(row) for row in parse_jsonl(data, where, problem, on_bad or (lambda message: None))]


def read(path: str | Path, on_bad: Callable[[str], None] | None = None) -> list[Record]:
    """Every record of ``path`` (none when it does not exist), as ``parse`` reads them."""
    path = Path(path)
    try:
        return parse(path.read_bytes(), path, on_bad) if path.exists() else []
    except OSError as err:
        raise named(err, path) from err


def done(records: Iterable[Record]) -> set[Identity]:
    """The identities that succeeded: a pair is done only for the same version and fingerprint
    (records without them never match)."""
    return {r.identity for r in records if r.ok}


class Tally:
    """The identities that succeeded in a records file, kept up to date by reading only the
    lines added since the last look: the file only grows (``append`` cuts a torn tail back to
    its last newline, which never passes a line already read)."""

    def __init__(self, path: str | Path) -> None:
        self.path, self._read, self._done = Path(path), 0, set()

    def done(self) -> set[Identity]:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            size = 0
        if size < self._read:  # replaced by a shorter file: read it again
            self._read, self._done = 0, set()
        if size > self._read:
            try:
                with open(self.path, "rb") as f:
                    f.seek(self._read)
                    data = f.read(size - self._read)
            except OSError as err:
                raise named(err, self.path) from err
            whole = data.rfind(b"\n") + 1
            self._done |= done(parse(data[:whole], self.path))
            self._read += whole
        return self._done


RECORD_START = b'{"checkpoint": '  # how every line ``Record.to_json`` writes begins
LOOKED_AT = 5  # lines read to tell a records file: one may be corrupt, not all of these


def _not_ours(path: Path, data: bytes) -> str | None:
    """Why ``data`` (a file's start) is not a records file, or None: empty, one record being
    written (a crash in the first append: a record's start that is no whole JSON document), or
    a record among its first lines."""
    if not data.strip() or (b"\n" not in data and data.startswith(RECORD_START) and not _whole_json(data)):
        return None
    lines = [line for line in data.split(b"\n")[:-1] if line.strip()][:LOOKED_AT]
    if any(_is_record(line) for line in lines):
        return None
    why = "line 1 is no record" if lines else "no whole line, while every record ends in a newline"
    return f"{path}: holds something other than probe records ({why}); not appending to it"


def _whole_json(data: bytes) -> bool:
    """Whether ``data`` is one whole JSON document, which no strict prefix of a record is."""
    try:
        json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False
    return True


def _is_record(line: bytes) -> bool:
    try:
        return problem(json.loads(line)) is None
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False


def wrong_kind(path: Path, what: str = "records") -> str | None:
    """Why ``path`` is no place for ``what`` (records, claims) whatever it holds: a link that
    leads out of its folder, or something other than a regular file (None: missing, or a
    regular file)."""
    if path.is_symlink() and path.resolve().parent != path.parent.resolve():
        return f"{path}: a link to {path.resolve()}, outside its folder; {what} are never written through it"
    if path.exists() and not path.is_file():
        return f"{path}: not a regular file; {what} go to a file of their own"
    return None


def refusal(path: str | Path) -> str | None:
    """Why records must not be appended to ``path``, or None: a link that leads out of its
    folder, something other than a regular file, a file of another kind (weights, metrics,
    text). A missing or empty file, or one holding records, is ours to append to."""
    path = Path(path)
    trouble = wrong_kind(path)
    if trouble or not path.exists():  # nor a link's target: the first append creates it
        return trouble
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 20)
    except OSError as err:
        raise named(err, path) from err
    return _not_ours(path, head)


def check_file(path: str | Path) -> Path:
    """``path`` if records may be appended to it (``refusal``), before any work is done."""
    trouble = refusal(path)
    if trouble:
        raise BytecanaryError(trouble)
    return Path(path)


def _lines_with(data: bytes, needle: bytes) -> bytes:
    """The whole lines of ``data`` that hold ``needle``: a byte search is far cheaper than
    parsing every record's metrics."""
    return b"".join(line + b"\n" for line in data.split(b"\n") if needle in line)


def append(path: str | Path, record: Record) -> bool:
    """Append ``record`` unless its identity already succeeded (another process finished it
    meanwhile); returns whether it was appended. Only the lines with the record's fingerprint
    are parsed to decide."""
    path = Path(path)
    trouble = wrong_kind(path)  # before opening: a FIFO would block, a link would be followed
    if trouble:
        raise BytecanaryError(trouble)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a+b") as f:
            fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes
            f.seek(0)
            data = f.read()
            trouble = _not_ours(path, data[: 1 << 20])  # as it is under the lock, not as it was
            if trouble:
                raise BytecanaryError(trouble)
            data = cut_torn_tail(f, data)
            mark = json.dumps(record.fingerprint)
            candidates = b"".join(
                _lines_with(data, f'"{k}": {mark}'.encode()) for k in ("fingerprint", "params")
            )
            if record.identity in done(parse(candidates, path)):
                return False
            f.write((record.to_json() + "\n").encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
    except OSError as err:
        raise named(err, path) from err
    return True


def merge(records: Iterable[Record], on_left_out: Callable[[str], None] | None = None) -> list[Record]:
    """One successful record per (checkpoint, probe), in file order of first appearance: a rerun replaces,
    other measures add metrics, and a curve never mixes two parameterisations that measure the same
    thing (docs/faults.md); ``on_left_out`` hears of the records left out."""
    ok = [r for r in records if r.ok]
    kept = _newest_parameterisations(ok, on_left_out)
    merged: dict[tuple[str, str], Record] = {}
    for record in ok:
        if (record.probe, record.fingerprint) not in kept:
            continue
        key = (record.identity[0], record.probe)
        old = merged.get(key)
        if old is not None and old.fingerprint != record.fingerprint:
            record = Record(**{**asdict(record), "metrics": {**old.metrics, **record.metrics}})
        merged[key] = record
    return list(merged.values())


def _same_measure(a: tuple[str | None, set[str]], b: tuple[str | None, set[str]]) -> bool:
    """Whether two parameterisations, each (its declared measure, its keys), measure the same thing."""
    if a[0] is not None and b[0] is not None:
        return a[0] == b[0]
    return 2 * len(a[1] & b[1]) > min(len(a[1]), len(b[1]))


def _newest_parameterisations(
    ok: list[Record], on_left_out: Callable[[str], None] | None
) -> set[tuple[str, str | None]]:
    """The (probe, fingerprint) pairs kept: newest first, each that measures other things than
    every newer one kept (``_same_measure``)."""
    keys: dict[tuple[str, str | None], tuple[str | None, set[str]]] = {}
    counts: dict[tuple[str, str | None], int] = {}
    for record in ok:  # dict order: by first appearance; moved to the end by each later one
        pair = (record.probe, record.fingerprint)
        keys[pair] = (record.measure, keys.pop(pair, (None, set()))[1] | set(record.metrics))
        counts[pair] = counts.get(pair, 0) + 1
    kept: dict[tuple[str, str | None], tuple[str | None, set[str]]] = {}
    for pair in reversed(keys):
        newer = [other for other in kept if other[0] == pair[0] and _same_measure(kept[other], keys[pair])]
        if not newer:
            kept[pair] = keys[pair]
        elif on_left_out is not None:
            probe, fingerprint = pair
            on_left_out(
                f"{probe}: {counts[pair]} records with fingerprint {fingerprint} left out: they measure the "
                f"same thing as the newer fingerprint {newer[0][1]} with other parameters"
            )
    return set(kept)
