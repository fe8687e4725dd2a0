"""How pytest-xdist's workers share the suite: the order that balances their work, and folders
that the first worker to need them builds for all (docs/performance.md#the-test-suite)."""

from __future__ import annotations

import fcntl
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest


def worker_order(items: list[pytest.Item], workers: int, shared: str = "small_data") -> list[pytest.Item]:
    """Each worker's first share (worksteal hands out ``len // workers`` tests in order) opens with
    its part of the long tests (marker ``slow``, a module's kept together) and ends on short ones,
    which the other worker can steal. The first share opens with the modules that need ``shared``,
    the others with those that do not: no worker waits while the first builds it (``built_once``)."""
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    fast = [item for item in items if item.get_closest_marker("slow") is None]
    modules: dict[str, list[pytest.Item]] = {}
    for item in slow:
        modules.setdefault(item.nodeid.split("::")[0], []).append(item)
    bins: list[list[list[pytest.Item]]] = [[] for _ in range(workers)]
    for tests in sorted(modules.values(), key=len, reverse=True):
        min(bins, key=lambda b: sum(map(len, b))).append(tests)
    for index, part in enumerate(bins):
        part.sort(key=lambda tests: any(shared in item.fixturenames for item in tests) == bool(index))
    ordered, left = [], len(items)
    for index, part in enumerate([[item for tests in b for item in tests] for b in bins]):
        share = left // (workers - index)
        filling = max(0, share - len(part))
        ordered += part + fast[:filling]
        del fast[:filling]
        left -= len(part) + filling
    return ordered + fast


def built_once(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], Path]) -> Path:
    """``build(folder)``'s result, built by the first worker of the session to ask and read by the
    others (each would otherwise build its own); a build that failed or was cut short is redone."""
    base = factory.getbasetemp()
    shared = base.parent if base.name.startswith("popen-gw") else base
    folder = shared / name
    done = shared / f"{name}.done"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not done.exists():
                shutil.rmtree(folder, ignore_errors=True)
                folder.mkdir()
                done.write_text(str(build(folder)), encoding="utf-8")
        finally:  # also for the copies of the lock's descriptor that forks made during the build
            fcntl.flock(lock, fcntl.LOCK_UN)
    return Path(done.read_text(encoding="utf-8"))
