"""The report never draws one curve from two parameterisations of a probe: records of the same
probe that measure the same thing with other parameters (4 against 8 characters per language)
keep only the newest, and the report and the summary say which records they left out.
Entries that measure other things (scored and generated MCQA) still add up."""

import dataclasses

from bytecanary import records
from bytecanary.cli import main
from bytecanary.report import analysis
from bytecanary.report.summary import summary

from ..report.runs import TOKENS, make_run, record, write_jsonl


def _mixed_run(tmp_path):
    """The fabricated run, its level0 records for the first half of the checkpoints measured
    with other parameters (half the samples)."""
    run = make_run(tmp_path)
    half = set(TOKENS[: len(TOKENS) // 2])
    rows = records.read(run / "probes.jsonl")
    rows = [
        dataclasses.replace(r, fingerprint="q", metrics={**r.metrics, "probe/level0/all/all/n": 2048.0})
        if r.probe == "level0" and r.tokens_seen in half
        else r
        for r in rows
    ]
    write_jsonl(run / "probes.jsonl", rows)
    return run


def test_the_report_keeps_one_parameterisation_and_says_which_records_it_left_out(tmp_path, capsys):
    run = _mixed_run(tmp_path)
    assert main(["report", str(run), "--wandb=false"]) == 0
    err = capsys.readouterr().err
    assert "level0: 10 records with fingerprint q left out" in err
    md = (run / "report" / "report.md").read_text()
    assert "Records left out (one curve per parameterisation)" in md and "fingerprint q left out" in md
    kept = analysis.checkpoints(records.merge(records.read(run / "probes.jsonl")))
    n = {c.value("probe/level0/all/all/n") for c in kept if c.value("probe/level0/all/all/n") is not None}
    assert n == {4096.0}  # one parameterisation: never a curve of mixed n
    assert sum(c.value("probe/level0/all/all/n") is not None for c in kept) == len(TOKENS) // 2


def test_entries_that_measure_other_things_still_add_up(tmp_path, capsys):
    out = tmp_path / "p.jsonl"
    scored = {"probe/mcqa/t/cloze/acc": 0.5, "probe/mcqa/t/n": 8.0}
    generated = {"probe/mcqa/t/dashed/acc": 0.25, "probe/mcqa/t/n": 8.0}
    rows = [dataclasses.replace(record(4096, "mcqa", scored), fingerprint="s")]
    rows.append(dataclasses.replace(record(4096, "mcqa", generated), fingerprint="g"))
    write_jsonl(out, rows)
    left_out: list[str] = []
    (merged,) = records.merge(records.read(out), left_out.append)
    assert merged.metrics == {**scored, **generated} and left_out == []
    summary(out)
    assert "left out" not in capsys.readouterr().err


def test_the_merge_goes_by_what_the_probe_declares_it_measures_not_by_key_overlap(tmp_path):
    from bytecanary.probes import get_probe

    scored = get_probe("mcqa", protocols=["letter_separate", "cloze"])
    more = get_probe("mcqa", protocols=["letter_separate", "cloze"], embedded_per_language=64)
    other = get_probe("mcqa", protocols=["letter_merged"])
    assert scored.measure() == more.measure() != other.measure()  # a size is not a measure
    assert get_probe("level0", per_language=4).measure() == get_probe("level0", per_language=8).measure()
    assert get_probe("level0").measure() != get_probe("level0", eval_sets=["paper.json"]).measure()

    shared = {f"probe/mcqa/t{i}/n": 8.0 for i in range(6)}  # most keys in common
    a = dataclasses.replace(record(4096, "mcqa", {**shared, "probe/mcqa/t0/cloze/acc": 0.5}), fingerprint="a")
    b = dataclasses.replace(record(4096, "mcqa", {**shared, "probe/mcqa/t0/letter_merged/acc": 0.25}))
    b = dataclasses.replace(b, fingerprint="b")
    out = tmp_path / "p.jsonl"
    write_jsonl(
        out,
        [dataclasses.replace(a, measure=scored.measure()), dataclasses.replace(b, measure=other.measure())],
    )
    (merged,) = records.merge(records.read(out))
    assert merged.metrics == {**a.metrics, **b.metrics}  # declared other measures: both kept
    write_jsonl(out, [a, b])  # without measures (older records), their keys decide: one kept
    left_out: list[str] = []
    (merged,) = records.merge(records.read(out), left_out.append)
    assert merged.metrics == b.metrics and left_out == [
        "mcqa: 1 records with fingerprint a left out: they measure the same thing as the newer "
        "fingerprint b with other parameters"
    ]
    disjoint = dataclasses.replace(a, metrics={"probe/mcqa/t9/cloze/acc": 0.5}, measure="m")
    write_jsonl(out, [disjoint, dataclasses.replace(b, measure="m")])  # declared the same: newest only
    (merged,) = records.merge(records.read(out))
    assert merged.metrics == b.metrics
