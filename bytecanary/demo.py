"""``bytecanary demo``: the embedded default, end to end.

Until training and the probes land, the demo runs what exists: it prepares the
embedded default data (corpus, tokenizer, shards, eval sets), then scores the paper's
worked examples (seeds/003 section 3.2) with the exact DFA and shows a generation's
step scores, so a newcomer sees the data path and the measurement core work.
"""

from __future__ import annotations

from pathlib import Path

from bytecanary import utf8

EXAMPLES = [
    ("1st byte of 語 (E8 AA 9E)", "語".encode()[:1]),
    ("2 bytes of 語", "語".encode()[:2]),
    ("語, complete", "語".encode()),
    ("U+2B740 (F0 AB 9D 80)", b"\xf0\xab\x9d\x80"),
    ("F0 AB then a new lead F0", b"\xf0\xab\xf0"),
    ("invalid 80, then 'A'", b"\x80A"),
    ("surrogate ED A0 80", b"\xed\xa0\x80"),
]


def run_demo(minutes: float, out: str, config: str, data: str | None = None) -> int:
    """Prepare ``config``'s data, print UTF-8 scores of the paper's examples and write
    them to ``out/utf8_examples.tsv``."""
    from bytecanary.data.prepare import prepare

    prepare(config, data)
    print()
    rows = [(name, data, utf8.score(data)) for name, data in EXAMPLES]
    print(f"{'stream':<30}{'bytes':<14}{'strict':>8}{'soft':>8}{'partial':>9}")
    for name, data, s in rows:
        print(f"{name:<30}{data.hex(' '):<14}{s.strict:>8.2f}{s.soft:>8.2f}{s.partial:>9.3f}")
    steps = utf8.step_scores([b"\xf0"], [[b"\xab", b"\x9d", b"\x80", b""]])
    print("\nstep scores of prompt F0 + generated AB | 9D | 80 | <eos>:")
    for name in ("partial", "cumulative", "ema"):
        values = "  ".join(f"{v:.3f}" for v in getattr(steps, name)[0])
        print(f"  {name:<11}{values}")
    run_dir = Path(out)
    run_dir.mkdir(parents=True, exist_ok=True)
    table = run_dir / "utf8_examples.tsv"
    tmp = table.with_suffix(".tmp")
    tmp.write_text(
        "stream\tbytes\tstrict\tsoft\tpartial\n"
        + "".join(f"{n}\t{d.hex()}\t{s.strict}\t{s.soft}\t{s.partial}\n" for n, d, s in rows)
    )
    tmp.replace(table)
    print(f"\nwrote {table} (budget {minutes:g} min; training and probes come with later issues)")
    return 0
