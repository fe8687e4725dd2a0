"""``data.max_repeats``: a plan that reads the training tokens more often than it allows is one
``error:`` line once the trainer is built, before any step and with no run folder written;
more than once is one ``warning:`` line with the same counts; null turns the check off."""

import json
import math
from pathlib import Path

import pytest

from bytecanary.cli import main
from bytecanary.io import read_json
from bytecanary.train.cli import make_cli

from ..conftest import MICRO

ROOT = Path(__file__).resolve().parents[2]
BATCH, SEQ = MICRO["data"]["batch_size"], MICRO["model"]["arch"]["n_positions"]


def training_tokens(data: Path) -> int:
    """The training tokens that index.json lists, counted apart from the data module."""
    index = read_json(data / "shards" / "index.json")
    return sum(entry["train"]["tokens"] for entry in index["languages"].values())


def counts(data: Path, steps: int, accumulate: int, devices: int) -> str:
    """The counts a message must give, computed here from the plan and the index."""
    planned = steps * accumulate * BATCH * SEQ * devices
    tokens = training_tokens(data)
    accumulated = f" x {accumulate} accumulated" if accumulate > 1 else ""
    plan = f"{steps:,} steps{accumulated} x {BATCH} x {SEQ} x {devices} device{'s' * (devices > 1)}"
    return (
        f"the plan trains {planned / 1e6:.2f}M tokens ({plan}), {planned / tokens:,.1f} times "
        f"{data}'s {tokens / 1e6:.2f}M training tokens"
    )


@pytest.mark.parametrize(("steps", "accumulate", "devices"), [(100_000, 1, 1), (4_000, 3, 2)])
def test_a_plan_past_the_limit_is_one_line_before_anything_is_written(
    micro, small_data, tmp_path, capsys, steps, accumulate, devices
):
    """Refused after the trainer is built (its world size counts) and before the W&B logger,
    which would write the run's id into the run folder."""
    args = [f"--trainer.max_steps={steps}", f"--trainer.accumulate_grad_batches={accumulate}"]
    args += [f"--trainer.devices={devices}", "--run.name=big", "--run.wandb=true"]
    assert main(["train", "--config", str(micro), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        f"error: data.max_repeats: {counts(small_data, steps, accumulate, devices)}, above the limit "
        "of 10; prepare more data (configs/data/paper.yaml) or raise --data.max_repeats (null: no limit)"
    )
    assert not [line for line in err if line.startswith(("warning:", "Traceback"))]
    assert not (tmp_path / "runs" / "big").exists()


def test_more_than_one_pass_within_the_limit_warns_once(micro, small_data, capsys):
    steps = 4_000  # about 1.9 passes over the small data
    cli = make_cli(["--config", str(micro), f"--trainer.max_steps={steps}"])
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: ")]
    said = counts(small_data, steps, 1, 1)
    assert warnings == [f"warning: data.max_repeats: {said}; within the limit of 10: the data repeats"]
    assert cli.trainer.max_steps == steps and cli.trainer.global_step == 0


@pytest.mark.parametrize(("limit", "warnings"), [("null", 0), ("100", 1)])
def test_the_limit_is_a_setting_and_null_turns_the_check_off(micro, capsys, limit, warnings):
    """The 47 passes refused above: a warning under a limit of 100, nothing under null."""
    cli = make_cli(["--config", str(micro), "--trainer.max_steps=100000", f"--data.max_repeats={limit}"])
    err = capsys.readouterr().err.splitlines()
    said = [line for line in err if line.startswith(("warning: ", "error: "))]
    assert len(said) == warnings and all(line.startswith("warning: data.max_repeats: ") for line in said)
    assert cli.trainer.max_steps == 100_000


def test_a_limit_of_zero_or_less_names_the_flag(micro, capsys):
    assert main(["train", "--config", str(micro), "--data.max_repeats=0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "error: data.max_repeats: must be > 0 or null (no limit), got 0.0"


def test_the_tiny_presets_1000_steps_warn_and_are_not_refused(small_data, tmp_path, capsys):
    """configs/tiny.yaml (1,000 x 16 x 256 tokens) reads the 0.54M-token small corpus 7.6 times
    (the 0.85M default corpus 4.8 times): a warning, within the default limit."""
    args = ["--config", str(ROOT / "configs" / "tiny.yaml"), f"--data.data_dir={small_data}"]
    cli = make_cli([*args, f"--run.root={tmp_path}", "--probes=[]", "--run.wandb=false"])
    planned = 1000 * 16 * 256
    assert cli.trainer.max_steps * cli.datamodule.batch_size * cli.datamodule.seq_len == planned
    (warning,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: ")]
    assert f"{planned / training_tokens(small_data):,.1f} times" in warning


def test_a_mixture_that_reads_one_language_more_often_is_judged_by_that_language(micro, small_data, capsys):
    """en at 70% of the mixture holds a tenth of the tokens: it repeats some 7 times as often as
    the average, so it is what the limit is held to, and the line names it."""
    mixture = {"en": 0.7, "ja": 0.1, "ko": 0.1, "zh": 0.1}
    index = read_json(small_data / "shards" / "index.json")
    en = index["languages"]["en"]["train"]["tokens"]
    steps = math.ceil(12 * en / 0.7 / (BATCH * SEQ))  # en read about 12 times: above 10
    args = [f"--trainer.max_steps={steps}", f"--data.mixture={json.dumps(mixture)}", "--run.name=mix"]
    assert main(["train", "--config", str(micro), *args]) == 2
    planned = steps * BATCH * SEQ
    assert planned / training_tokens(small_data) < 10  # the average alone would pass
    en_line = f"en, 70% of the mixture, is read {0.7 * planned / en:,.1f} times its {en / 1e6:.2f}M tokens"
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: data.max_repeats: {counts(small_data, steps, 1, 1)}; {en_line}, above the limit "
        "of 10; prepare more data (configs/data/paper.yaml) or raise --data.max_repeats (null: no limit)"
    )
