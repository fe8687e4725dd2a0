"""The command line: help, and the demo's smoke path."""

import csv

import pytest

from bytecanary import utf8
from bytecanary.cli import main

from .conftest import write_config


def test_help_lists_commands(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    assert "demo" in capsys.readouterr().out


def test_demo_writes_the_scores_it_prints(tmp_path, capsys):
    config = write_config(tmp_path / "small.yaml")
    args = ["demo", "--out", str(tmp_path / "run"), "--config", str(config)]
    assert main([*args, "--data", str(tmp_path / "data")]) == 0
    assert (tmp_path / "data" / "evalsets" / "level1.json").exists()
    text = (tmp_path / "run" / "utf8_examples.tsv").read_text().splitlines()
    rows = list(csv.DictReader(text, delimiter="\t"))
    assert len(rows) >= 5
    for row in rows:
        want = utf8.score(bytes.fromhex(row["bytes"]))
        assert float(row["partial"]) == want.partial and float(row["strict"]) == want.strict
    assert "U+2B740" in capsys.readouterr().out


def test_bad_config_is_one_line_on_stderr(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nmixture: {en: 1.0}\nsources: []\n")
    assert main(["prepare", "--config", str(bad), "--out", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {bad}: sources: no source for ['en']"
    assert not (tmp_path / "d").exists() or not any((tmp_path / "d").iterdir())
