"""The probe tables printed by ``bytecanary probe`` and ``demo``, on fabricated records."""

import math
import re
from pathlib import Path

import pytest

from bytecanary.probes.mcqa import trends_report as mcqa_trends
from bytecanary.records import read
from bytecanary.report.summary import add_series, summary

from .runs import write_jsonl


def _record(step: int, probe: str, metrics: dict, status: str = "ok") -> dict:
    return {"checkpoint": f"/r/checkpoints/step{step:07d}.ckpt", "step": step, "tokens_seen": step * 4096,
            "probe": probe, "status": status, "error": None, "seconds": 1.0, "metrics": metrics}  # fmt: skip


def _level0(step: int) -> dict:
    m = {
        "probe/level0/all/all/partial": 0.5 + 0.1 * step,
        "probe/level0/all/all/strict": 0.25,
        "probe/level0/all/all/p_valid": 0.125 * step,
        "probe/level0/all/all/gold_win_rate": 1.0,
        "probe/level0/all/all/ppl": 1234.5678,
        "probe/level0/ja/all/partial": 0.8,
        "probe/level0/en/all/partial": 0.9,
        "probe/level0/en/all/strict": 0.1,  # not a column: the language columns hold V partial
    }
    return m | {f"probe/level0/en/{tier}/partial": 0.1 * i for i, tier in enumerate(("common", "rare"), 1)}


def _mcqa(step: int, sep: float, merged: float) -> dict:
    return {
        "probe/mcqa/wordcomp_en/letter_separate/acc": sep,
        "probe/mcqa/wordcomp_ja/letter_separate/acc": sep + 0.1,
        "probe/mcqa/wordcomp_en/letter_merged/acc": merged,
        "probe/mcqa/nonsenseqa_en/dashed/acc": 0.5,
        "probe/mcqa/nonsenseqa_en/letter_separate/acc": 0.125,
        "probe/mcqa/wordcomp_en/cloze/acc_norm": 0.9,  # not cloze/acc
        "probe/mcqa/all/fsi": 0.1 * step,
    }


@pytest.fixture
def records(tmp_path) -> Path:
    rows = [_record(1, "level0", _level0(1)), _record(2, "level0", _level0(2))]
    rows.append(_record(2, "level0", {"probe/level0/all/all/partial": 0.0}, status="failed"))
    level1 = {"probe/level1/all/term_match": 0.0, "probe/level1/all/partial": 0.963}
    level1 |= {"probe/level1/all/p_valid": 0.375, "probe/level1/zh/term_match": 0.5}
    rows.append(_record(2, "level1", level1))
    for step, (sep, merged) in enumerate([(0.2, 0.3), (0.5, 0.9), (0.7, 0.4)], start=1):
        rows.append(_record(step, "mcqa", _mcqa(step, sep, merged)))
    write_jsonl(tmp_path / "probes.jsonl", rows)
    return tmp_path / "probes.jsonl"


def _row(text: str, title: str, name: str) -> list[str]:
    """The cells of the row ``name`` in the block under ``title``."""
    block = text.split(title, 1)[1].split("\n\n", 1)[0]
    return next(line for line in block.splitlines() if line.startswith(name)).split()


def test_level0_table_has_headline_language_and_tier_columns(records):
    text = summary(records)
    head = f"{'checkpoint':<28}{'step':>8}{'tokens':>12}" + "".join(
        f"{n:>11}" for n in ("partial", "strict", "p_valid", "gold win", "gen ppl", "en", "ja")
    )
    assert text.startswith("Level 0 (context-free validity)\n" + head + "\n")
    cells = ["0.600", "0.250", "0.125", "1.000", "1234.568", "0.900", "0.800"]
    assert _row(text, "Level 0", "step0000001.ckpt") == ["step0000001.ckpt", "1", "4,096", *cells]
    step2 = ["0.700", "0.250", "0.250"]  # the failed record is ignored
    assert _row(text, "Level 0", "step0000002.ckpt")[3:6] == step2
    tiers = ["common", "uncommon", "rare", "unseen", "unseen_3b"]
    assert _row(text, "Level 0", "partial by tier, step 2")[-5:] == tiers
    assert _row(text, "partial by tier", "en") == ["en", "0.100", "-", "0.200", "-", "-"]


