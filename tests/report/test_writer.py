"""``bytecanary report``: the report folder, ``report.md``'s tables and commands, W&B, and
what happens when the inputs are bad."""

import json
import re
import shutil

import pytest

from bytecanary.cli import main
from bytecanary.errors import BytecanaryError
from bytecanary.io import read_jsonl
from bytecanary.probes import utf8_report
from bytecanary.report import analysis, sections
from bytecanary.report.tables import Column
from bytecanary.report.writer import _scalars, curve_charts, load_run, report_summary, write_report

from . import runs
from .runs import (
    P_VALID_KEY,
    P_VALID_KEYS,
    TIER_GAP,
    TOKENS,
    VALIDITY_KEYS,
    assert_one_sync_of_every_offline_run,
    is_png,
    make_run,
    tier_gap,
)


def test_report_writes_valid_pngs(reported):
    out = reported[0] / "report"
    assert sorted(p.name for p in out.iterdir()) == ["convergence.png", "mcqa.png", "report.md", "tiers.png"]
    assert all(is_png(out / f"{name}.png") for name in ("convergence", "tiers", "mcqa"))


def test_report_md_holds_the_tables_and_commands(reported):
    run = reported[0]
    md = (run / "report" / "report.md").read_text(encoding="utf-8")
    # V_partial's CI is wider than p_valid's: its points' SE is at least the scatter between
    # checkpoints, which here is about its binomial SE, give or take what 7 residuals can tell
    head = "converges after 2.00x the tokens of perplexity (95% CI {}; 200,000 vs 100,000 tokens seen)"
    assert (
        f"\n\nLevel 0 validity (all, partial) {head.format('1.80-2.00')} (the paper reports about 2x).\n"
        in md
    )
    assert f"\n\nLevel 0 expected validity (all, p_valid) {head.format('2.00-2.00')}.\n" in md
    assert "One detector judges every curve" in md and "parametric bootstrap" in md
    assert "the larger of the probe's binomial SE from its n and the scatter of the checkpoints" in md
    for title in (
        "per checkpoint",
        "Convergence (one detector for every curve",
        "by tier, zh",
        "MCQA accuracy",
        "FSI and PSI",
        "MCQA by task",
    ):
        assert title in md
    assert "| 100,000 | 24 | 20.1 |" in md  # the per-checkpoint table, perplexity merged in
    assert "| val/ppl | 20 | converged | 100,000 | 1.00 | 16 |" in md
    assert "| probe/level0/all/all/partial | 20 | converged | 200,000 | 2.00 | 11 |" in md
    assert "| probe/level0/ja/all/p_valid | 20 | converged | 200,000 | 2.00 | 11 |" in md
    # where each curve's noise comes from
    assert "| curve |" in md and "| max(probe n, local scatter) |" in md and "| probe (p_valid_se) |" in md
    assert f"bytecanary train --config {run}/config.yaml --run.name=run-rerun" in md
    assert f"bytecanary probe {run}/checkpoints --config {run}/config.yaml --out {run}/probes.jsonl" in md
    assert f"bytecanary report {run}" in md
    assert "| probe/mcqa/wordcomp_en/kendall_tau_sep_merged |" in md


