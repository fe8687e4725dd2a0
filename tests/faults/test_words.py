"""Errors that say what is wrong: a YAML syntax error is named with its file and line (never
"not found"), and ``report`` on a mistyped run folder is one line that creates nothing."""

import pytest
import yaml

from bytecanary.cli import main

from ..conftest import write_config
from .conftest import one_error

BROKEN = 'task: mc_x\noutput_type: multiple_choice\ndoc_to_text: "{{q}}\n'  # the quote never closes
BROKEN_AT = "line 4, column 1: found unexpected end of stream (while scanning a quoted scalar at line 3)"


def _mcqa_config(path, include_path, name: str = "mc_x"):
    task = {"name": name, "source": "lm_eval", "include_path": str(include_path), "language": "zh"}
    probe = {"name": "mcqa", "tasks": [task], "embedded_per_language": 0, "nonsense_per_language": 0}
    path.write_text(yaml.safe_dump({"probes": [probe]}), encoding="utf-8")
    return path


def test_a_config_yaml_with_a_syntax_error_names_the_file_and_the_line(trained, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("probes:\n  - {name: level0, trial: true\n", encoding="utf-8")
    ckpt = str(trained / "checkpoints" / "step0000004.safetensors")
    assert (
        main(["probe", ckpt, "--config", str(bad), "--wandb=false", "--out", str(tmp_path / "p.jsonl")]) == 2
    )
    one_error(capsys.readouterr().err, f"{bad}: invalid YAML: line 3, column 1: expected ',' or '}}'")
    data = write_config(tmp_path / "data.yaml")
    data.write_text(data.read_text() + "eval: [1\n", encoding="utf-8")
    assert main(["prepare", "--config", str(data), "--out", str(tmp_path / "d")]) == 2
    one_error(capsys.readouterr().err, str(data), "invalid YAML: line ", "while parsing a flow sequence")
    assert not (tmp_path / "d").exists() and not (tmp_path / "p.jsonl").exists()


def test_a_task_yaml_with_a_syntax_error_is_named_not_reported_as_not_found(trained, tmp_path, capsys):
    """lm-eval skips a YAML it cannot parse without a word; the probe names it and its line."""
    pytest.importorskip("lm_eval")
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "mc_x.yaml").write_text(BROKEN, encoding="utf-8")
    config = _mcqa_config(tmp_path / "probes.yaml", tasks)
    ckpt = str(trained / "checkpoints" / "step0000004.safetensors")
    args = ["probe", ckpt, "--config", str(config), "--probes", "[mcqa]", "--wandb=false"]
    assert main([*args, "--out", str(tmp_path / "p.jsonl")]) == 2
    line = one_error(capsys.readouterr().err, f"{tasks / 'mc_x.yaml'}: invalid YAML: {BROKEN_AT}", "'mc_x'")
    assert "not found in" not in line and not (tmp_path / "p.jsonl").exists()


def test_a_broken_task_yaml_beside_the_named_task_does_not_hide_it(tmp_path):
    pytest.importorskip("lm_eval")
    from bytecanary.probes.mcqa.lm_eval_tasks import LmEvalSource, _find

    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "other.yaml").write_text(BROKEN.replace("mc_x", "other"), encoding="utf-8")
    good = {"task": "mc_y", "output_type": "multiple_choice", "dataset_path": "json", "test_split": "test"}
    (tasks / "mc_y.yaml").write_text(yaml.safe_dump(good), encoding="utf-8")
    _, entry = _find(LmEvalSource("mc_y", include_path=str(tasks), language="zh"))
    assert entry.name == "mc_y"


@pytest.mark.parametrize("kind", ["missing", "a file", "no metrics"])
def test_report_on_a_mistyped_run_folder_is_one_line_and_creates_nothing(tmp_path, capsys, kind):
    runs = tmp_path / "runs"
    runs.mkdir()
    run = runs / "tiyn"
    if kind == "a file":
        run.write_text("not a run")
    if kind == "no metrics":
        run.mkdir()
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert main(["report", str(run)]) == 2
    words = {
        "missing": "no such folder",
        "a file": "not a folder",
        "no metrics": "metrics.jsonl: no such file",
    }
    one_error(capsys.readouterr().err, str(run), words[kind])
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
