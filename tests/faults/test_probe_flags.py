"""``bytecanary probe`` flags that cannot work are one ``error:`` line and exit 2 before any
work: a negative or zero ``--series.interval``/``--series.idle_limit``, a device this machine does not have
(``--device cuda`` without CUDA) or that does not exist (``--device bogus``), naming the
devices there are."""

import pytest
import torch

from bytecanary.cli import main

from .conftest import last_error, micro_config, one_error

BAD = {
    "interval -1": (
        ["--series.interval", "-1"],
        "probe: --series.interval must be more than 0 and at most 86400 seconds, got -1.0",
    ),
    "interval 0": (["--series.interval", "0"], "probe: --series.interval must be more than 0"),
    "idle limit 0": (["--series.idle_limit", "0"], "probe: --series.idle_limit must be more than 0"),
    "idle limit 1e12": (
        ["--series.idle_limit", "1e12"],
        "probe: --series.idle_limit must be more than 0 and at most 86400",
    ),
    "bogus device": (["--device", "bogus"], "probe: --device 'bogus' is not a device; here: cpu"),
    "cuda without CUDA": (["--device", "cuda"], "probe: --device 'cuda' is not on this machine; here: cpu"),
    "a GPU beyond the count": (
        ["--device", "cuda:3"],
        "probe: --device 'cuda:3' is not on this machine; here: cpu",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_flag_that_cannot_work_is_one_line_before_any_work(tmp_path, capsys, monkeypatch, case):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)  # this machine has no GPU, whatever it has
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    flags, message = BAD[case]
    out = tmp_path / "p.jsonl"
    assert main(["probe", "--watch", str(tmp_path / "run"), *flags, "--wandb=false", "--out", str(out)]) == 2
    one_error(capsys.readouterr().err, message)
    assert not out.exists() and not (tmp_path / "run").exists()


def test_a_device_the_machine_has_is_taken(monkeypatch):
    from bytecanary.probes.numerics import check_device

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    for device in ("cuda:1", "cuda", "cpu"):
        check_device(device)  # no error


@pytest.mark.parametrize("accelerator", ["cuda", "gpu", "bogus"])
def test_a_training_accelerator_this_machine_lacks_is_one_line(
    accelerator, tmp_path, small_data, capsys, monkeypatch
):
    from lightning.pytorch.accelerators import CUDAAccelerator

    monkeypatch.setattr(CUDAAccelerator, "is_available", staticmethod(lambda: False))  # whatever it has
    config = micro_config(tmp_path / "micro.yaml", small_data, tmp_path / "runs")
    assert main(["train", "--config", str(config), f"--trainer.accelerator={accelerator}"]) == 2
    last_error(capsys.readouterr().err, "trainer.accelerator", repr(accelerator), "this machine has: cpu")
    assert not (tmp_path / "runs").exists()