def test_level1_table_only_has_the_languages_it_probed(records):
    text = summary(records)
    assert "term match    partial    p_valid   gold win         zh\n" in text
    row = _row(text, "Level 1", "step0000002.ckpt")
    assert row == ["step0000002.ckpt", "2", "8,192", "0.000", "0.963", "0.375", "-", "0.500"]


def test_mcqa_table_averages_each_task_group_and_adds_the_series_line(records):
    text = summary(records)
    row = _row(text, "MCQA (accuracy, mean over tasks)", "step0000003.ckpt")
    # word sep: mean(0.7, 0.8); word mrg; word cloze (acc_norm is another metric); word M&D;
    # nons sep; nons M&D; FSI; PSI
    assert row[3:] == ["0.750", "0.400", "-", "-", "0.125", "0.500", "0.300", "-"]
    # wordcomp_ja and nonsenseqa_en have no merged accuracy: no tau for them
    assert "Kendall tau (separate vs merged ranking) wordcomp_en +0.33\n" in text
    no_cells = "n/a: 0 wrapper cells (checkpoint, task, wrapper), fewer than 3"
    assert f"accuracy vs parsability over wrapper cells: {no_cells}" in text


def _series_text(tmp_path: Path, cells: list[tuple[float, float, dict[str, tuple[float, float]]]]) -> str:
    """The series lines of checkpoints 1.. with (separate, merged, {wrapper: (acc, parsable)}) each."""
    rows = []
    for step, (sep, merged, wrappers) in enumerate(cells, start=1):
        m = {
            "probe/mcqa/wordcomp_en/letter_separate/acc": sep,
            "probe/mcqa/wordcomp_en/letter_merged/acc": merged,
        }
        for family, (acc, parsable) in wrappers.items():
            m |= {f"probe/mcqa/wordcomp_en/wrapper_{family}/acc": acc}
            m |= {f"probe/mcqa/wordcomp_en/wrapper_{family}/parsable": parsable}
        rows.append(_record(step, "mcqa", m))
    write_jsonl(tmp_path / "probes.jsonl", rows)
    return summary(tmp_path / "probes.jsonl").split("across checkpoints: ", 1)[1]


def test_an_undefined_series_statistic_says_why_instead_of_nan(tmp_path):
    """The demo's case: every wrapper cell equally parsable, a letter accuracy that never moves."""
    cells = [(0.25, m, {"json": (acc, 1.0)}) for m, acc in [(0.2, 0.1), (0.4, 0.3), (0.3, 0.6)]]
    text = _series_text(tmp_path, cells)
    assert "nan" not in text
    assert text.splitlines() == [
        "Kendall tau (separate vs merged ranking) n/a: separate-letter accuracy is the same at every "
        "checkpoint (wordcomp_en)",
        "accuracy vs parsability over wrapper cells: n/a: parsability is the same in every wrapper cell",
    ]


def test_a_defined_series_statistic_is_a_number_beside_an_undefined_one(tmp_path):
    """Accuracy flat, parsability moving within each checkpoint: Pearson r has no value, the
    fit's slope is 0."""
    parsable = [(0.2, 0.5), (0.6, 0.1), (0.9, 0.8)]
    letters = [(0.2, 0.3), (0.5, 0.9), (0.7, 0.4)]
    cells = [
        (s, m, {"json": (0.5, pj), "plain": (0.5, pp)})
        for (s, m), (pj, pp) in zip(letters, parsable, strict=True)
    ]
    lines = _series_text(tmp_path, cells).splitlines()
    assert lines[0] == "Kendall tau (separate vs merged ranking) wordcomp_en +0.33"
    pearson = "Pearson r n/a (accuracy is the same in every wrapper cell)"
    assert re.fullmatch(
        rf"accuracy vs parsability over wrapper cells: {re.escape(pearson)}, beta -?0\.000 \+- 0\.000",
        lines[1],
    )


