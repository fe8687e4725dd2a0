"""The report's figures: drawn from fabricated runs, and still drawn when data is absent."""

from bytecanary import records
from bytecanary.io import read_jsonl
from bytecanary.report import analysis, figures

from .runs import is_png, make_run


def _draw_all(run, out):
    probes = records.read(run / "probes.jsonl")
    conv = analysis.convergence(read_jsonl(run / "metrics.jsonl"), probes)
    cps = analysis.checkpoints(probes)
    out.mkdir()
    figures.plot_convergence(conv, out / "convergence.png")
    figures.plot_tiers(cps, out / "tiers.png")
    figures.plot_mcqa(cps, out / "mcqa.png")


def test_every_figure_is_a_png(tmp_path):
    _draw_all(make_run(tmp_path), tmp_path / "fig")
    assert all(is_png(tmp_path / "fig" / f"{name}.png") for name in ("convergence", "tiers", "mcqa"))


def test_figures_without_probe_records_say_so_instead_of_failing(tmp_path):
    _draw_all(make_run(tmp_path, probes=False), tmp_path / "fig")
    assert is_png(tmp_path / "fig" / "convergence.png")  # perplexity alone still makes a figure
    assert all((tmp_path / "fig" / f"{name}.png").stat().st_size > 0 for name in ("tiers", "mcqa"))


def test_the_accuracy_panel_draws_the_keys_protocols_under_their_labels():
    assert list(figures.PROTOCOL_STYLES) == ["letter_separate", "letter_merged", "cloze", "dashed"]
    assert figures.PROTOCOL_STYLES["letter_merged"] == ("tab:blue", "--")


def test_tokens_read_at_a_glance():
    assert [figures._si(t) for t in (400, 4_000, 2_000_000, 3.5e9)] == ["400", "4k", "2M", "3.5B"]