def test_report_md_gives_time_to_tolerance_and_its_grid(reported):
    """Issue 36: the time-to-tolerance lines beside the flat-tail ones, the rule, every
    curve's T(eps), and per ratio curve a grid of ratios over the tolerances whose every cell
    holds a ratio with its CI or says why there is none."""
    run = reported[0]
    md = (run / "report" / "report.md").read_text(encoding="utf-8")
    data = load_run(run)
    conv = analysis.convergence(data.metrics, data.probes)
    flat_tail = md.index(f"\n\n{conv.explain()}")
    assert md.index(f"\n\n{conv.explain_tolerance(P_VALID_KEY)}.\n") > flat_tail
    assert conv.explain_tolerance(P_VALID_KEY).startswith(
        "Within this run, Level 0 expected validity (all, p_valid) comes within ±0.01 of its final level "
        "after 2.00x the tokens perplexity needs to come within ±2% of its own (95% CI "
    )
    # V_partial's greedy noise (binomial or scatter, the larger) is about its tolerance
    assert "\n\nNo validity/perplexity time-to-tolerance ratio (±0.01 vs ±2%): validity too noisy" in md
    assert "Time to tolerance (`settling.time_to_tolerance`): T(eps) is the first checkpoint" in md
    assert "| val/ppl | ±2% | within | 100,000 |" in md
    assert "| probe/level0/all/all/p_valid | ±0.01 | within | 200,000 |" in md
    for name in ("validity", "p_valid"):
        title = f"## Time-to-tolerance ratio, {name} over val/ppl, within this run"
        table = md[md.index(title) :].split("\n\n")[1].splitlines()
        assert table[0].startswith(f"| {name} \\ val/ppl | ±1% (T ") and "| ±5% (T 100k) |" in table[0]
        rows = [line.strip("|").split(" | ") for line in table[2:]]
        assert [r[0].split(" (")[0].strip() for r in rows] == ["±0.005", "±0.01", "±0.02"]
        cells = [c.strip() for r in rows for c in r[1:]]
        assert len(cells) == 9
        assert all(re.fullmatch(r"\d+\.\d\d \(\d+\.\d\d-\d+\.\d\d.*\)|n/a: .+", c) for c in cells), cells
    p_valid_row = next(line for line in md.splitlines() if line.startswith("| ±0.01 (T 200k) | "))
    assert "| 2.00 (" in p_valid_row


def test_the_tier_gap_is_read_everywhere_with_its_ci(reported):
    """Issue 36 item 4: common minus rare at the last checkpoint (every metric) and on the
    curve, in report.md, the printed summary, W&B's summary values and tiers.png."""
    run, stdout = reported
    md = (run / "report" / "report.md").read_text(encoding="utf-8")
    last = tier_gap(TOKENS[-1], "ja")
    cell = "{:+.3f} ({:+.3f} to {:+.3f})".format
    key = "probe/level0/ja/all/tier_gap_{}".format
    ja = [
        cell(last[key(m)], last[key(m) + "_lo"], last[key(m) + "_hi"])
        for m in ("partial", "strict", "p_valid")
    ]
    assert (
        f"## Tier gap, common - rare, at {TOKENS[-1]:,} tokens seen (value and 95% CI over characters)" in md
    )
    assert "| language | V partial | V strict | p_valid |" in md and f"| ja | {' | '.join(ja)} |" in md
    assert "| en |" not in md.split("## Tier gap, common")[1]  # en has no rare character: no row
    curve = md[md.index("## Tier gap over training") :].split("\n\n")[1].splitlines()
    assert curve[0] == "| tokens seen | step | all | ja | ko | zh |" and len(curve) == 2 + len(TOKENS)
    first = tier_gap(TOKENS[0], "zh")
    zh = "probe/level0/zh/all/tier_gap_partial"
    assert curve[2].endswith(f" | {cell(first[zh], first[zh + '_lo'], first[zh + '_hi'])} |")
    assert (
        f"tier gap, common - rare V partial at {TOKENS[-1]:,} tokens seen (95% CI over characters): all "
        in stdout
    )
    assert f"; ja {ja[0]};" in stdout
    data = load_run(run)
    conv = analysis.convergence(data.metrics, data.probes)
    numbers = _scalars(conv, sections.Inputs(data.metrics, analysis.checkpoints(data.probes), conv.axis, {}))
    at_end = tier_gap(TOKENS[-1], "all")
    assert {k: numbers[k] for k in numbers if k.startswith("report/tier_gap")} == {
        f"report/tier_gap_{m}{e}": at_end[f"probe/level0/all/all/tier_gap_{m}{e}"]
        for m in ("partial", "strict", "p_valid")
        for e in ("", "_lo", "_hi")
    }
    assert abs(numbers["report/tier_gap_partial"] - TIER_GAP) < 0.05


