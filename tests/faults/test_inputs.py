"""Bad input is refused with one line before any work: a cut-off or altered shard, a
misconfigured probe, an out-of-range flag, an eval-set size of 0."""

import shutil

import pytest
import yaml

from bytecanary.cli import main

from ..conftest import write_config
from .conftest import micro_config, one_error


@pytest.fixture
def broken_data(small_data, tmp_path):
    """A copy of the prepared data whose ja training shard lost its second half."""
    data = shutil.copytree(small_data, tmp_path / "data")
    shard = data / "shards" / "ja" / "train.bin"
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    return data


def test_a_truncated_shard_stops_training_and_verify(broken_data, tmp_path, capsys):
    shard = broken_data / "shards" / "ja" / "train.bin"
    config = micro_config(tmp_path / "micro.yaml", broken_data, tmp_path / "runs")
    assert main(["train", "--config", str(config), "--run.name", "t"]) == 2
    one_error(capsys.readouterr().err, str(shard), "index.json says")
    assert not (tmp_path / "runs" / "t").exists()
    prepare = ["prepare", "--config", str(write_config(tmp_path / "small.yaml")), "--out", str(broken_data)]
    assert main([*prepare, "--verify"]) == 2
    one_error(capsys.readouterr().err, str(shard), "index.json says")


def test_verify_finds_a_shard_altered_in_place(small_data, tmp_path, capsys):
    data = shutil.copytree(small_data, tmp_path / "data")
    shard = data / "shards" / "ko" / "val.bin"
    raw = bytearray(shard.read_bytes())
    raw[100] ^= 0xFF
    shard.write_bytes(bytes(raw))
    prepare = ["prepare", "--config", str(write_config(tmp_path / "small.yaml")), "--out", str(data)]
    assert main([*prepare, "--verify"]) == 2
    one_error(capsys.readouterr().err, str(shard), "differ from index.json's hash")
    shard.write_bytes(bytes(raw[:100]) + bytes([raw[100] ^ 0xFF]) + bytes(raw[101:]))
    capsys.readouterr()
    assert main([*prepare, "--verify"]) == 0
    assert "[shards] verified 8 shard files" in capsys.readouterr().out


MISSING_TASK = {"name": "t", "schema": "mmlu", "path": "json", "language": "en", "data_files": ["gone.jsonl"]}
MISCONFIGURED = {
    "level0": ({"name": "level0", "eval_sets": ["gone.json"]}, "eval_sets: gone.json: no such file"),
    "mcqa": (
        {"name": "mcqa", "embedded_per_language": 0, "nonsense_per_language": 0, "tasks": [MISSING_TASK]},
        "task 't' (json): cannot load",
    ),
}


@pytest.mark.parametrize("name", sorted(MISCONFIGURED))
def test_a_misconfigured_probe_is_one_line_before_anything_trains(small_data, tmp_path, capsys, name):
    probe, problem = MISCONFIGURED[name]
    good = {"name": "level0", "per_language": 2}
    config = micro_config(tmp_path / "micro.yaml", small_data, tmp_path / "runs", [good, probe])
    assert main(["train", "--config", str(config), "--run.name", "p"]) == 2
    one_error(capsys.readouterr().err, f"{config}: probes: {name}: ", problem)
    assert not (tmp_path / "runs" / "p").exists()


@pytest.mark.parametrize(
    "flag, message",
    [
        ("--model.optim.lr=-1", "model.optim.lr: must be > 0, got -1.0"),
        ("--data.batch_size=0", "data.batch_size: must be >= 1, got 0"),
        ("--model.arch.n_head=3", "model.arch.n_embd: must be divisible by n_head (3), got 64"),
        ("--run.keep_state_every=0", "run.keep_state_every: must be a positive number of steps, got 0"),
    ],
)
def test_an_out_of_range_flag_is_one_line_naming_it_before_the_run_folder(
    small_data, tmp_path, capsys, flag, message
):
    config = micro_config(tmp_path / "micro.yaml", small_data, tmp_path / "runs")
    assert main(["train", "--config", str(config), "--run.name", "f", flag]) == 2
    assert one_error(capsys.readouterr().err) == f"error: {message}"
    assert not (tmp_path / "runs" / "f").exists()


def test_an_eval_set_size_of_zero_is_refused(tmp_path, capsys):
    eval_cfg = {**yaml.safe_load(write_config(tmp_path / "ok.yaml").read_text())["eval"], "max_per_tier": 0}
    config = write_config(tmp_path / "small.yaml", eval=eval_cfg)
    assert main(["prepare", "--config", str(config), "--out", str(tmp_path / "data")]) == 2
    one_error(capsys.readouterr().err, str(config), "eval.max_per_tier must be at least 1, got 0")
    assert not (tmp_path / "data").exists()