def test_a_probe_listed_twice_fills_one_row_per_checkpoint(tmp_path):
    """Scored MCQA at every checkpoint, generated MCQA (other parameters) at some: one row each."""
    scored = {"probe/mcqa/wordcomp_en/letter_separate/acc": 0.25}
    rows = [{**_record(step, "mcqa", scored), "fingerprint": "scored"} for step in (1, 2)]
    rows.append(
        {**_record(2, "mcqa", {"probe/mcqa/nonsenseqa_en/dashed/acc": 0.75}), "fingerprint": "generated"}
    )
    rows.append(
        {**_record(2, "mcqa", {"probe/mcqa/wordcomp_en/letter_separate/acc": 0.5}), "fingerprint": "scored"}
    )
    write_jsonl(tmp_path / "probes.jsonl", rows)
    text = summary(tmp_path / "probes.jsonl")
    block = text.split("MCQA", 1)[1]
    assert sum(line.startswith("step0000002.ckpt") for line in block.splitlines()) == 1
    assert _row(text, "MCQA", "step0000001.ckpt")[3:] == ["0.250", "-", "-", "-", "-", "-", "-", "-"]
    # the scored rerun replaced its own first record; the generated record added its metric
    assert _row(text, "MCQA", "step0000002.ckpt")[3:] == ["0.500", "-", "-", "-", "-", "0.750", "-", "-"]


def test_no_records_no_tables(tmp_path):
    assert summary(tmp_path / "missing.jsonl") == ""


class _Run:
    def __init__(self):
        self.summary: dict[str, float] = {}


def test_the_finish_hook_puts_the_series_into_the_wandb_summary(records):
    run = _Run()
    add_series(records, run)
    mcqa = [r for r in read(records) if r.probe == "mcqa"]
    want = mcqa_trends.mcqa_series(mcqa)
    assert run.summary.keys() == want.keys() and run.summary["probe/mcqa/all/cells"] == 0
    assert run.summary["probe/mcqa/wordcomp_en/kendall_tau_sep_merged"] == pytest.approx(1 / 3)
    assert math.isnan(run.summary["probe/mcqa/all/parsability_beta"])
    one = records.parent / "one.jsonl"
    write_jsonl(one, mcqa[:1])
    add_series(one, run := _Run())
    assert run.summary == {}  # one checkpoint: no statistic across checkpoints


def test_a_nan_metric_is_n_a_in_its_cell(tmp_path):
    write_jsonl(
        tmp_path / "probes.jsonl",
        [_record(1, "level0", {**_level0(1), "probe/level0/all/all/p_valid": math.nan})],
    )
    row = _row(summary(tmp_path / "probes.jsonl"), "Level 0", "step0000001.ckpt")
    assert row[3:6] == ["0.600", "0.250", "n/a"]


def test_a_hub_series_rows_name_their_revision_and_keep_their_columns(tmp_path):
    rows = [
        {
            **_record(step, "level0", _level0(1)),
            "checkpoint": f"EleutherAI/pythia-160m@step{step}",
            "tokens_seen": step * 2_097_152,
        }
        for step in (1000, 143000)
    ]
    write_jsonl(tmp_path / "probes.jsonl", rows)
    block = summary(tmp_path / "probes.jsonl").split("\n\n")[0].splitlines()
    width = len(block[1])  # the header's
    assert [line[:48] for line in block[2:4]] == [
        f"{'pythia-160m@step1000':<28}{1000:>8}{'2.097B':>12}",
        f"{'pythia-160m@step143000':<28}{143000:>8}{'299.893B':>12}",
    ]
    assert all(len(line) == width for line in block[2:4])  # no cell runs into the next
