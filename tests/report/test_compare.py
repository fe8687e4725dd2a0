"""``bytecanary report A B``: one comparison of a training run and a hub series, each run's
numbers as its own report states them, on one axis or refused."""

import contextlib
import io
import shutil

import numpy as np
import pytest

from bytecanary.cli import main
from bytecanary.probes.mcqa import trends_report as mcqa_trends
from bytecanary.report import compare
from bytecanary.report.axis import STEP_NOTE
from bytecanary.report.writer import report_summary

from .runs import hub_records, is_png, make_run, write_jsonl

PER_STEP = 20  # hub_records' steps at this many tokens hold the same curves as make_run's run


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory):
    """runs/a: a training run (val/ppl); runs/b: a folder of hub records with tokens and MCQA."""
    root = tmp_path_factory.mktemp("cmp") / "runs"
    root.mkdir()
    make_run(root).rename(root / "a")
    (root / "b").mkdir()
    write_jsonl(root / "b" / "probes.jsonl", hub_records(tokens_per_step=3 * PER_STEP, mcqa_records=True))
    return root


@pytest.fixture(scope="module")
def compared(runs_dir) -> str:
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        assert main(["report", str(runs_dir / "a"), str(runs_dir / "b")]) == 0
    return stdout.getvalue()


def _row(md: str, name: str) -> dict[str, str]:
    """The cells of ``name``'s row of the comparison table, by column label."""
    lines = [line for line in md.splitlines() if line.startswith("| ")]
    head = [c.strip().rstrip(" ↑↓") for c in lines[0].strip("|").split(" | ")]
    row = next(line for line in lines if line.startswith(f"| {name} |"))
    return dict(zip(head, (c.strip() for c in row.strip("|").split(" | ")), strict=True))


def _stated(summary: str, prefix: str, after: str) -> str:
    """What a single run's printed summary states on the line starting with ``prefix``, after ``after``."""
    line = next(line for line in summary.splitlines() if line.startswith(prefix))
    return line.split(after, 1)[1].split(" ")[0]


def test_two_runs_give_exactly_compare_png_and_md(runs_dir, compared):
    out = runs_dir / "compare-a-b"
    assert sorted(p.name for p in out.iterdir()) == ["compare.md", "compare.png"]
    assert is_png(out / "compare.png")
    md = (out / "compare.md").read_text(encoding="utf-8")
    table = md[md.index("## Convergence of each run") :].split("\n\n")[1]
    assert table in compared and compared.rstrip().endswith(
        f"comparison: {out / 'compare.md'} (+ compare.png)"
    )
    assert (
        len([line for line in table.splitlines() if line.startswith("| a |") or line.startswith("| b |")])
        == 2
    )


@pytest.mark.parametrize("name", ["a", "b"])
def test_each_row_holds_the_numbers_the_runs_own_report_states(runs_dir, compared, name):
    md = (runs_dir / "compare-a-b" / "compare.md").read_text(encoding="utf-8")
    row = _row(md, name)
    summary = report_summary(runs_dir / name)
    ppl_line = "validation perplexity" if name == "a" else "held-out perplexity (ppl probe)"
    assert row["perplexity"] == ("val/ppl" if name == "a" else "probe/ppl/val/all/ppl")
    assert row["axis"] == "tokens seen"
    assert row["perplexity converges at"] == _stated(summary, ppl_line, "converges at ")
    assert row["V partial converges at"] == _stated(summary, "Level 0 validity (all", "converges at ")
    assert row["p_valid converges at"] == _stated(summary, "Level 0 expected validity", "converges at ")
    for column, prefix in (
        ("validity/perplexity", "validity/perplexity tokens: "),
        ("p_valid/perplexity", "p_valid/perplexity tokens: "),
    ):
        line = next(line for line in summary.splitlines() if line.startswith(prefix))
        assert line.removeprefix(prefix).replace("; the paper reports about 2x", "") == row[column]
    gap = next(line for line in summary.splitlines() if line.startswith("tier gap"))
    assert row["tier gap all, common - rare V partial (95% CI)"].split(" at ")[0] in gap.split(": all ")[1]
    # the same shapes: 2x at 1e5 / 2e5 tokens for a, at steps 5,000 / 10,000 x 60 tokens for b
    scale = 1 if name == "a" else 3
    assert row["perplexity converges at"] == f"{100_000 * scale:,}"
    assert row["V partial converges at"] == f"{200_000 * scale:,}"


