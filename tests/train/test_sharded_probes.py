"""Probes between checkpoints read the live module, which FSDP (and any sharding strategy)
splits over the ranks: the training CLI refuses them before anything is built, and the
callback refuses them again if a sharded trainer reaches it anyway."""

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from bytecanary.cli import main
from bytecanary.errors import BytecanaryError

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "tiny.yaml"
FSDP = ROOT / "configs" / "strategy" / "fsdp.yaml"
DDP = ROOT / "configs" / "strategy" / "ddp.yaml"
REFUSED = (
    "run.probe_every_tokens: probes between checkpoints run on the live module, which {} shards; "
    "probe at checkpoints instead (run.checkpoint_every, a probe's cadence) or train with DDP"
)


def parse_only(args: list[str]):
    """The training CLI up to (not including) instantiating model, data and trainer."""
    from bytecanary.train.cli import BytecanaryCLI, make_cli

    class ParseOnly(BytecanaryCLI):
        def instantiate_classes(self) -> None:
            pass

    return make_cli(args, ParseOnly)


@pytest.mark.parametrize(
    ("strategy", "name"),
    [
        (["--trainer.strategy=fsdp"], "FSDPStrategy"),
        (["--trainer.strategy=FSDP_cpu_offload"], "FSDPStrategy"),  # Lightning lower-cases names
        (["--trainer.strategy=deepspeed_stage_2"], "DeepSpeedStrategy"),
        (["--config", str(FSDP)], "FSDPStrategy"),
    ],
    ids=["fsdp", "fsdp_cpu_offload", "deepspeed_stage_2", "fsdp.yaml"],
)
def test_live_probes_under_a_sharding_strategy_are_one_line_before_training(tmp_path, capsys, strategy, name):
    runs = tmp_path / "runs"
    args = ["train", "--config", str(TINY), *strategy, "--run.probe_every_tokens=4096", f"--run.root={runs}"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.endswith(REFUSED.format(name))
    assert not runs.exists()  # nothing written, nothing built


@pytest.mark.parametrize(
    ("args", "fires"),
    [
        (["--config", str(DDP), "--run.probe_every_tokens=4096"], 4096),  # DDP ranks hold the whole module
        (["--config", str(FSDP)], None),  # probes at checkpoints read the whole weights file
        (["--config", str(FSDP), "--run.probe_every_tokens=4096", "--run.probe_in_loop=false"], "none"),
        (["--config", str(FSDP), "--run.probe_every_tokens=4096", "--probes=[]"], "none"),
    ],
    ids=["ddp", "fsdp-at-checkpoints", "fsdp-sidecar", "fsdp-no-probes"],
)
def test_what_a_sharded_run_can_probe_is_not_refused(tmp_path, args, fires):
    """``fires``: the callback's ``every_tokens``, or "none" where training fires no probe."""
    cli = parse_only(["--config", str(TINY), *args, f"--run.root={tmp_path / 'runs'}"])
    callback = cli.probe_callback
    assert (callback.every_tokens if callback else "none") == fires


def test_the_callback_refuses_a_sharded_live_module():
    from lightning.pytorch.strategies import FSDPStrategy

    from bytecanary.probes.callback import ProbeCallback

    callback = ProbeCallback([{"name": "level0", "trial": True}], every_tokens=4096)
    trainer = SimpleNamespace(strategy=FSDPStrategy(), global_step=3, loggers=[])  # builds without CUDA
    module = torch.nn.Linear(2, 2).train()
    with pytest.raises(BytecanaryError) as err:
        callback.fire(trainer, module, None)  # no weights file: a fire between checkpoints
    assert str(err.value) == REFUSED.format("FSDPStrategy")
    assert module.training  # refused before the module was touched
