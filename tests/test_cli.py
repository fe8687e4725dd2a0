"""The command line: help, and the demo's smoke path."""

import pytest
import yaml

from bytecanary.cli import main
from probes.records import read_records

from .conftest import MICRO, write_config


def test_help_lists_commands(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    assert "demo" in capsys.readouterr().out


def test_demo_prepares_trains_probes_reports_and_summarises(tmp_path, capsys):
    config = write_config(tmp_path / "small.yaml")
    micro = tmp_path / "micro.yaml"
    mcqa = {"name": "mcqa", "embedded_per_language": 4, "nonsense_per_language": 4, "generative_per_task": 2}
    probes = [{"name": "level0", "per_language": 4}, {"name": "level1", "per_language": 4}, mcqa]
    micro.write_text(yaml.safe_dump({**MICRO, "probes": probes, "run": {**MICRO["run"], "wandb": True}}))
    args = ["demo", "--out", str(tmp_path / "runs" / "demo"), "--config", str(micro), "--steps", "6"]
    args += ["--data-config", str(config), "--data", str(tmp_path / "data")]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "validation perplexity:" in printed and "Level 1 (context-guided retrieval)" in printed
    assert "MCQA (accuracy, mean over tasks)" in printed and "validity/perplexity tokens:" in printed
    run = tmp_path / "runs" / "demo"
    records = read_records(run / "probes.jsonl")
    assert {r["probe"] for r in records} == {"level0", "level1", "mcqa"}
    assert all(r["status"] == "ok" for r in records)
    for name in ("convergence.png", "tiers.png", "mcqa.png"):
        assert (run / "report" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (
        "| tokens seen" in (run / "report" / "report.md").read_text().lower()
        or "tokens" in (run / "report" / "report.md").read_text()
    )
    assert "wandb sync" in printed and list((run / "wandb").glob("offline-run-*"))
    assert main(args) == 0  # a rerun continues the finished run: nothing more to train or probe
    assert len(read_records(tmp_path / "runs" / "demo" / "probes.jsonl")) == len(records)


def test_bad_config_is_one_line_on_stderr(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nmixture: {en: 1.0}\nsources: []\n")
    assert main(["prepare", "--config", str(bad), "--out", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {bad}: sources: no source for ['en']"
    assert not (tmp_path / "d").exists() or not any((tmp_path / "d").iterdir())
