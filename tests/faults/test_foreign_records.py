"""Records go only to a records file: ``--out`` naming a weights file, ``metrics.jsonl``, a
text file, a folder or a link out of the run is one line before any work, every byte kept."""

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from bytecanary import records
from bytecanary.cli import main
from bytecanary.errors import BytecanaryError
from bytecanary.records import Record

from .conftest import copy_run, last_error, micro_config, one_error

PROBES = [{"name": "level0", "trial": True, "per_language": 2}]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def probes_yaml(tmp_path) -> Path:
    path = tmp_path / "probes.yaml"
    path.write_text(json.dumps({"probes": PROBES}))
    return path


def _probe(target: Path, probes_yaml: Path, *args: str) -> int:
    return main(["probe", str(target), "--config", str(probes_yaml), "--trial=true", "--wandb=false", *args])


@pytest.mark.parametrize("kind", ["weights", "metrics", "text"])
def test_out_naming_another_kind_of_file_is_refused_and_kept(kind, trained, tmp_path, probes_yaml, capsys):
    weights = trained / "checkpoints" / "step0000004.safetensors"
    foreign = {
        "weights": lambda p: shutil.copy(weights, p),
        "metrics": lambda p: shutil.copy(trained / "metrics.jsonl", p),
        "text": lambda p: p.write_text("notes from a colleague\nthe last line has no newline"),
    }
    out = tmp_path / f"{kind}.out"
    foreign[kind](out)
    before = _digest(out)
    capsys.readouterr()
    assert _probe(weights, probes_yaml, "--out", str(out)) == 2
    one_error(capsys.readouterr().err, str(out), "other than probe records")
    assert _digest(out) == before and not Path(f"{out}.claims").exists()


def test_a_folder_as_out_is_refused(trained, tmp_path, probes_yaml, capsys):
    out = tmp_path / "folder"
    out.mkdir()
    capsys.readouterr()
    assert _probe(trained / "checkpoints" / "step0000004.safetensors", probes_yaml, "--out", str(out)) == 2
    one_error(capsys.readouterr().err, str(out))
    assert list(out.iterdir()) == []


def test_a_probes_jsonl_linking_out_of_the_run_is_never_written_through(
    trained, tmp_path, probes_yaml, small_data, capsys
):
    """By ``bytecanary probe`` on the run, and by training's catch-up on resume alike."""
    run = copy_run(trained, tmp_path / "runs" / "copy")
    outside = tmp_path / "elsewhere.jsonl"
    shutil.copy(run / "probes.jsonl", outside) if (run / "probes.jsonl").exists() else outside.write_text("")
    (run / "probes.jsonl").unlink(missing_ok=True)
    (run / "probes.jsonl").symlink_to(outside)
    before = _digest(outside)
    capsys.readouterr()
    assert _probe(run, probes_yaml, "--out", str(run / "probes.jsonl")) == 2
    one_error(capsys.readouterr().err, "probes.jsonl", "outside its folder")
    assert _digest(outside) == before
    config = micro_config(tmp_path / "micro.yaml", small_data, tmp_path / "runs", PROBES)
    config_before = _digest(run / "config.yaml")
    resume = [
        "--config",
        str(config),
        "--run.name",
        "copy",
        "--run.resume",
        "true",
        "--trainer.max_steps",
        "12",
    ]
    assert main(["train", *resume]) == 2
    last_error(capsys.readouterr().err, "probes.jsonl", "outside its folder")
    assert _digest(outside) == before and _digest(run / "config.yaml") == config_before
    assert not (run / "checkpoints" / "step0000012.safetensors").exists()


def test_a_link_inside_its_folder_and_our_own_files_are_appended_to(tmp_path):
    record = Record("c", 1, 2, "level0", 1, "p", "ok", None, 0.1, 1, {"probe/level0/all/all/partial": 1.0})
    real = tmp_path / "v2.jsonl"
    link = tmp_path / "probes.jsonl"
    link.symlink_to(real.name)
    assert records.append(link, record) and records.read(real) == [record]
    torn = tmp_path / "torn.jsonl"  # killed in its first append: a record's start, no newline
    torn.write_bytes(record.to_json().encode()[:40])
    assert records.append(torn, record) and records.read(torn) == [record]
    corrupt = tmp_path / "corrupt.jsonl"  # one bad line among records is still a records file
    corrupt.write_bytes(b"{not json\n" + (record.to_json() + "\n").encode())
    other = Record(**{**record.__dict__, "probe": "level1"})
    assert records.append(corrupt, other) and records.read(corrupt) == [record, other]


def test_a_file_that_turns_foreign_under_the_lock_is_not_touched(tmp_path):
    """``append`` judges the file as it finds it under the lock, not as checked before."""
    out = tmp_path / "p.jsonl"
    out.write_text("plain text without a newline")
    before = _digest(out)
    record = Record("c", 1, 2, "level0", 1, "p", "ok", None, 0.1, 1, {"m": 1.0})
    with pytest.raises(BytecanaryError, match="other than probe records"):
        records.append(out, record)
    assert _digest(out) == before
