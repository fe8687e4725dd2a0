"""What deciding "is this pair done?" and appending one record cost on a long series.

A records file the size a 420-checkpoint x 3-probe run writes (800 metrics a record): the
done-check as a full read of the file (what every pair paid before) beside ``records.Tally``
(only the lines added since the last look), and one ``records.append`` (it parses only the
lines holding the record's fingerprint). Each is called once per (checkpoint, probe) pair.

    python benchmarks/records_throughput.py [--checkpoints 420] [--metrics 800]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bytecanary import records
from bytecanary.records import Context, Record


class _Probe:
    version = 1

    def __init__(self, name: str) -> None:
        self.name = name


def _record(step: int, probe: str, metrics: dict[str, float], params: str = "abcdef123456") -> Record:
    where = Context(
        f"/runs/x/checkpoints/step{step:07d}.safetensors", step, step * 4096, f"sha256:{step:016x}"
    )
    return Record.of(where, _Probe(probe), params, metrics, seconds=1.0, threads=1)


def per_call_ms(fn, calls: int) -> float:
    start = time.perf_counter()
    for i in range(calls):
        fn(i)
    return (time.perf_counter() - start) / calls * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", type=int, default=420)
    parser.add_argument("--metrics", type=int, default=800)
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp()) / "probes.jsonl"
    metrics = {f"probe/level0/ja/rare/m{i}": 0.5 for i in range(args.metrics)}
    with open(out, "w", encoding="utf-8") as f:
        for step in range(args.checkpoints):
            for probe in ("level0", "level1", "mcqa"):
                f.write(_record(step, probe, metrics).to_json() + "\n")
    print(f"{out.stat().st_size / 1e6:.1f} MB, {3 * args.checkpoints} records of {args.metrics} metrics")
    full = per_call_ms(lambda i: records.done(records.read(out)), args.calls)
    tally = records.Tally(out)
    incremental = per_call_ms(lambda i: tally.done(), args.calls)
    append = per_call_ms(
        lambda i: records.append(out, _record(10_000 + i, "level0", {"x": 1.0}, "new")), args.calls
    )
    print(f"{'per pair':<44}{'ms':>10}")
    print(f"{'done-check, full read of the file':<44}{full:>10.1f}")
    print(f"{'done-check, records.Tally':<44}{incremental:>10.1f}  ({full / incremental:.0f}x)")
    print(f"{'records.append':<44}{append:>10.1f}")


if __name__ == "__main__":
    main()
