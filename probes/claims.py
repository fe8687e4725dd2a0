"""Claims: which worker computes which (checkpoint, probe) pair, so no pair is computed twice when
several workers probe one series into one records file: leases in ``<records>.claims``, renewed
while computing, taken over when they run out (docs/gpus.md, "Probing a series with several workers").
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bytecanary.checkpoints import process_gone
from bytecanary.errors import BytecanaryError
from bytecanary.io import cut_torn_tail, named, warn
from bytecanary.probe_options import DEFAULT_LEASE, MAX_LEASE
from bytecanary.records import Identity, wrong_kind

CLOCK_SLACK = 60.0  # seconds hosts' clocks may differ: how far an expiry may lie beyond its lease


def clock(seconds: float) -> str:
    """A time as people read it in a log: ``2026-12-02 14:03:07``."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)


@dataclass(frozen=True)
class Holder:
    """A pair's newest claim: its worker, the worker's process (None in lines that name none),
    the lease it was taken for, and when it runs out."""

    worker: str
    until: float
    host: str | None = None
    pid: int | None = None
    lease: float | None = None

    def who(self) -> str:
        process = f" (pid {self.pid} on {self.host})" if self.pid is not None else ""
        return f"worker {self.worker}{process}"


def _shape_problem(row: Any) -> str | None:
    """What is wrong with a claim line's fields, or None."""
    if not isinstance(row, dict):
        return f"expected a JSON object, got {type(row).__name__}"
    kinds = {"pair": str, "worker": str, "host": (str, type(None)), "pid": (int, type(None))}
    for name, kind in kinds.items():
        if not isinstance(row.get(name), kind) or isinstance(row.get(name), bool):
            return f"{name!r} has the wrong type ({row.get(name)!r})"
    for name in ("until", "lease"):
        if not (_number(row.get(name)) or (name == "lease" and row.get(name) is None)):
            return f"{name!r} is not a number of seconds ({row.get(name)!r})"
    return None


