"""``probe --out`` paths a user did not mean for records: a claims file linking out of its
folder, a JSON document without a final newline (``json.dump``'s), a path ending in a slash.
Each is one line naming the path, exit 2, before any model loads, every byte kept."""

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from bytecanary.cli import main
from bytecanary.records import Record

from .conftest import digests, one_error

RECORD = Record("c", 8, 32768, "level0", 1, "p", "ok", None, 0.1, 1, {"probe/level0/all/all/partial": 1.0})


def _probe(trained: Path, out: str | Path) -> int:
    weights = trained / "checkpoints" / "step0000004.safetensors"
    return main(
        ["probe", str(weights), "--probes", "[level0]", "--trial=true", "--wandb=false", "--out", str(out)]
    )


def test_a_claims_file_linking_out_of_its_folder_is_never_written_through(trained, tmp_path, capsys):
    out = tmp_path / "run" / "p.jsonl"
    out.parent.mkdir()
    outside = tmp_path / "elsewhere" / "notes.txt"
    outside.parent.mkdir()
    outside.write_text("a colleague's notes\nthe last line has no newline")
    Path(f"{out}.claims").symlink_to(outside)
    before = digests(outside.parent)
    capsys.readouterr()
    assert _probe(trained, out) == 2
    one_error(capsys.readouterr().err, f"{out}.claims", "outside its folder")
    assert digests(outside.parent) == before and not out.exists()


@pytest.mark.parametrize(
    "saved", [{"checkpoint": "runs/a/step8", "step": 8, "val/loss": 2.41}, asdict(RECORD)]
)
def test_a_json_document_without_a_final_newline_is_no_records_file(saved, trained, tmp_path, capsys):
    """Even one record's fields, saved whole with ``json.dump``: no append ever leaves that."""
    out = tmp_path / "best.json"
    out.write_text(json.dumps(saved))
    before = digests(tmp_path)
    capsys.readouterr()
    assert _probe(trained, out) == 2
    one_error(capsys.readouterr().err, str(out), "other than probe records")
    assert digests(tmp_path) == before and not Path(f"{out}.claims").exists()


def test_an_out_ending_in_a_slash_names_a_folder_and_is_refused(trained, tmp_path, capsys):
    out = f"{tmp_path / 'new'}/"
    capsys.readouterr()
    assert _probe(trained, out) == 2
    one_error(capsys.readouterr().err, out, "folder")
    assert list(tmp_path.iterdir()) == []
