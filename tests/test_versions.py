"""Where bytecanary relies on private Lightning and transformers internals, an installed
version outside the tested range (or a private name gone) stops it with one line naming the
package, its version, the range and what relies on it; the installed versions pass, and
pyproject.toml pins the same ranges."""

import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint, ThroughputMonitor
from packaging.requirements import Requirement
from transformers import GPT2Config

from bytecanary import versions
from bytecanary.errors import BytecanaryError
from bytecanary.probes import engine
from bytecanary.train.checkpointing import ScheduledCheckpoint
from bytecanary.train.throughput import PerfMonitor

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def installed_as(monkeypatch):
    """Pretend ``package`` is installed at ``version``; the engine's once-per-process check is
    forgotten before and after, so it runs again."""

    def pretend(package: str, version: str | None) -> None:
        real = versions.installed
        monkeypatch.setattr(versions, "installed", lambda p: version if p == package else real(p))

    engine._require_transformers.cache_clear()
    yield pretend
    engine._require_transformers.cache_clear()


def one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text
    return text


def test_pyproject_pins_the_tested_ranges():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = {r.name: r.specifier for r in map(Requirement, deps)}
    assert {name: pins[name] for name in versions.TESTED} == {
        name: Requirement(f"{name}{spec}").specifier for name, spec in versions.TESTED.items()
    }


def test_the_installed_versions_pass(tmp_path):
    for package, tested in versions.TESTED.items():
        versions.require(package, tested, "this test")
    ScheduledCheckpoint(tmp_path, 4, None)
    PerfMonitor()


@pytest.mark.parametrize(
    ("version", "ok"),
    [("2.5.0", True), ("2.6.6", True), ("2.6.99.dev0", True), ("2.4.9", False), ("2.7.0", False),
     ("2.7.0rc1", False), ("not-a-version", False), (None, False)],
)  # fmt: skip
def test_in_range(version, ok):
    assert versions.in_range(version, ">=2.5,<2.7") is ok


def test_scheduled_checkpoint_refuses_a_lightning_outside_the_range(installed_as, tmp_path):
    installed_as("lightning", "2.7.0")
    with pytest.raises(BytecanaryError) as err:
        ScheduledCheckpoint(tmp_path, 4, None)
    assert one_line(err) == (
        "lightning 2.7.0 is outside lightning>=2.5,<2.7, the range tested for ScheduledCheckpoint's "
        "overrides of ModelCheckpoint internals: pip install 'lightning>=2.5,<2.7'"
    )


def test_perf_monitor_refuses_a_lightning_outside_the_range(installed_as):
    installed_as("lightning", "2.4.0")
    with pytest.raises(BytecanaryError) as err:
        PerfMonitor()
    assert one_line(err).startswith("lightning 2.4.0 is outside lightning>=2.5,<2.7, the range tested for ")
    assert "PerfMonitor's override of ThroughputMonitor internals" in str(err.value)


def test_the_kv_cache_copy_refuses_a_transformers_outside_the_range(installed_as):
    installed_as("transformers", "5.25.0")
    with pytest.raises(BytecanaryError) as err:
        engine.per_sample_cache(None, None, torch.zeros(1, dtype=torch.long), 8)
    assert one_line(err) == (
        "transformers 5.25.0 is outside transformers>=5.0,<5.25, the range tested for the probes' "
        "KV-cache copy into StaticCache layers: pip install 'transformers>=5.0,<5.25'"
    )


def test_a_missing_package_is_named(installed_as, tmp_path):
    installed_as("lightning", None)
    with pytest.raises(BytecanaryError, match=r"^lightning \(not installed\) is outside"):
        ScheduledCheckpoint(tmp_path, 4, None)


def test_a_private_name_gone_is_one_line_not_an_attribute_error(monkeypatch, tmp_path):
    """A renamed method ScheduledCheckpoint overrides would never be called: refused up front."""
    monkeypatch.delattr(ModelCheckpoint, "_link_checkpoint")
    with pytest.raises(BytecanaryError) as err:
        ScheduledCheckpoint(tmp_path, 4, None)
    have = versions.installed("lightning")
    assert one_line(err) == (
        f"lightning {have} has no ModelCheckpoint._link_checkpoint, needed by ScheduledCheckpoint's "
        "overrides of ModelCheckpoint internals (tested with lightning>=2.5,<2.7)"
    )
    monkeypatch.delattr(ThroughputMonitor, "_compute")
    with pytest.raises(BytecanaryError, match=r"has no ThroughputMonitor\._compute, needed by PerfMonitor"):
        PerfMonitor()


def test_a_cache_without_layers_is_one_line():
    model = SimpleNamespace(config=GPT2Config(n_layer=1, n_head=2, n_embd=8, n_positions=16, vocab_size=16))
    with pytest.raises(BytecanaryError) as err:
        engine.per_sample_cache(model, SimpleNamespace(), torch.zeros(1, dtype=torch.long), 8)
    assert one_line(err).startswith(
        f"transformers {versions.installed('transformers')} has no SimpleNamespace.layers"
    )


def test_the_train_command_says_it_in_one_line(installed_as, micro, capsys):
    from bytecanary.cli import main

    installed_as("lightning", "2.7.0")
    assert main(["train", "--config", str(micro), "--run.name", "v", "--trainer.max_steps", "1"]) == 2
    err = capsys.readouterr().err
    assert err.endswith(
        "error: lightning 2.7.0 is outside lightning>=2.5,<2.7, the range tested for ScheduledCheckpoint's "
        "overrides of ModelCheckpoint internals: pip install 'lightning>=2.5,<2.7'\n"
    )
    assert err.count("\n") == 1
