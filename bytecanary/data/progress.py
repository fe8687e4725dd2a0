"""One progress line per stage: a bar with MB/s and an ETA in a terminal, and where the
output is a file (a SLURM log) a plain line at most every ``LOG_EVERY`` seconds."""

from __future__ import annotations

import sys
import time

from tqdm.auto import tqdm

LOG_EVERY = 30.0


class Progress:
    """Bytes done of ``total`` (None: unknown) for stage ``desc``."""

    def __init__(self, desc: str, total: int | None) -> None:
        self.desc, self.total = desc, total or None
        self.start = time.monotonic()
        self.logged = self.start
        self.done = 0
        self.bar = None
        if sys.stderr.isatty():
            self.bar = tqdm(desc=desc, total=self.total, unit="B", unit_scale=True, leave=False)

    def set(self, done: int) -> None:
        """Bytes done so far (not an increment: tasks report totals)."""
        if self.bar is not None:
            self.bar.update(done - self.done)
        self.done = done
        now = time.monotonic()
        if self.bar is None and now - self.logged >= LOG_EVERY:
            self.logged = now
            print(self.line(), file=sys.stderr, flush=True)

    def line(self) -> str:
        """``[desc] 1.2 of 4.0 GB, 35.1 MB/s, ETA 1:23`` (what a log reads)."""
        seconds = max(time.monotonic() - self.start, 1e-9)
        rate = self.done / seconds
        text = f"[{self.desc}] {self.done / 1e9:.2f}"
        text += f" of {self.total / 1e9:.2f} GB" if self.total else " GB"
        text += f", {rate / 1e6:.1f} MB/s"
        if self.total and rate > 0:
            left = int(max(self.total - self.done, 0) / rate)
            text += f", ETA {left // 3600}:{left % 3600 // 60:02d}:{left % 60:02d}"
        return text

    def close(self, done: int) -> None:
        self.set(done)
        if self.bar is not None:
            self.bar.close()
