"""``bytecanary probe`` on existing checkpoints: every PATH kind, idempotent reruns that
redo exactly the probes whose version or fingerprint changed, W&B."""

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
import torch
import yaml
from transformers import GPT2Config, GPT2LMHeadModel

from bytecanary.cli import main
from bytecanary.probe_options import ProbeOptions
from bytecanary.probes import level0, level1
from bytecanary.probes.ppl import heldout
from bytecanary.probes.runner import resolve, run, watch
from bytecanary.records import read as read_records
from bytecanary.report.writer import probe_ratio_lines
from bytecanary.train.export import export

from .. import sharing, warm
from ..conftest import MICRO
from ..faults.conftest import bytecanary
from .conftest import LEVEL0


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory, small_data) -> Path:
    """A micro run of 8 steps, trained in-process: the tests read its checkpoints, none looks
    at the training process."""
    from bytecanary.train.cli import main as train_main

    def build(root: Path) -> Path:
        cfg = {
            **MICRO,
            "data": {**MICRO["data"], "data_dir": str(small_data)},
            "run": {**MICRO["run"], "root": str(root)},
        }
        path = root / "micro.yaml"
        path.write_text(yaml.safe_dump(cfg))
        assert train_main(["--config", str(path), "--run.name", "m", "--trainer.max_steps", "8"]) == 0
        return root / "m"

    return sharing.built_once(tmp_path_factory, "probe_runs", build)


def _probe(*args):
    return main(["probe", *args, "--trial=true", "--wandb=false"])


@pytest.mark.slow
def test_folder_of_checkpoints_in_step_order_then_rerun_is_a_no_op(trained_run, tmp_path, capsys):
    from bytecanary.report.summary import summary

    out = tmp_path / "p.jsonl"
    assert _probe(str(trained_run / "checkpoints"), "--out", str(out)) == 0
    rows = read_records(out)
    assert [(r.step, r.probe) for r in rows] == [(4, "level0"), (4, "level1"), (8, "level0"), (8, "level1")]
    assert all(r.status == "ok" and r.tokens_seen == r.step * 8 * 32 for r in rows)
    versions = {"level0": 4, "level1": 3}  # a version changes only with what a probe reports
    assert all(r.version == versions[r.probe] and len(r.fingerprint) == 12 for r in rows)
    weights = [str((trained_run / "checkpoints" / f"step{s:07d}.safetensors").resolve()) for s in (4, 8)]
    assert [r.checkpoint for r in rows] == [weights[0], weights[0], weights[1], weights[1]]
    text = summary(out)
    assert "Level 0 (context-free validity)" in text and "step0000008.safetensors" in text
    last = next(r for r in rows if r.step == 8 and r.probe == "level0").metrics
    tiers = text[text.index("partial by tier, step 8") :].splitlines()
    ja = next(line for line in tiers if line.startswith("ja ")).split()[1:]
    assert ja[0] == f"{last['probe/level0/ja/common/partial']:.3f}" and len(ja) == 5
    # a training run's checkpoints: under the tables, the ratios to its perplexity as the report gives them
    printed = capsys.readouterr().out
    ratios = probe_ratio_lines(trained_run, out)
    assert "\n".join(ratios) in printed and printed.index(ratios[0]) > printed.index("partial by tier")
    assert any(
        x.startswith("validity/perplexity tokens to tolerance (±0.01 vs ±2%, within this run): n/a (")
        for x in ratios
    )
    assert ratios[0].startswith("validation perplexity ")
    before = out.read_bytes()
    assert _probe(str(trained_run), "--out", str(out)) == 0  # the run folder works too
    assert "nothing to do" in capsys.readouterr().out and out.read_bytes() == before


@pytest.fixture
def hf_model(byte_fallback_tokenizer, eval_dir, tmp_path):
    """A tiny HF model folder whose bytecanary.json names its data folder (a copy of the eval
    sets, so a test may edit them)."""
    tok = byte_fallback_tokenizer
    cfg = GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=32, n_layer=1, n_head=2)
    torch.manual_seed(0)
    model_dir = tmp_path / "model"
    GPT2LMHeadModel(cfg).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    data = shutil.copytree(eval_dir, tmp_path / "data")
    (model_dir / "bytecanary.json").write_text(json.dumps({"step": 5, "data_dir": str(data)}))
    return model_dir


SPECS = [{"name": "level0", "per_language": 2}, {"name": "level1", "per_language": 2}]


def _run(model_dir, out, specs=SPECS):
    before = len(read_records(out))
    assert (
        run([str(model_dir)], specs, ProbeOptions(out=str(out), trial=True, device="cpu", wandb=False)) == 0
    )
    return [(r.probe, r.version, r.fingerprint) for r in read_records(out)[before:]]


