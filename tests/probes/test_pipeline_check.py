"""The validation stage (``Pipeline.check``): a probe's inputs are validated and its eval files
read once per data folder, across every checkpoint, in training's callback and ``bytecanary
probe`` alike."""

import shutil
from collections import Counter
from pathlib import Path
from typing import ClassVar

import pytest

from bytecanary.probe_options import ProbeOptions
from bytecanary.probes.registry import PROBES, Probe, register_probe
from bytecanary.probes.runner import run
from bytecanary.records import read as read_records

from .test_callback import _fit


class Counting(Probe):
    """Counts, per data folder, how often its inputs are validated and its eval files listed
    (which only its fingerprint does)."""

    validated: ClassVar[Counter] = Counter()
    listed: ClassVar[Counter] = Counter()

    def validate(self, data_dir):
        Counting.validated[Path(data_dir).resolve()] += 1

    def eval_files(self, data_dir):
        Counting.listed[Path(data_dir).resolve()] += 1
        return [Path(data_dir) / "shards" / "index.json"]

    def prepare(self, tokenizer, data_dir):
        return [0]

    def compute(self, model, tokenizer, prepared, rank=0, world=1):
        return 1

    def aggregate(self, prepared, payloads, context):
        return {"probe/counting/all/fires": float(sum(payloads))}


@pytest.fixture
def counting():
    """``Counting`` registered as ``counting`` for the test, with fresh counts."""
    register_probe("counting")(Counting)
    Counting.validated, Counting.listed = Counter(), Counter()
    yield Counting
    del PROBES["counting"]


def test_inputs_are_checked_once_per_data_folder_in_training_and_in_bytecanary_probe(
    tmp_path, small_data, counting
):
    other = Path(shutil.copytree(small_data, tmp_path / "other"))
    folders = {small_data.resolve(): tmp_path / "a", other.resolve(): tmp_path / "b"}
    for data, run_dir in folders.items():
        # checkpoints at steps 2 and 4, the live module at steps 1 and 3
        _fit(run_dir, data, [{"name": "counting"}], every_tokens=128)
        rows = read_records(run_dir / "probes.jsonl")
        assert [(r.step, r.status) for r in rows] == [(1, "ok"), (2, "ok"), (3, "ok"), (4, "ok")]
    once = Counter(list(folders))  # each data folder once
    assert counting.validated == once and counting.listed == once

    counting.validated, counting.listed = Counter(), Counter()
    out = tmp_path / "series.jsonl"
    series = [str(run_dir / "checkpoints") for run_dir in folders.values()]
    assert run(series, [{"name": "counting"}], ProbeOptions(out=str(out), device="cpu", wandb=False)) == 0
    weights = sorted(p for d in folders.values() for p in (d / "checkpoints").glob("*.safetensors"))
    assert len(weights) == 4
    assert sorted(Path(r.checkpoint) for r in read_records(out)) == [p.resolve() for p in weights]
    assert counting.validated == once and counting.listed == once
