"""The suite's own sharing between pytest-xdist workers: each worker's first share opens with
its part of the long tests, and a shared folder is built once, again only after a failure."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from .sharing import built_once, worker_order


@dataclasses.dataclass
class Item:
    nodeid: str
    slow: bool

    @property
    def fixturenames(self) -> list[str]:
        return ["small_data"] if self.nodeid.startswith(("a", "e")) else []

    def get_closest_marker(self, name: str) -> object | None:
        return object() if name == "slow" and self.slow else None


def _items() -> list[Item]:
    """Collection order: modules a-e, their slow tests among the fast ones; a and e need
    the shared data."""
    tests = [("a", 3, 4), ("b", 0, 9), ("c", 2, 1), ("d", 1, 6), ("e", 2, 5)]
    return [Item(f"{module}.py::t{i}", i < slow) for module, slow, fast in tests for i in range(slow + fast)]


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_each_share_opens_with_its_slow_modules_and_every_test_runs_once(workers):
    items = _items()
    ordered = worker_order(items, workers)
    assert sorted(i.nodeid for i in ordered) == sorted(i.nodeid for i in items)
    left, shares = len(ordered), []
    for index in range(workers):  # as pytest-xdist's worksteal scheduler cuts them
        size = left // (workers - index)
        shares.append(ordered[len(ordered) - left : len(ordered) - left + size])
        left -= size
    slow_modules = []
    for share in shares:
        flags = [item.slow for item in share]
        assert flags == sorted(flags, reverse=True), "a fast test before a slow one"
        slow_modules.append({item.nodeid.split("::")[0] for item in share if item.slow})
    assert set().union(*slow_modules) == {"a.py", "c.py", "d.py", "e.py"}
    assert sum(len(modules) for modules in slow_modules) == 4, "a module's slow tests were split"
    needs = [[m in ("a.py", "e.py") for m in dict.fromkeys(i.nodeid.split("::")[0] for i in s if i.slow)]
             for s in shares]  # fmt: skip
    assert needs[0] == sorted(needs[0], reverse=True), "the first share builds the shared data first"
    assert all(n == sorted(n) for n in needs[1:]), "a later share waits for the shared data"
    counts = [sum(item.slow for item in share) for share in shares]
    assert max(counts) - min(counts) <= 3  # the largest module (a, 3 slow tests) cannot be split


def test_a_shared_folder_is_built_once_and_again_after_a_failed_build(tmp_path_factory):
    built: list[Path] = []

    def build(folder: Path) -> Path:
        built.append(folder)
        (folder / "half").write_text("x")
        if len(built) == 1:
            raise OSError("cut short")
        return folder / "half"

    with pytest.raises(OSError):
        built_once(tmp_path_factory, "shared_test", build)
    first = built_once(tmp_path_factory, "shared_test", build)
    assert built_once(tmp_path_factory, "shared_test", build) == first
    assert len(built) == 2 and first.read_text() == "x"