def test_same_version_and_parameters_is_nothing_to_do(hf_model, tmp_path, capsys):
    out = tmp_path / "p.jsonl"
    first = _run(hf_model, out)
    assert [p for p, _, _ in first] == ["level0", "level1"] and read_records(out)[0].step == 5
    capsys.readouterr()
    assert _run(hf_model, out) == []
    assert "nothing to do" in capsys.readouterr().out


def test_a_bumped_version_redoes_that_probe_only(hf_model, tmp_path, monkeypatch):
    out = tmp_path / "p.jsonl"
    level1_params = dict((p, params) for p, _, params in _run(hf_model, out))["level1"]
    bumped = level1.Level1Probe.version + 1
    monkeypatch.setattr(level1.Level1Probe, "version", bumped)
    assert _run(hf_model, out) == [("level1", bumped, level1_params)]
    assert _run(hf_model, out) == []


def test_a_changed_parameter_or_eval_set_redoes_that_probe_only(hf_model, tmp_path):
    out = tmp_path / "p.jsonl"
    ((_, _, params0), _) = _run(hf_model, out)
    changed = [{"name": "level0", "per_language": 1}, SPECS[1]]
    ((probe, version, params),) = _run(hf_model, out, changed)
    assert (probe, version) == ("level0", level0.Level0Probe.version) and params != params0
    level1_set = tmp_path / "data" / "evalsets" / "level1.json"  # the data folder bytecanary.json names
    level1_set.write_text(json.dumps(json.loads(level1_set.read_text())[:2]))
    assert [p for p, _, _ in _run(hf_model, out, changed)] == ["level1"]


@pytest.mark.slow
def test_exported_model_and_revision_series(trained_run, small_data, tmp_path):
    hf = export(trained_run / "checkpoints" / "step0000008.safetensors", tmp_path / "hf")
    out = tmp_path / "p.jsonl"
    assert _probe(str(hf), "--probes", "[level0]", "--out", str(out)) == 0
    (row,) = read_records(out)
    assert row.step == 8 and row.tokens_seen == 8 * 8 * 32 and row.checkpoint == str(hf.resolve())
    # a Pythia-style series: a model id loaded at each revision, from the hub cache's layout
    # (a snapshot per commit, refs/<branch> naming it), offline, as a user with a cache has it
    repo = Path(os.environ["HF_HUB_CACHE"]) / "models--bc--tiny"  # the session's (tests/conftest.py)
    sources = ("step0000004.safetensors", "step0000008.safetensors", "step0000008.ckpt")  # bf16, bf16, fp32
    revisions = {f"step{i}000": name for i, name in enumerate(sources, 1)}
    for i, (rev, name) in enumerate(revisions.items()):
        commit = f"{i:040d}"
        export(trained_run / "checkpoints" / name, repo / "snapshots" / commit)
        (repo / "snapshots" / commit / "bytecanary.json").unlink()  # a hub model has none
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / rev).write_text(commit, encoding="utf-8")
    series = tmp_path / "pythia" / "probes.jsonl"
    level0 = str(small_data / "evalsets" / "level0_zh.json")
    listed = f"[{', '.join(revisions)}]"
    done = bytecanary("probe", "bc/tiny", "--revision", listed, "--probes", "[ppl, level0]",
                      "--eval_sets.level0", level0, "--eval_sets.ppl", str(small_data), "--trial=true",
                      "--tokens_per_step", "2097152", "--wandb=false", "--out", str(series))  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    rows = read_records(series)
    level0_rows = [r for r in rows if r.probe == "level0"]
    assert [r.checkpoint for r in level0_rows] == [f"bc/tiny@{rev}" for rev in revisions]
    assert [r.step for r in level0_rows] == [1000, 2000, 3000]  # from the revision's name
    assert [r.tokens_seen for r in level0_rows] == [s * 2097152 for s in (1000, 2000, 3000)]
    assert level0_rows[0].metrics != level0_rows[1].metrics  # each revision's own weights
    ppl = {r.step: r.metrics[heldout()] for r in rows if r.probe == "ppl"}
    assert sorted(ppl) == [1000, 2000, 3000] and ppl[1000] > ppl[3000]  # the micro run learns
    # the records alone report: the held-out perplexity is the curve the ratios are taken against
    report_dir = series.parent / "report"
    assert main(["report", str(series)]) == 0
    written = sorted(p.name for p in report_dir.iterdir())
    assert written == ["convergence.png", "mcqa.png", "report.md", "tiers.png"]
    text = (report_dir / "report.md").read_text(encoding="utf-8")
    assert "held-out perplexity" in text and "validity/perplexity" in text
    for step, value in ppl.items():  # the curve's points are the records' values, at step x N
        assert f"{step * 2097152:,}" in text and f"{value:.{3}f}" in text


