"""probes/ and train/ install as ``bytecanary.probes`` and ``bytecanary.train``: a user's own
``train.py`` or ``probes.py`` (a nanoGPT checkout, a notebook folder) shadows nothing."""

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from bytecanary.records import read as read_records

ROOT = Path(__file__).resolve().parents[2]
BOOBY_TRAP = "raise SystemExit('the user\\'s own {name}.py was imported')\n"


def test_pyproject_installs_no_generic_top_level_name():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert {p.split(".")[0] for p in setuptools["packages"]} == {"bytecanary"}
    assert setuptools["package-dir"] == {"bytecanary.probes": "probes", "bytecanary.train": "train"}


def test_no_top_level_train_or_probes_outside_the_checkout(tmp_path):
    code = "import importlib.util as u; print(u.find_spec('train'), u.find_spec('probes'))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["None", "None"]


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["script", "module"])
def test_probe_runs_beside_a_users_train_py_and_probes_py(
    launcher, tmp_path, random_model, byte_fallback_tokenizer, eval_dir
):
    model = tmp_path / "model"
    random_model.save_pretrained(model)
    byte_fallback_tokenizer.save_pretrained(model)
    work = tmp_path / "work"
    work.mkdir()
    for name in ("train", "probes"):
        (work / f"{name}.py").write_text(BOOBY_TRAP.format(name=name))
    command = {
        "script": [str(Path(sys.executable).parent / "bytecanary")],
        "module": [sys.executable, "-m", "bytecanary.cli"],
    }[launcher]
    level0 = eval_dir / "evalsets" / "level0_ja.json"
    args = ["probe", str(model), "--probes", "[level0]", "--trial=true", "--eval_sets.level0", str(level0)]
    args += ["--wandb=false", "--out", "probes.jsonl", "--threads", "1"]
    proc = subprocess.run([*command, *args], cwd=work, capture_output=True, text=True, env=os.environ)
    assert proc.returncode == 0, proc.stderr
    assert "was imported" not in proc.stderr
    (record,) = read_records(work / "probes.jsonl")
    assert record.status == "ok" and record.metrics
