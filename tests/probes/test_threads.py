"""The probe path keeps to the CPU threads it is given (``OMP_NUM_THREADS``, ``--threads``):
jobs sharing a machine must not each take every core. Records say how many threads their
seconds were spent on."""

import os
import sys

import pytest

from bytecanary.records import read as read_records

from .. import warm


@pytest.fixture
def hf_folder(tmp_path, random_model, byte_fallback_tokenizer):
    folder = tmp_path / "model"
    random_model.save_pretrained(folder)
    byte_fallback_tokenizer.save_pretrained(folder)
    return folder


def _probe(folder, eval_dir, out, env, *extra):
    level0 = eval_dir / "evalsets" / "level0_ja.json"
    cmd = [
        sys.executable,
        "-m",
        "bytecanary.cli",
        "probe",
        str(folder),
        "--probes",
        "[level0]",
        "--trial=true",
    ]
    cmd += ["--eval_sets.level0", str(level0), "--wandb=false", "--out", str(out), *extra]
    # forked where OMP_NUM_THREADS is the warm server's (it read it on import), else spawned
    proc = warm.run(cmd, capture_output=True, text=True, env={**os.environ, **env})
    assert proc.returncode == 0, proc.stderr
    (record,) = read_records(out)
    assert record.status == "ok"
    return record


@pytest.mark.slow
def test_omp_num_threads_and_the_threads_flag_bound_the_probe(hf_folder, eval_dir, tmp_path):
    assert _probe(hf_folder, eval_dir, tmp_path / "a.jsonl", {"OMP_NUM_THREADS": "1"}).threads == 1
    flagged = _probe(hf_folder, eval_dir, tmp_path / "b.jsonl", {"OMP_NUM_THREADS": "2"}, "--threads", "1")
    assert flagged.threads == 1  # the flag wins over the environment


def test_threads_below_one_is_one_line(capsys):
    from bytecanary.cli import main

    assert main(["probe", "x", "--threads", "0"]) == 2
    assert capsys.readouterr().err == "error: probe: --threads must be >= 1, got 0\n"
