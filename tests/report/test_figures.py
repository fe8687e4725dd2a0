"""The report's figures: drawn from fabricated runs, and still drawn when data is absent."""

from bytecanary import records
from bytecanary.io import read_jsonl
from bytecanary.probes import utf8_report
from bytecanary.probes.mcqa import report as mcqa_report
from bytecanary.report import analysis, figures, sections

from .runs import P_VALID_KEY, is_png, make_run


def _draw_all(run, out):
    probes = records.read(run / "probes.jsonl")
    conv = analysis.convergence(read_jsonl(run / "metrics.jsonl"), probes)
    cps = analysis.checkpoints(probes)
    out.mkdir()
    figures.plot_convergence(conv, out / "convergence.png")
    inputs = sections.Inputs([], cps, conv.axis, {})
    utf8_report.draw_tiers(inputs, out / "tiers.png")
    mcqa_report.draw(inputs, out / "mcqa.png")


def test_every_figure_is_a_png(tmp_path):
    _draw_all(make_run(tmp_path), tmp_path / "fig")
    assert all(is_png(tmp_path / "fig" / f"{name}.png") for name in ("convergence", "tiers", "mcqa"))


def test_figures_without_probe_records_say_so_instead_of_failing(tmp_path):
    _draw_all(make_run(tmp_path, probes=False), tmp_path / "fig")
    assert is_png(tmp_path / "fig" / "convergence.png")  # perplexity alone still makes a figure
    assert all((tmp_path / "fig" / f"{name}.png").stat().st_size > 0 for name in ("tiers", "mcqa"))


def _conv(run):
    return analysis.convergence(read_jsonl(run / "metrics.jsonl"), records.read(run / "probes.jsonl"))


def test_the_convergence_figure_draws_p_valid_in_a_panel_of_its_own_with_its_se(tmp_path):
    conv = _conv(make_run(tmp_path, validity="flips"))
    fig = figures.convergence_figure(conv)
    ppl, greedy, p_valid = fig.axes[:3]
    assert "perplexity" in ppl.get_ylabel() and "greedy" in greedy.get_ylabel()
    assert p_valid.get_ylabel() == "expected validity p_valid (0-1)"
    curves = {line.get_label(): line for line in p_valid.lines}
    assert {f"p_valid {lang}" for lang in ("all", "en", "ja", "ko", "zh")} <= set(curves)
    want = conv.p_valid[P_VALID_KEY]
    assert list(curves["p_valid all"].get_ydata()) == want.values
    # its band: one p_valid_se either side of each point
    band = {tuple(v) for v in p_valid.collections[0].get_paths()[0].vertices.round(9)}
    for x, y, se in zip(want.tokens, want.values, want.se, strict=True):
        assert (round(x, 9), round(y - se, 9)) in band and (round(x, 9), round(y + se, 9)) in band
    # the greedy panel holds V partial and strict, no p_valid
    assert (
        sum(list(line.get_ydata()) == c.values for c in conv.validity.values() for line in greedy.lines) == 10
    )
    assert not any(line.get_label().startswith("p_valid") for line in greedy.lines)
    # the title states both ratios, and the time-to-tolerance ones
    title = " ".join(fig.get_suptitle().split())
    assert conv.explain() in title and conv.explain(P_VALID_KEY) in title
    assert figures.tolerance_title(conv) in title
    assert "tokens to tolerance (±0.01 vs ±2%) over perplexity's: validity n/a, p_valid 2.00x" in title
    # a triangle where perplexity and p_valid come within their tolerance; V partial is too noisy
    triangles = [line for ax in fig.axes[:3] for line in ax.lines if line.get_marker() == "v"]
    assert [(line.axes, list(line.get_xdata())) for line in triangles] == [
        (ppl, [100_000]),
        (p_valid, [200_000]),
    ]


def test_records_without_p_valid_say_so_in_its_panel(tmp_path):
    run = make_run(tmp_path)
    rows = records.read(run / "probes.jsonl")
    for r in rows:
        for key in [k for k in r.metrics if "p_valid" in k]:
            del r.metrics[key]
    conv = analysis.convergence(read_jsonl(run / "metrics.jsonl"), rows)
    p_valid = figures.convergence_figure(conv).axes[2]
    assert [t.get_text() for t in p_valid.texts] == ["no p_valid in the Level 0 records (probes.jsonl)"]
    assert conv.explain(P_VALID_KEY) == "No p_valid/perplexity ratio: no p_valid records"


def test_the_accuracy_panel_draws_the_keys_protocols_under_their_labels():
    assert list(mcqa_report.PROTOCOL_STYLES) == ["letter_separate", "letter_merged", "cloze", "dashed"]
    assert mcqa_report.PROTOCOL_STYLES["letter_merged"] == ("tab:blue", "--")


def test_tokens_read_at_a_glance():
    assert [figures.si(t) for t in (400, 4_000, 2_000_000, 3.5e9)] == ["400", "4k", "2M", "3.5B"]


def test_the_tiers_figure_draws_the_tier_gap_with_its_ci_band(tmp_path):
    from .runs import TOKENS, tier_gap

    cps = analysis.checkpoints(records.read(make_run(tmp_path) / "probes.jsonl"))
    fig = utf8_report.tiers_figure(cps)
    gap = next(ax for ax in fig.axes if ax.get_title().startswith("common - rare"))
    lines = {line.get_label(): line for line in gap.lines}
    assert set(lines) >= {"all", "ja", "ko", "zh"} and "en" not in lines
    want = [tier_gap(t, "ja")["probe/level0/ja/all/tier_gap_partial"] for t in TOKENS]
    assert list(lines["ja"].get_ydata()) == want
    band = {tuple(v) for c in gap.collections for v in c.get_paths()[0].vertices.round(9)}
    last = tier_gap(TOKENS[-1], "ja")
    assert (TOKENS[-1], round(last["probe/level0/ja/all/tier_gap_partial_hi"], 9)) in band
    # records without a gap keep the four tier panels alone
    bare = [
        analysis.Checkpoint(
            c.key, c.step, c.tokens_seen, {k: v for k, v in c.metrics.items() if "tier_gap" not in k}
        )
        for c in cps
    ]
    assert not any(ax.get_title().startswith("common - rare") for ax in utf8_report.tiers_figure(bare).axes)


def test_the_tier_legend_and_limits_hold_every_language(tmp_path):
    """en has no common or rare characters on the embedded corpus: the legend still names every
    tier another language has, and each panel shows all of its points."""
    cps = analysis.checkpoints(records.read(make_run(tmp_path) / "probes.jsonl"))
    gone = {f"probe/level0/en/{t}/partial" for t in ("common", "uncommon", "rare")}
    cps = [
        analysis.Checkpoint(
            c.key, c.step, c.tokens_seen, {k: v for k, v in c.metrics.items() if k not in gone}
        )
        for c in cps
    ]
    fig = utf8_report.tiers_figure(cps)
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["common", "uncommon", "rare", "unseen", "unseen_3b"]
    for ax in fig.axes[:4]:
        lo, hi = ax.get_ylim()
        assert all(lo <= y <= hi for line in ax.lines for y in line.get_ydata())
