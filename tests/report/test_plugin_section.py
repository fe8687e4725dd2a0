"""A probe of another package with a report section of its own, in three files (its module, its
section's module, the entry point that names the first): ``report.md``, the figures, the printed
summary and the terminal lines show what the section adds, and nothing in bytecanary names it."""

import contextlib
import io
import sys

import pytest

from bytecanary import display
from bytecanary.cli import main
from bytecanary.records import read as read_records
from bytecanary.report import sections
from bytecanary.report.summary import summary
from bytecanary.report.writer import report_summary

from ..conftest import installed_plugin
from .runs import TOKENS, is_png, make_run, record, write_jsonl

PROBE = '''
    from bytecanary.display import Display
    from bytecanary.keys import Metric
    from bytecanary.probes.registry import Probe, register_probe


    @register_probe("toy")
    class ToyProbe(Probe):
        """A log-probability per checkpoint (records are written by the test)."""

        display = Display(
            fields=("language",),
            metrics=(Metric("logprob", True, "mean"),),
            sections=("toyprobe_report:SECTION",),
        )
'''

SECTION = """
    from bytecanary.report import analysis, figures
    from bytecanary.report.sections import Section
    from bytecanary.report.tables import Column, Table

    KEY = "probe/toy/all/logprob"


    def tables(inputs):
        mine = [c for c in inputs.cps if KEY in c.metrics]
        rows = [[c.step, c.value(KEY), c.value(KEY) - mine[0].value(KEY)] for c in mine]
        columns = [Column("step", ""), Column("logprob", ".4f", KEY), Column("gain", "+.4f")]
        return [Table("toy_gain", "Toy log-probability gained since the first checkpoint", columns, rows)]


    def draw(inputs, path):
        fig, axes = figures.new_figure(1, 1, (4, 3))
        figures.plot_curve(axes[0, 0], analysis.probe_curve(inputs.cps, KEY), label="toy")
        figures.save(fig, path)


    def summary(records):
        best = max(records.values(), key=lambda r: r.metrics[KEY])
        return [f"toy: best log-probability at step {best.step}"]


    def lines(cps, axis):
        return [f"toy: {sum(KEY in c.metrics for c in cps)} checkpoints"]


    SECTION = Section(
        figure="toy",
        figure_note="toy log-probability",
        draw=draw,
        tables=tables,
        summary=summary,
        lines=lines,
    )
"""


@pytest.fixture
def toy_with_a_section(tmp_path, monkeypatch):
    """The probe's module, its section's module, and the entry point naming the first (with the
    metadata file every installed package has), installed for the test and then forgotten."""
    with installed_plugin(tmp_path / "plugin", monkeypatch, {"toyprobe": PROBE, "toyprobe_report": SECTION}):
        yield


def test_a_probe_with_its_own_section_shows_it_in_the_report(toy_with_a_section, tmp_path):
    run = make_run(tmp_path)
    logprob = {t: -5.0 + t / 1e5 for t in TOKENS[::4]}  # rising: the last checkpoint is the best
    rows = read_records(run / "probes.jsonl") + [
        record(t, "toy", {"probe/toy/all/logprob": v, "probe/toy/en/logprob": v}) for t, v in logprob.items()
    ]
    write_jsonl(run / "probes.jsonl", rows)
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        assert main(["report", str(run), "--wandb=false"]) == 0
    md = (run / "report" / "report.md").read_text()
    first = logprob[TOKENS[0]]
    table = md.split("## Toy log-probability gained since the first checkpoint\n\n", 1)[1].split("\n\n", 1)[0]
    assert table.splitlines()[0] == "| step | logprob ↑ | gain |"  # its metric declares which way is better
    assert table.splitlines()[2:] == [
        f"| {t // 4096} | {v:.4f} | {v - first:+.4f} |" for t, v in logprob.items()
    ]
    assert "`toy.png` (toy log-probability)" in md
    assert "toy per checkpoint" in md  # and its generic table, as any probe's
    assert is_png(run / "report" / "toy.png")
    assert "toy.png" in report_summary(run) and f"toy: {len(logprob)} checkpoints" in report_summary(run)
    printed = summary(run / "probes.jsonl").splitlines()
    assert f"toy: best log-probability at step {TOKENS[::4][-1] // 4096}" in printed
    assert (
        "toyprobe_report" in sys.modules and "toyprobe_report:SECTION" in display.display_of("toy").sections
    )
    assert sections.figures()[-1] == "toy"
