"""The probes' batches: the costliest first, as lm-evaluation-harness's collator does, so an
out-of-memory error comes at the first batch, where it is retried at half the size with nothing
computed twice (docs/gpus.md, "Precision and memory").
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field

from bytecanary.probes.numerics import is_oom


@dataclass
class Share:
    """One probe's work on one rank: the batch size that fits so far, the sizes it ran out of
    memory at, and how many batches it computed."""

    size: int
    failed_at: list[int] = field(default_factory=list)
    computed: int = 0
    nested: bool = False


_SHARE: ContextVar[Share | None] = ContextVar("bytecanary_probe_share", default=None)


@contextlib.contextmanager
def share(size: int | None) -> Iterator[Share | None]:
    """The batches run inside retry at the first batch, from ``size`` down (None: no retry)."""
    token = _SHARE.set(Share(size) if size else None)
    try:
        yield _SHARE.get()
    finally:
        _SHARE.reset(token)


def spans(n: int, size: int, costs: Sequence[float] | None = None) -> list[tuple[int, int]]:
    """The batches ``[lo, hi)`` of ``size`` over n samples; with per-sample ``costs``, the
    costliest batch (rows x its largest cost) first, else in order."""
    cut = [(lo, min(lo + size, n)) for lo in range(0, n, size)]
    if costs is None:
        return cut
    return sorted(cut, key=lambda s: -(s[1] - s[0]) * max(costs[s[0] : s[1]]))


def each(n: int, size: int, step: Callable[[int, int], None], costs: Sequence[float] | None = None) -> None:
    """``step(lo, hi)`` on each batch of ``spans``. Pass ``costs`` where the batches' order
    changes no result (not for a sampled run, whose draws follow the batches)."""
    current = _SHARE.get()
    if current is None or current.nested:  # no retry here: the error goes to the caller
        for lo, hi in spans(n, size, costs):
            step(lo, hi)
        return
    current.nested = True
    try:
        _retrying(current, n, size, step, costs)
    finally:
        current.nested = False


def _retrying(
    current: Share, n: int, size: int, step: Callable[[int, int], None], costs: Sequence[float] | None
) -> None:
    """``each`` inside a share: from ``min(size, current.size)``, halved while the first batch
    of the share runs out of memory."""
    while True:
        size = min(size, current.size)
        try:
            for lo, hi in spans(n, size, costs):
                step(lo, hi)
                current.computed += 1
            return
        except Exception as err:
            if not is_oom(err) or current.computed or size == 1:
                raise
            current.failed_at.append(size)
            current.size = size // 2
