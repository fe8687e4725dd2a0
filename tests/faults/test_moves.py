"""Record identity survives moves and copies: a checkpoint is known by what it is (its weights
file's header hash), not where its folder lies, so probing a moved or copied run finds its
records done; records written before checkpoints had ids still count by their path."""

import json

from bytecanary.checkpoints import weights_id
from bytecanary.cli import main
from bytecanary.records import read as read_records

from .conftest import copy_run

PROBE = ["--probes", "[level0]", "--trial=true", "--wandb=false"]


def _probe(run, capsys) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["probe", str(run), *PROBE, "--out", str(run / "probes.jsonl")])
    return code, capsys.readouterr().out


def test_a_moved_or_copied_run_is_not_probed_again(trained, tmp_path, capsys):
    run = copy_run(trained, tmp_path / "a" / "run")
    assert _probe(run, capsys)[0] == 0
    first = read_records(run / "probes.jsonl")
    weights = run / "checkpoints" / "step0000004.safetensors"
    assert first[0].checkpoint_id == weights_id(weights) and weights_id(weights).startswith("sha256:")
    moved = run.rename(tmp_path / "moved")
    copied = copy_run(moved, tmp_path / "b" / "copy")
    for where in (moved, copied):
        code, out = _probe(where, capsys)
        assert code == 0 and "nothing to do" in out
        assert read_records(where / "probes.jsonl") == first  # nothing appended: each record once


def test_records_without_ids_still_count_by_path(trained, tmp_path, capsys):
    run = copy_run(trained, tmp_path / "run")
    assert _probe(run, capsys)[0] == 0
    records = run / "probes.jsonl"
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    for row in rows:  # as a record of schema 1 was written
        del row["checkpoint_id"], row["schema"]
    records.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, out = _probe(run, capsys)
    assert code == 0 and "nothing to do" in out and len(read_records(records)) == len(rows)
