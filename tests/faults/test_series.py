"""A series goes on past a bad checkpoint: a corrupt weights file in a folder, or weights
that hold NaN, become failed records naming the cause; the later checkpoints are probed;
``bytecanary probe`` exits 1 with one error line at the end."""

import shutil

from safetensors import safe_open
from safetensors.torch import load_file, save_file

from bytecanary.cli import main
from bytecanary.records import read as read_records

PROBE = ["--probes", "[level0]", "--trial=true", "--wandb=false"]


def _series(trained, folder):
    folder.mkdir()
    for step in (4, 8):
        shutil.copy(trained / "checkpoints" / f"step{step:07d}.safetensors", folder)
    return folder / "step0000004.safetensors"


def _probe(folder, out, capsys) -> tuple[int, list[str]]:
    capsys.readouterr()
    code = main(["probe", str(folder), *PROBE, "--out", str(out)])
    return code, capsys.readouterr().err.strip().splitlines()


def test_a_corrupt_checkpoint_in_a_folder_is_a_failed_record_and_the_rest_is_probed(
    trained, tmp_path, capsys
):
    first = _series(trained, tmp_path / "ckpts")
    first.write_bytes(first.read_bytes()[:1000])
    out = tmp_path / "p.jsonl"
    code, err = _probe(tmp_path / "ckpts", out, capsys)
    assert code == 1 and "Traceback" not in "\n".join(err)
    assert err[-1] == f"error: probe: some probes failed; their records in {out} say why"
    assert "step0000004.safetensors: not a loadable weights file" in err[0] and err[0].startswith("warning: ")
    failed, ok = read_records(out)
    assert (failed.step, failed.status, ok.step, ok.status) == (4, "failed", 8, "ok")
    assert "not a loadable weights file" in failed.error and ok.metrics


def test_nan_weights_are_a_failed_record_naming_the_tensor(trained, tmp_path, capsys):
    first = _series(trained, tmp_path / "ckpts")
    with safe_open(first, "pt") as f:
        metadata = f.metadata()
    tensors = load_file(first)
    tensors["transformer.wte.weight"][0, 0] = float("nan")
    save_file(tensors, first, metadata=metadata)
    out = tmp_path / "p.jsonl"
    code, err = _probe(tmp_path / "ckpts", out, capsys)
    assert code == 1
    failed, ok = read_records(out)
    assert (
        failed.status == "failed" and failed.error == "non-finite weights: transformer.wte.weight holds NaN"
    )
    assert failed.metrics == {} and ok.status == "ok" and ok.step == 8
    assert any("non-finite weights" in line and line.startswith("warning: ") for line in err)
    rerun, _ = _probe(tmp_path / "ckpts", out, capsys)  # a failed pair is tried again, still failing
    assert rerun == 1 and [r.status for r in read_records(out)] == ["failed", "ok", "failed"]
