"""The command line: help, and the demo's smoke path."""

import csv

import pytest

from bytecanary import utf8
from bytecanary.cli import main


def test_help_lists_commands(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    assert "demo" in capsys.readouterr().out


def test_demo_writes_the_scores_it_prints(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path / "run")]) == 0
    text = (tmp_path / "run" / "utf8_examples.tsv").read_text().splitlines()
    rows = list(csv.DictReader(text, delimiter="\t"))
    assert len(rows) >= 5
    for row in rows:
        want = utf8.score(bytes.fromhex(row["bytes"]))
        assert float(row["partial"]) == want.partial and float(row["strict"]) == want.strict
    assert "U+2B740" in capsys.readouterr().out