def test_the_figure_draws_every_run_in_each_panel_with_mcqa_when_both_have_it(runs_dir):
    runs = compare.load_runs([runs_dir / "a", runs_dir / "b"], None, None)
    fig = compare.compare_figure(runs)
    panels = fig.axes[:4]
    assert [ax.get_title() for ax in panels] == [
        "validation perplexity / held-out perplexity (ppl probe)",
        "Level 0 V partial (all)",
        "Level 0 p_valid (all)",
        "MCQA cloze accuracy, mean over tasks",
    ]
    assert all(ax.get_xlabel() == "tokens seen (log scale)" for ax in panels)
    for run in runs:
        drawn = {ax.get_title(): line for ax in panels for line in ax.lines if line.get_label() == run.name}
        assert list(drawn["Level 0 V partial (all)"].get_ydata()) == run.conv.headline.values
        # MCQA: the mean cloze accuracy over the run's tasks at each checkpoint, computed here
        mcqa = [
            np.mean([v for k, v in c.metrics.items() if k.endswith("/cloze/acc")])
            for c in run.cps
            if any(k.endswith("/cloze/acc") for k in c.metrics)
        ]
        assert np.allclose(drawn["MCQA cloze accuracy, mean over tasks"].get_ydata(), mcqa)
    # a ring on each converged curve: at its convergence point
    rings = [line for line in panels[0].lines if line.get_marker() == "o" and line.get_markersize() == 9]
    assert sorted(line.get_xdata()[0] for line in rings) == sorted(r.conv.ppl.converged_at for r in runs)
    assert mcqa_trends.mcqa_tasks(runs[0].cps) and mcqa_trends.mcqa_tasks(runs[1].cps)


def test_runs_on_different_axes_are_refused_with_one_line(runs_dir, tmp_path, capsys):
    steps_only = tmp_path / "pythia"
    steps_only.mkdir()
    write_jsonl(steps_only / "probes.jsonl", hub_records())
    assert main(["report", str(runs_dir / "a"), str(steps_only)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: {steps_only / 'probes.jsonl'}: records without tokens_seen beside runs with them; give "
        f"--tokens_per_step N to place them at step x N, on one axis with the others\n"
    )
    assert not (runs_dir / "compare-a-pythia").exists()
    out = tmp_path / "both"
    args = [
        "report",
        str(runs_dir / "a"),
        str(steps_only),
        "--tokens_per_step",
        str(PER_STEP),
        "--out",
        str(out),
    ]
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(args) == 0
    assert (
        _row((out / "compare.md").read_text(encoding="utf-8"), "pythia")["V partial converges at"]
        == "200,000"
    )


def test_runs_on_the_step_are_compared_on_the_step(tmp_path):
    for name in ("p1", "p2"):
        (tmp_path / name).mkdir()
        write_jsonl(tmp_path / name / "probes.jsonl", hub_records())
    printed = compare.write_compare([tmp_path / "p1", tmp_path / "p2"])
    assert printed.splitlines()[0] == STEP_NOTE
    md = (tmp_path / "compare-p1-p2" / "compare.md").read_text(encoding="utf-8")
    assert STEP_NOTE in md and _row(md, "p2")["axis"] == "step"
    assert _row(md, "p1")["V partial converges at"] == "10,000"  # step 10,000: 200,000 tokens / 20
    assert "at 20,000 steps" in _row(md, "p1")["tier gap all, common - rare V partial (95% CI)"]


def test_runs_that_all_have_held_out_bits_per_byte_are_drawn_and_tabled_by_it(runs_dir, tmp_path):
    for name in ("p1", "p2"):
        (tmp_path / name).mkdir()
        write_jsonl(tmp_path / name / "probes.jsonl", hub_records())
    runs = compare.load_runs([tmp_path / "p1", tmp_path / "p2"], None, None)
    panels = {ax.get_title(): ax for ax in compare.compare_figure(runs).axes}
    bpb = [r.metrics["probe/ppl/val/all/bpb"] for r in hub_records() if r.probe == "ppl"]
    drawn = [
        line
        for line in panels["held-out bits per byte (ppl probe)"].lines
        if line.get_label() in ("p1", "p2")
    ]
    assert [list(line.get_ydata()) for line in drawn] == [bpb, bpb]
    compare.write_compare([tmp_path / "p1", tmp_path / "p2"])
    md = (tmp_path / "compare-p1-p2" / "compare.md").read_text(encoding="utf-8")
    assert _row(md, "p1")["final held-out bpb"] == f"{bpb[-1]:.3f}"
    # a training run without ppl records: no such panel, and its cell is absent, not 0
    mixed = compare.load_runs([runs_dir / "a", runs_dir / "b"], None, None)
    assert "held-out bits per byte (ppl probe)" not in [
        ax.get_title() for ax in compare.compare_figure(mixed).axes
    ]
    assert compare.compare_table(mixed).rows[0][-1] is None


def test_out_holding_other_files_is_refused(runs_dir, tmp_path, capsys):
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "todo.txt").write_text("mine")
    assert main(["report", str(runs_dir / "a"), str(runs_dir / "b"), "--out", str(mine)]) == 2
    assert "holds todo.txt, not only compare.png and compare.md" in capsys.readouterr().err
    assert sorted(p.name for p in mine.iterdir()) == ["todo.txt"]
    shutil.rmtree(mine)