def test_headers_say_which_way_is_better(reported):
    md = (reported[0] / "report" / "report.md").read_text(encoding="utf-8")
    assert "| tokens seen | step | val ppl ↓ | V partial all ↑ |" in md
    assert "| V strict zh ↑ | p_valid all ↑ | p_valid en ↑ |" in md and "| p_valid SE all |" in md
    assert "| tokens seen | step | wordcomp letter, separate ↑ |" in md
    assert "| task | letter sep acc ↑ | letter merged acc ↑ | cloze acc ↑ | M&D acc ↑ | fsi ↓ | psi ↓" in md
    # a count, a p-value and a CI bound have no direction
    for key in ("probe/mcqa/<task>/n", "probe/mcqa/<task>/mcnemar_p", "probe/mcqa/<task>/fsi_lo"):
        assert Column("x", ".3f", key).header == "x"


def test_cli_prints_the_summary_and_path(reported):
    run, stdout = reported
    assert stdout == report_summary(run) + "\n"
    assert "validation perplexity converges at 100,000 tokens seen (slope" in stdout
    assert "Level 0 validity (all, partial) converges at 200,000 tokens seen (slope" in stdout
    # wider than p_valid's CI: see test_report_md_holds_the_tables_and_commands
    assert "validity/perplexity tokens: 2.00x (95% CI 1.80-2.00; the paper reports about 2x)" in stdout
    assert "Level 0 expected validity (all, p_valid) converges at 200,000 tokens seen (slope" in stdout
    assert "p_valid/perplexity tokens: 2.00x (95% CI 2.00-2.00)" in stdout
    tolerance = "perplexity tokens to tolerance (±0.01 vs ±2%, within this run)"
    assert f"\np_valid/{tolerance}: 2.00x (95% CI " in stdout
    assert f"\nvalidity/{tolerance}: n/a (validity too noisy to tell ±0.01 (noise " in stdout
    assert str(run / "report" / "report.md") in stdout


def test_perplexity_only_run(tmp_path):
    run = make_run(tmp_path, probes=False)
    out = write_report(run, wandb=False)
    assert is_png(out / "convergence.png")
    assert (out / "tiers.png").stat().st_size > 0 and (out / "mcqa.png").stat().st_size > 0
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "No validity/perplexity ratio: no validity records." in md and "## MCQA" not in md
    assert "No p_valid/perplexity ratio: no p_valid records." in md
    assert "validity/perplexity tokens: n/a (no validity records)" in report_summary(run)
    assert "\np_valid/perplexity tokens: n/a (no p_valid records)" in report_summary(run)


@pytest.mark.parametrize(
    ("shape", "words"),
    [("flat", "shows no change beyond noise"), ("rising", "is still moving at the end of the run")],
)
def test_report_says_in_words_why_there_is_no_ratio(tmp_path, shape, words):
    run = make_run(tmp_path, validity=shape)
    md = (write_report(run, wandb=False) / "report.md").read_text(encoding="utf-8")
    assert f"No validity/perplexity ratio: validity {words}." in md
    summary = report_summary(run).splitlines()
    assert summary[0].startswith("validation perplexity converges at 100,000 tokens seen")
    assert summary[1].startswith(f"Level 0 validity (all, partial) {words} (")
    assert summary[2] == f"validity/perplexity tokens: n/a (validity {words})"
    # beside it, time to tolerance: a number within this run whatever the flat-tail verdict
    assert summary[3].startswith("validity/perplexity tokens to tolerance (±0.01 vs ±2%, within this run): ")
    assert summary[4].startswith(f"Level 0 expected validity (all, p_valid) {words} (")
    assert summary[5] == f"p_valid/perplexity tokens: n/a (p_valid {words})"
    assert summary[6].startswith("p_valid/perplexity tokens to tolerance (±0.01 vs ±2%, within this run): ")
    flat_tail = [line for line in summary if "/perplexity tokens:" in line]
    assert not any("(95% CI" in line for line in flat_tail)  # no ratio from a curve that did not converge


