"""Every YAML preset in configs/ parses, its probes included, and a wrong probe parameter
is one line naming the file, the probe and the parameter before anything is trained."""

import pydoc
from pathlib import Path

import pytest
import yaml

from bytecanary.cli import main
from bytecanary.config import load_config
from bytecanary.data.config import DataConfig

ROOT = Path(__file__).resolve().parents[1]
TRAINING = sorted((ROOT / "configs").glob("*.yaml"))
DATA = sorted((ROOT / "configs" / "data").glob("*.yaml"))
STRATEGIES = sorted((ROOT / "configs" / "strategy").glob("*.yaml"))


def parse_only(args: list[str]):
    """The training CLI up to (not including) instantiating model, data and trainer."""
    from bytecanary.train.cli import BytecanaryCLI, make_cli

    class ParseOnly(BytecanaryCLI):
        def instantiate_classes(self) -> None:
            pass

    return make_cli(args, ParseOnly)


@pytest.mark.parametrize("path", TRAINING, ids=lambda p: p.name)
def test_training_config_parses_with_its_probes(path):
    cli = parse_only(["--config", str(path)])
    declared = [p["name"] for p in yaml.safe_load(path.read_text()).get("probes") or []]
    built = [p.name for p in cli.probe_callback.probes] if cli.probe_callback else []
    assert built == declared
    assert cli.config["model"]["arch"]["n_positions"] == cli.config["data"]["seq_len"]


@pytest.mark.parametrize("path", STRATEGIES, ids=lambda p: p.name)
def test_strategy_preset_composes_with_a_model_config(path):
    """``--config <model> --config configs/strategy/<s>.yaml`` sets Lightning's strategy, which
    builds on this CPU (FSDP itself runs on GPUs only: benchmarks/gpu_check.py), and leaves
    the model config alone."""
    from lightning.pytorch.strategies import FSDPStrategy, ParallelStrategy

    from bytecanary.train.gpt import Block

    cli = parse_only(["--config", str(ROOT / "configs" / "tiny.yaml"), "--config", str(path)])
    spec = cli.config["trainer"]["strategy"]
    strategy = pydoc.locate(spec.class_path)(**vars(spec.init_args))
    assert isinstance(strategy, ParallelStrategy)
    if isinstance(strategy, FSDPStrategy):
        assert spec.init_args.auto_wrap_policy == {Block} and spec.init_args.state_dict_type == "full"
    assert cli.config["model"]["arch"]["n_layer"] == 4 and cli.config["trainer"]["precision"] == "32-true"


@pytest.mark.parametrize("path", DATA, ids=lambda p: p.name)
def test_data_config_parses(path):
    cfg = load_config(DataConfig, path)
    assert cfg.sources


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({"name": "level0", "per_langauge": 8}, "per_langauge"),
        ({"name": "level0", "per_language": "many"}, "per_language"),
        ({"name": "mcqa", "protocols": "cloze", "seeds": 1}, "protocols"),
        ({"name": "levle1"}, "level1"),
    ],
)
def test_wrong_probe_parameter_is_one_line_before_training(tmp_path, capsys, entry, expected):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"run": {"root": str(tmp_path / "runs"), "name": "x"}, "probes": [entry]}))
    code = main(["train", "--config", str(ROOT / "configs" / "tiny.yaml"), "--config", str(bad)])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert str(bad) in err and expected in err and entry["name"][:4] in err
    assert not (tmp_path / "runs").exists()  # nothing written, nothing trained


def test_the_probes_list_is_typed_by_the_training_parser(tmp_path):
    """``probes:`` entries are ``ProbeSpec``s, checked when the config is parsed (on the command
    line too), and the resolved config keeps each entry as it was written."""
    from bytecanary.errors import BytecanaryError
    from bytecanary.probes.specs import ProbeSpec

    tiny = str(ROOT / "configs" / "tiny.yaml")
    cli = parse_only(["--config", tiny])
    assert all(isinstance(p, ProbeSpec) for p in cli.config["probes"])
    dumped = yaml.safe_load(cli.parser.dump(cli.config))["probes"]
    assert dumped == yaml.safe_load(Path(tiny).read_text())["probes"]
    with pytest.raises(BytecanaryError) as caught:
        parse_only(["--config", tiny, "--probes=[{name: level1, per_langauge: 3}]"])
    assert str(caught.value) == "probes: level1: per_langauge: unknown key (did you mean 'per_language'?)"
