"""``bytecanary report`` on records without a training run: a hub-like records file whose
revisions have no tokens_seen (drawn against the step, or placed with ``--tokens_per_step``),
a folder holding ``probes.jsonl``, and a folder with neither."""

import contextlib
import io
import math
import shlex

import numpy as np
import pytest

from bytecanary import stats
from bytecanary.cli import _parse, main
from bytecanary.errors import BytecanaryError
from bytecanary.probes import utf8_report
from bytecanary.report import analysis, figures
from bytecanary.report.axis import STEP_AXIS, STEP_NOTE, TOKENS_AXIS, place
from bytecanary.report.sources import load_run
from bytecanary.report.writer import report_summary, write_report

from .runs import (
    HUB_MODEL,
    HUB_TOKENS_PER_STEP,
    TOKENS,
    hub_records,
    is_png,
    level0,
    make_run,
    ppl,
    write_jsonl,
)

PYTHIA_TOKENS_PER_STEP = 2_097_152  # 1024 x 2048: Pythia's batch
STEPS = [t // HUB_TOKENS_PER_STEP for t in TOKENS]


@pytest.fixture(scope="module")
def hub_file(tmp_path_factory):
    """A records file as ``bytecanary probe MODEL --revision ... --out`` writes it (tokens_seen null)."""
    path = tmp_path_factory.mktemp("hub") / "pythia-160m.jsonl"
    write_jsonl(path, hub_records())
    return path


def _run_cli(*args: str) -> str:
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        assert main(["report", *args]) == 0
    return stdout.getvalue()


def _direct_convergence() -> dict[str, float]:
    """Where each curve converges by ``stats.detect_convergence`` on the raw series against the
    step: perplexity on its log with its own noise, p_valid on its recorded SE, V partial on the
    larger of its binomial SE and the local scatter."""
    xs = np.array(STEPS, dtype=float)
    log_ppl = np.log([ppl(t) for t in TOKENS])
    points = [level0(t) for t in TOKENS]
    v = np.array([m["probe/level0/all/all/partial"] for m in points])
    binomial = [stats.proportion_se(x, m["probe/level0/all/all/n"]) for x, m in zip(v, points, strict=True)]
    v_se = np.maximum(stats.local_noise(xs, v), binomial)
    p = [m["probe/level0/all/all/p_valid"] for m in points]
    p_se = [m["probe/level0/all/all/p_valid_se"] for m in points]
    return {
        "ppl": stats.detect_convergence(xs, log_ppl).converged_at,
        "partial": stats.detect_convergence(xs, v, v_se).converged_at,
        "p_valid": stats.detect_convergence(xs, p, p_se).converged_at,
    }


def test_a_records_file_is_reported_beside_it_against_the_step(hub_file):
    printed = _run_cli(str(hub_file), "--wandb=false")
    out = hub_file.parent / "report"
    assert sorted(p.name for p in out.iterdir()) == ["convergence.png", "mcqa.png", "report.md", "tiers.png"]
    assert is_png(out / "convergence.png") and is_png(out / "tiers.png")
    direct = _direct_convergence()
    assert direct == {"ppl": 5_000, "partial": 10_000, "p_valid": 10_000}  # as the series were shaped
    lines = printed.splitlines()
    assert lines[0] == STEP_NOTE
    assert lines[1].startswith(
        f"held-out perplexity (ppl probe) converges at {direct['ppl']:,.0f} steps (slope"
    )
    assert f"Level 0 validity (all, partial) converges at {direct['partial']:,.0f} steps (slope" in printed
    assert f"Level 0 expected validity (all, p_valid) converges at {direct['p_valid']:,.0f} steps" in printed
    ratio = direct["partial"] / direct["ppl"]
    assert f"\nvalidity/perplexity steps: {ratio:.2f}x (95% CI " in printed
    assert f"\np_valid/perplexity steps: {direct['p_valid'] / direct['ppl']:.2f}x (95% CI " in printed
    assert "tier gap, common - rare V partial at 20,000 steps (95% CI over characters)" in printed
    assert lines[-1] == f"report: {out / 'report.md'} (+ convergence.png, tiers.png, mcqa.png)"
    assert "W&B" not in printed  # not asked: nothing to say
    md = (out / "report.md").read_text(encoding="utf-8")
    assert md.startswith(f"# bytecanary report: {hub_file}\n")
    assert "Perplexity: held-out perplexity (ppl probe), `probe/ppl/val/all/ppl`." in md and STEP_NOTE in md
    assert "| step | held-out ppl ↓ | V partial all ↑ |" in md and "tokens seen" not in md
    assert f"| 1000 | {ppl(TOKENS[0]):,.1f} | " in md  # the held-out perplexity of the first revision
    assert "| converges at (steps) | x probe/ppl/val/all/ppl steps |" in md
    assert "| probe/ppl/val/all/ppl | 20 | converged | 5,000 | 1.00 |" in md
    revisions = ", ".join(f"step{s}" for s in STEPS)
    flags = f"--revision '[{revisions}]' --probes '[ppl, level0]' --out {hub_file}"
    line = f"bytecanary probe {HUB_MODEL} {flags}"
    assert line in md
    _, kwargs = _parse(shlex.split(line)[1:])  # the line it prints is one the command takes
    assert kwargs["options"].revision == [f"step{s}" for s in STEPS]
    assert [spec.name for spec in kwargs["options"].probes] == ["ppl", "level0"]


def test_the_step_axis_is_named_in_every_figure(hub_file):
    data = load_run(hub_file)
    assert data.axis == STEP_AXIS and not data.training
    conv = analysis.convergence(data.metrics, data.probes, axis=data.axis)
    fig = figures.convergence_figure(conv)
    assert fig.axes[2].get_xlabel() == "step (log scale)"
    assert fig.axes[0].get_ylabel() == "held-out perplexity (ppl probe) (log scale)"
    assert list(fig.axes[0].lines[0].get_xdata()) == STEPS
    tiers = utf8_report.tiers_figure(analysis.checkpoints(data.probes), data.axis)
    assert {ax.get_xlabel() for ax in tiers.axes if ax.get_xlabel()} == {"step (log scale)"}
    assert "steps to tolerance" in figures.tolerance_title(conv)


def test_tokens_per_step_places_revisions_at_step_times_n_with_the_same_ratio(hub_file):
    by_step = report_summary(hub_file)
    by_tokens = report_summary(hub_file, tokens_per_step=PYTHIA_TOKENS_PER_STEP)
    n = PYTHIA_TOKENS_PER_STEP
    assert STEP_NOTE not in by_tokens
    assert f"held-out perplexity (ppl probe) converges at {5_000 * n:,} tokens seen (slope" in by_tokens
    assert f"Level 0 validity (all, partial) converges at {10_000 * n:,} tokens seen (slope" in by_tokens

    def ratios(text: str, unit: str) -> list[str]:
        return [line.split(": ", 1)[1] for line in text.splitlines() if f"/perplexity {unit}" in line]

    assert ratios(by_tokens, "tokens") == ratios(by_step, "steps") and len(ratios(by_step, "steps")) == 4
    out = write_report(hub_file, wandb=False, tokens_per_step=n)
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "| tokens seen | step | held-out ppl ↓ |" in md and f"| {1_000 * n:,} | 1000 | " in md
    assert f"bytecanary report {hub_file} --tokens_per_step {n}" in md


def test_one_record_without_tokens_puts_every_record_on_the_step():
    records = hub_records(tokens_per_step=PYTHIA_TOKENS_PER_STEP)
    axis, _, placed = place([], records)
    assert axis == TOKENS_AXIS and placed == records
    records[3] = hub_records()[3]  # one revision's record has no tokens_seen
    axis, _, placed = place([], records)
    assert axis == STEP_AXIS and [r.tokens_seen for r in placed] == [r.step for r in records]
    axis, _, placed = place([], records, tokens_per_step=7)
    assert axis == TOKENS_AXIS and placed[3].tokens_seen == records[3].step * 7
    assert placed[4].tokens_seen == records[4].step * PYTHIA_TOKENS_PER_STEP  # its own tokens kept
    with pytest.raises(BytecanaryError, match="--tokens_per_step must be >= 1, not 0"):
        place([], records, tokens_per_step=0)


def test_a_folder_holding_probes_jsonl_is_reported_and_logs_nothing_to_wandb(tmp_path):
    folder = tmp_path / "pythia-160m"
    folder.mkdir()
    write_jsonl(folder / "probes.jsonl", hub_records(tokens_per_step=PYTHIA_TOKENS_PER_STEP))
    printed = _run_cli(str(folder), "--wandb=true")
    assert printed.splitlines()[0] == (
        f"W&B: nothing logged: {folder / 'probes.jsonl'} is no training run, so it has no W&B run to add to"
    )
    assert (folder / "report" / "report.md").is_file() and not (folder / "wandb").exists()
    conv = analysis.convergence([], load_run(folder).probes)
    assert conv.ppl.key == "probe/ppl/val/all/ppl" and conv.ppl.log
    assert conv.ppl.converged_at == 5_000 * PYTHIA_TOKENS_PER_STEP
    assert math.isclose(conv.ppl.values[-1], ppl(TOKENS[-1]))


def test_a_folder_without_records_is_one_line_saying_what_it_needs(tmp_path, capsys):
    empty = tmp_path / "ckpts"
    empty.mkdir()
    assert main(["report", str(empty)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: {empty}: no training run (metrics.jsonl: no such file) and no probe records (probes.jsonl); "
        f"make records with bytecanary probe {empty} --out {empty / 'probes.jsonl'}\n"
    )
    assert list(empty.iterdir()) == []
    (empty / "probes.jsonl").write_text("")
    assert main(["report", str(empty)]) == 2
    assert capsys.readouterr().err == (
        f"error: {empty / 'probes.jsonl'}: holds no probe records (bytecanary probe --out writes them)\n"
    )
    (empty / "probes.jsonl").unlink()
    assert main(["report", str(empty), "--out", str(tmp_path / "x")]) == 2
    assert capsys.readouterr().err.startswith("error: --out goes with two or more PATHS; ")


@pytest.mark.slow
def test_wandb_true_on_a_training_run_without_one_is_an_error_and_unset_is_quiet(tmp_path, capsys):
    run = make_run(tmp_path)
    assert main(["report", str(run), "--wandb=true"]) == 2
    assert capsys.readouterr().err == (
        f"error: {run / 'wandb'}: no W&B run to add the report to (use --wandb=false)\n"
    )
    assert not (run / "report").exists()  # said before the work
    assert main(["report", str(run)]) == 0
    assert "W&B" not in capsys.readouterr().out and not (run / "wandb").exists()