def test_gpt2_byte_level_model_from_any_folder(gpt2_tokenizer, eval_dir, tmp_path):
    tok = gpt2_tokenizer
    cfg = GPT2Config(
        vocab_size=len(tok), n_positions=64, n_embd=32, n_layer=1, n_head=2, eos_token_id=tok.eos_token_id
    )
    torch.manual_seed(0)
    model_dir = tmp_path / "gpt2"
    GPT2LMHeadModel(cfg).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    out = tmp_path / "p.jsonl"
    level0 = eval_dir / "evalsets" / "level0_zh.json"
    level1 = eval_dir / "evalsets" / "level1.json"
    args = [
        str(model_dir),
        "--eval_sets.level0",
        str(level0),
        "--eval_sets.level1",
        str(level1),
        "--out",
        str(out),
    ]
    assert main(["probe", *args, "--wandb=false"]) == 0
    rows = read_records(out)
    assert [r.status for r in rows] == ["ok", "ok"]
    n = sum(len(c.encode()) for c, _ in LEVEL0["zh"])
    assert rows[0].metrics["probe/level0/all/all/n"] == n
    assert rows[0].step is None


def test_a_path_that_is_not_a_checkpoint_is_one_clear_error(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("hello")
    assert _probe(str(tmp_path / "notes.txt")) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "not a checkpoint" in err and len(err.splitlines()) == 1


def test_a_misspelt_parameter_in_a_config_is_one_line_before_any_model_loads(tmp_path, capsys):
    config = tmp_path / "probes.yaml"
    config.write_text(yaml.safe_dump({"probes": [{"name": "level0", "per_langauge": 2}]}))
    assert _probe(str(tmp_path / "missing.ckpt"), "--config", str(config)) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {config}: probes: level0: per_langauge: unknown key (did you mean 'per_language'?)"


@pytest.mark.slow
def test_watch_yields_each_new_checkpoint_once(trained_run, tmp_path):
    folder = tmp_path / "ckpts"
    folder.mkdir()
    looks = watch(folder, interval=0)
    assert next(looks) == []
    shutil.copy(trained_run / "checkpoints" / "step0000004.safetensors", folder)
    shutil.copy(trained_run / "checkpoints" / "last.ckpt", folder)
    assert [t.step_hint for t in next(looks)] == [4]
    shutil.copy(trained_run / "checkpoints" / "step0000008.safetensors", folder)
    shutil.copy(
        trained_run / "checkpoints" / "step0000008.ckpt", folder
    )  # the full state of a step with weights
    assert [Path(t.path).name for t in next(looks)] == ["step0000008.safetensors"]
    assert next(looks) == []
    assert [t.step_hint for t in resolve([str(folder)])] == [4, 8]


@pytest.mark.slow
def test_cli_writes_a_wandb_offline_run(trained_run, tmp_path):
    out = tmp_path / "p.jsonl"
    proc = warm.run(
        [
            sys.executable,
            "-m",
            "bytecanary.cli",
            "probe",
            str(trained_run / "checkpoints" / "step0000004.safetensors"),
            "--trial=true",
            "--probes",
            "[level0]",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "wandb sync" in proc.stdout
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    from ..train.test_training import _wandb_history

    history = _wandb_history(runs[0])
    assert any(h.get("tokens_seen") == 4 * 8 * 32 and "probe/level0/all/all/partial" in h for h in history)
    assert json.loads(out.read_text().splitlines()[0])["status"] == "ok"


@pytest.mark.slow
def test_probe_parameters_from_a_config(trained_run, tmp_path, capsys):
    mcqa = {"name": "mcqa", "embedded_per_language": 0, "nonsense_per_language": 3, "languages": ["en"],
            "protocols": ["letter_separate", "dashed"], "generative_per_task": 2}  # fmt: skip
    config = tmp_path / "probes.yaml"
    config.write_text(yaml.safe_dump({"probes": [{"name": "level0", "per_language": 2}, mcqa]}))
    out = tmp_path / "p.jsonl"
    ckpt = str(trained_run / "checkpoints" / "step0000008.ckpt")  # a full state probes too
    assert _probe(ckpt, "--config", str(config), "--probes", "[mcqa]", "--out", str(out)) == 0
    (row,) = read_records(out)
    assert row.probe == "mcqa" and row.metrics["probe/mcqa/nonsenseqa_en/n"] == 3
    assert "probe/mcqa/nonsenseqa_en/dashed/acc" in row.metrics
    assert not any("letter_merged" in k for k in row.metrics)
    capsys.readouterr()
    assert _probe(ckpt, "--config", str(config), "--probes", "[level1]", "--out", str(out)) == 2
    assert capsys.readouterr().err.strip() == f"error: {config}: probes: no entry for level1"
    config.write_text("probes: {name: level0}\n")
    assert _probe(ckpt, "--config", str(config), "--out", str(out)) == 2
    assert f"error: {config}: probes: expected list, got" in capsys.readouterr().err