class Claims:
    """The claims file beside the records ``out``, as seen by ``worker`` in this process."""

    def __init__(self, out: str | Path, worker: str, lease: float = DEFAULT_LEASE) -> None:
        if not 0 < lease <= MAX_LEASE:
            raise BytecanaryError(
                f"lease: must be more than 0 and at most {MAX_LEASE:g} seconds, got {lease!r}"
            )
        self.path = Path(f"{out}.claims")
        self._check_kind()
        self.worker, self.lease = worker, lease
        self.host, self.pid = socket.gethostname(), os.getpid()
        self.refused: dict[str, Holder] = {}
        """Per pair this worker last failed to claim, who held it then."""
        self._warned: set[int | tuple[str | None, int | None]] = set()

    def _check_kind(self) -> None:
        """Refuse a claims file that is a link out of its folder or no regular file, as the
        records file is refused: each update would cut and append to whatever it leads to."""
        trouble = wrong_kind(self.path, "claims")
        if trouble:
            raise BytecanaryError(trouble)

    def _warn_once(self, key: int | tuple[str | None, int | None], message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warn(message)

    def _holder(self, row: dict[str, Any], number: int, now: float) -> Holder:
        """The holder a well-formed claim line names; an expiry beyond what its lease allows
        counts as run out."""
        fields = {k: row.get(k) for k in ("worker", "until", "host", "pid", "lease")}
        holder = Holder(**fields)
        lease = holder.lease if holder.lease is not None else self.lease
        if holder.until - now <= lease + CLOCK_SLACK:
            return holder
        ahead = f"{holder.until - now:.3g} s" if math.isfinite(holder.until) else "never"
        self._warn_once(
            number,
            f"{self.path}:{number}: the claim of {holder.who()} runs out in {ahead}, beyond its lease "
            f"of {lease:g} s; taken as run out",
        )
        return Holder(**{**fields, "until": 0.0})

    def _holders(self, data: bytes, now: float) -> dict[str, Holder]:
        """The holder of each pair by its newest claim line; a bad line is skipped with a
        warning (once)."""
        holders = {}
        for number, line in enumerate(data.split(b"\n"), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                row, problem = None, "not valid JSON"
            else:
                problem = _shape_problem(row)
            if problem is not None:
                self._warn_once(number, f"{self.path}:{number}: {problem}; line skipped")
                continue
            holders[row["pair"]] = self._holder(row, number, now)
        return holders

    def _own(self, holder: Holder | None) -> bool:
        """Whether ``holder`` is this process (a line naming no process counts by its name)."""
        if holder is None or holder.worker != self.worker:
            return False
        return holder.pid is None or (holder.host, holder.pid) == (self.host, self.pid)

    def _may_take(self, holder: Holder | None, now: float) -> bool:
        """Whether this process may claim a pair ``holder`` holds: nobody does, the claim ran
        out, it is this process's, or a namesake's that no longer exists on this host."""
        if holder is None or holder.until <= now or self._own(holder):
            return True
        if holder.worker != self.worker:
            return False
        if holder.host is not None and holder.pid is not None and process_gone(holder.host, holder.pid):
            return True  # a restart under its name
        self._warn_once(
            (holder.host, holder.pid),
            f"worker name {self.worker!r} is also used by pid {holder.pid} on {holder.host}, which "
            "holds live claims: the two processes share the work as two workers "
            "(give each its own --workers.name)",
        )
        return False

    def _line(self, key: str, until: float) -> str:
        row = {"pair": key, "worker": self.worker, "until": until, "lease": self.lease}
        return json.dumps({**row, "host": self.host, "pid": self.pid}) + "\n"

    def _update(self, pairs: list[Identity], take: bool) -> list[bool]:
        """Under the lock: with ``take``, claim each pair unless another worker holds it now;
        else release those this process holds (an expiry of 0). Returns, per pair, whether this
        process holds it."""
        keys = [json.dumps(list(pair)) for pair in pairs]
        self._check_kind()  # at each update too: the file may have been swapped for a link meanwhile
        try:
            with open(self.path, "a+b") as f:
                fcntl.flock(f, fcntl.LOCK_EX)
                f.seek(0)
                data = cut_torn_tail(f, f.read())
                now = time.time()
                holders = self._holders(data, now)
                held, lines = [], []
                for key in keys:
                    holder = holders.get(key)
                    mine = take and self._may_take(holder, now)
                    held.append(mine)
                    if mine:
                        self.refused.pop(key, None)
                        lines.append(self._line(key, now + self.lease))
                    elif take:
                        self.refused[key] = holder
                    elif self._own(holder):
                        lines.append(self._line(key, 0.0))
                f.write("".join(lines).encode())
                f.flush()
        except OSError as err:
            raise named(err, self.path) from err
        return held

    def claim(self, pairs: list[Identity]) -> list[bool]:
        """Claim each pair; False where another worker holds it."""
        return self._update(pairs, take=True)

    def waiting_for(self) -> str | None:
        """Whom the pairs this worker was refused wait for, and until when, as one line; None
        when it was refused none."""
        by_holder: dict[str, list[Holder]] = {}
        for holder in self.refused.values():
            by_holder.setdefault(holder.who(), []).append(holder)
        if not by_holder:
            return None
        parts = [
            f"{who} holds {len(held)} pair(s) until {clock(max(h.until for h in held))}"
            for who, held in by_holder.items()
        ]
        return f"waiting: {'; '.join(parts)} (renewed while it computes, else taken over then)"

    @contextmanager
    def holding(self, pairs: list[Identity]) -> Iterator[None]:
        """Renew the claims on ``pairs`` every third of a lease while the body runs, and
        release them after (the records then say what happened)."""
        stop = threading.Event()

        def renew() -> None:
            while not stop.wait(self.lease / 3):
                self._update(pairs, take=True)

        beat = threading.Thread(target=renew, daemon=True)
        beat.start()
        try:
            yield
        finally:
            stop.set()
            beat.join()
            self._update(pairs, take=False)
