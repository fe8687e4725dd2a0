"""Where a report places its checkpoints: at tokens seen, or, where some records lack them
(hub revisions, HF folders) and no ``--tokens_per_step`` fills them in, at the step. One axis
per report: curves on two axes would give ratios of unlike things."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from bytecanary import keys
from bytecanary.errors import BytecanaryError
from bytecanary.records import Record


@dataclass(frozen=True)
class Axis:
    """What every curve's x counts, in the words a report uses for it."""

    unit: str  # after a number: "200,000 tokens seen"
    noun: str  # what a ratio counts: "2.00x the tokens of perplexity"
    label: str  # a column's header, a figure's x label

    def at(self, x: float) -> str:
        return f"{x:,.0f} {self.unit}"


TOKENS_AXIS = Axis("tokens seen", "tokens", "tokens seen")
STEP_AXIS = Axis("steps", "steps", "step")
STEP_NOTE = (
    "x is the step: some records lack tokens_seen (--tokens_per_step N places them at step x N); "
    "a ratio of steps equals the ratio of tokens when every step holds the same tokens"
)


def place(
    metrics: list[dict[str, Any]], probes: list[Record], tokens_per_step: int | None = None
) -> tuple[Axis, list[dict[str, Any]], list[Record]]:
    """The axis, and the metrics rows and records with their x in ``tokens_seen``: a record
    without tokens seen is at step x ``tokens_per_step``; where one with a step still has none,
    every row and record is at its step."""
    if tokens_per_step is not None and tokens_per_step < 1:
        raise BytecanaryError(f"--tokens_per_step must be >= 1, not {tokens_per_step}")
    filled = [_filled(r, tokens_per_step) for r in probes]
    if not any(r.tokens_seen is None and r.step is not None for r in filled):
        return TOKENS_AXIS, metrics, filled
    rows = [{**row, keys.TOKENS_SEEN: row.get(keys.STEP)} for row in metrics]
    return STEP_AXIS, rows, [dataclasses.replace(r, tokens_seen=r.step) for r in probes]


def _filled(record: Record, tokens_per_step: int | None) -> Record:
    if record.tokens_seen is not None or record.step is None or tokens_per_step is None:
        return record
    return dataclasses.replace(record, tokens_seen=record.step * tokens_per_step)