def test_malformed_line_is_skipped_with_a_warning_naming_file_and_line(tmp_path, capsys):
    run = make_run(tmp_path)
    lines = (run / "metrics.jsonl").read_text().splitlines()
    lines[2] = lines[2][:-5]
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["report", str(run), "--wandb=false"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning: ") and "metrics.jsonl:3: not valid JSON" in err[0]
    assert (run / "report" / "report.md").is_file()


def test_unterminated_last_line_is_a_write_in_flight(tmp_path):
    path = tmp_path / "probes.jsonl"
    path.write_text('{"a": 1}\n{"a": 2}\n{"a": ', encoding="utf-8")
    assert read_jsonl(path) == [{"a": 1}, {"a": 2}]
    path.write_text('{"a": 1}\n[1]\n', encoding="utf-8")
    with pytest.raises(BytecanaryError, match=r"probes\.jsonl:2: expected a JSON object"):
        read_jsonl(path)


def test_a_folder_without_metrics_or_records_is_one_error_naming_it(tmp_path):
    with pytest.raises(BytecanaryError) as err:
        write_report(tmp_path, wandb=False)
    assert str(err.value) == (
        f"{tmp_path}: no training run (metrics.jsonl: no such file) and no probe records (probes.jsonl); "
        f"make records with bytecanary probe {tmp_path} --out {tmp_path / 'probes.jsonl'}"
    )
    assert not (tmp_path / "report").exists()


def test_failed_write_keeps_the_previous_report_whole(reported, tmp_path, monkeypatch):
    run = shutil.copytree(reported[0], tmp_path / "run")
    before = {p.name: p.read_bytes() for p in (run / "report").iterdir()}

    def boom(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(utf8_report, "tiers_figure", boom)  # after convergence.png is written
    with pytest.raises(RuntimeError, match="disk full"):
        write_report(run, wandb=False)
    assert {p.name: p.read_bytes() for p in (run / "report").iterdir()} == before
    assert [p.name for p in run.iterdir() if p.name.startswith(".report")] == []
    shutil.rmtree(run / "report")
    with pytest.raises(RuntimeError):
        write_report(run, wandb=False)
    assert not (run / "report").exists()


@pytest.mark.slow
def test_report_logs_figures_to_the_runs_offline_wandb_run(tmp_path, monkeypatch, capsys):
    import wandb

    monkeypatch.setenv("WANDB_MODE", "offline")
    run = make_run(tmp_path)
    wandb.init(project="bytecanary", id="feedbeef", dir=str(run), mode="offline", settings={"silent": True})
    wandb.finish()
    wandb.teardown()
    write_report(run)  # default: W&B on, since run/wandb holds a run
    assert_one_sync_of_every_offline_run(capsys.readouterr().out, run, 2)
    write_report(run)  # a report again: one more folder, still one command for them all
    assert_one_sync_of_every_offline_run(capsys.readouterr().out, run, 3)
    newest = max((run / "wandb").glob("offline-run-*-feedbeef"))
    images = {p.name.split("_")[0] for p in (newest / "files" / "media" / "images" / "report").glob("*.png")}
    assert images == {"convergence", "tiers", "mcqa"}
    tables = {
        p.name.split("_")[0]
        for p in (newest / "files" / "media" / "table" / "report" / "table").glob("*.json")
    }
    assert {"convergence", "mcqa"} <= tables
    chart_dir = newest / "files" / "media" / "table" / "report" / "chart"
    charts = {p.name.split("_table")[0] for p in chart_dir.glob("*.json")}
    # line_series: the values behind the charts
    assert charts == {"ppl_vs_tokens", "validity_vs_tokens", "p_valid_vs_tokens"}
    rows = json.loads(next(chart_dir.glob("validity_vs_tokens*.json")).read_text())["data"]
    assert {r[1] for r in rows} == set(VALIDITY_KEYS)
    rows = json.loads(next(chart_dir.glob("p_valid_vs_tokens*.json")).read_text())["data"]
    assert {r[1] for r in rows} == set(P_VALID_KEYS)


def test_wandb_summary_numbers_hold_both_ratios(tmp_path):
    run = make_run(tmp_path)
    data = load_run(run)
    conv = analysis.convergence(data.metrics, data.probes)
    numbers = _scalars(conv, sections.Inputs(data.metrics, analysis.checkpoints(data.probes), conv.axis, {}))
    for name, r, curve in (
        ("validity", conv.ratio, conv.headline),
        ("p_valid", conv.ratios[P_VALID_KEY], conv.p_valid[P_VALID_KEY]),
    ):
        assert numbers[f"report/{name}_converged_tokens"] == curve.converged_at == 200_000
        assert [numbers[f"report/{name}_ppl_ratio{end}"] for end in ("", "_lo", "_hi")] == [
            r.value,
            r.lo,
            r.hi,
        ]
    # time to tolerance: p_valid's ratio with its CI; V partial is too noisy for 0.01, so absent
    assert numbers["report/ppl_tolerance_tokens"] == 100_000
    assert numbers["report/p_valid_tolerance_tokens"] == 200_000
    t = conv.tolerance_ratio(P_VALID_KEY)
    assert [numbers[f"report/p_valid_ppl_tolerance_ratio{end}"] for end in ("", "_lo", "_hi")] == [
        t.value,
        t.lo,
        t.hi,
    ]
    assert (
        "report/validity_ppl_tolerance_ratio" not in numbers
        and "report/validity_tolerance_tokens" not in numbers
    )


def test_report_states_both_ratios_when_greedy_validity_flips(tmp_path):
    """The flipping run of test_analysis: report.md and the summary give p_valid's ratio beside
    V_partial's, and say what each curve's noise is."""
    run = make_run(tmp_path, validity="flips")
    md = (write_report(run, wandb=False) / "report.md").read_text(encoding="utf-8")
    data = load_run(run)
    conv = analysis.convergence(data.metrics, data.probes)
    assert f"\n\n{conv.explain()} (the paper reports about 2x).\n" in md
    assert f"\n\n{conv.explain(P_VALID_KEY)}.\n" in md
    assert conv.ratio is not None and conv.ratios[P_VALID_KEY] is not None
    assert "| probe/level0/all/all/p_valid | 40 | converged | 200,000 | 2.00 |" in md
    partial = next(
        line for line in md.splitlines() if line.startswith("| probe/level0/all/all/partial | 40 |")
    )
    assert "| converged |" in partial and partial.endswith("| max(probe n, local scatter) |")
    r = conv.ratios[P_VALID_KEY]
    assert f"p_valid/perplexity tokens: 2.00x (95% CI {r.lo:.2f}-{r.hi:.2f})" in report_summary(run)


@pytest.mark.slow
def test_report_takes_its_tolerances_as_flags_and_refuses_one_out_of_range(tmp_path, capsys):
    run = make_run(tmp_path)  # the default, ±0.01 vs ±2%: test_cli_prints_the_summary_and_path
    assert (
        main(["report", str(run), "--wandb=false", "--ppl_tolerance", "0.05", "--ci_resamples", "200"]) == 0
    )
    assert "tokens to tolerance (±0.01 vs ±5%, within this run)" in capsys.readouterr().out
    assert main(["report", str(run), "--wandb=false", "--ppl_tolerance", "2"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: ") and "--ppl_tolerance must be in (0, 1), not 2.0" in line


def test_a_run_killed_before_its_first_validation_charts_what_it_has():
    probes = [runs.record(t, "level0", runs.level0(t)) for t in (1_000, 2_000, 4_000)]
    charts = curve_charts(analysis.convergence([], probes))
    assert sorted(charts) == ["report/chart/p_valid_vs_tokens", "report/chart/validity_vs_tokens"]
