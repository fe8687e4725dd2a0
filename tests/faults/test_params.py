"""Out-of-range probe parameters are one line at parse time, naming the file, the probe and
the field, before any model loads or any record is written; never a failed record with exit
0, nor a silent fallback to greedy decoding."""

import pytest
import yaml

from bytecanary.cli import main

from .conftest import one_error

BLOCKER = "blocker"  # a regular file that a records path would need as a folder


@pytest.mark.parametrize(
    ("entry", "field", "problem"),
    [
        ({"name": "level0", "batch_size": 0}, "batch_size", "must be >= 1, got 0"),
        ({"name": "level0", "max_new_tokens": -3}, "max_new_tokens", "must be >= 1, got -3"),
        ({"name": "level0", "top_p": 7}, "top_p", "must be a number in (0, 1], got 7"),
        ({"name": "level1", "temperature": -1}, "temperature", "must be a number in [0, inf], got -1"),
        ({"name": "mcqa", "top_k": -2}, "top_k", "must be >= 0, got -2"),
        ({"name": "mcqa", "nonsense_per_language": -1}, "nonsense_per_language", "must be >= 0"),
        ({"name": "level0", "cadence": {"log_base": float("nan")}}, "log_base", "must be a number > 1"),
        ({"name": "level0", "records": f"{BLOCKER}/x.jsonl"}, "records", "is a file, not a folder"),
    ],
)
def test_a_bad_parameter_is_one_line_before_any_work(
    trained, tmp_path, capsys, monkeypatch, entry, field, problem
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / BLOCKER).write_text("")
    config = tmp_path / "probes.yaml"
    config.write_text(yaml.safe_dump({"probes": [entry]}))
    out = tmp_path / "p.jsonl"
    args = [
        "probe",
        str(trained / "checkpoints"),
        "--config",
        str(config),
        "--wandb=false",
        "--out",
        str(out),
    ]
    assert main(args) == 2
    line = one_error(capsys.readouterr().err, f"{config}: probes: {entry['name']}", field, problem)
    assert "usage" not in line and not out.exists()
