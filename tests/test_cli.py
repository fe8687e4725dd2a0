"""The command line: help from the functions' docstrings, one-line errors, the flags reaching
the code they name, and the demo's smoke path."""

import re
import shutil
import sys
import types

import pytest
import yaml

from bytecanary import cli
from bytecanary.cli import main
from bytecanary.io import read_jsonl
from bytecanary.probe_options import DEFAULT_LEASE, ProbeOptions, ProbeSpec
from bytecanary.records import read as read_records
from bytecanary.report.summary import add_series

from .conftest import MICRO, write_config
from .report.runs import assert_one_sync_of_every_offline_run


def test_help_lists_commands(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ("prepare", "train", "export", "probe", "demo", "report"))


def test_probe_help_lists_the_flags_with_their_docstring_help(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["probe", "--help"])
    assert exit_info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())  # help wraps lines
    names = ["--probes", "--config", "--trial {true,false}", "--eval_sets EVAL_SETS", "--eval_sets.NAME="]
    names += [
        "--out",
        "--wandb {true,false}",
        "--wandb_project",
        "--wandb_group",
        "--tokens_per_step",
        "--watch",
        "--series.interval",
        "--revision",
    ]
    names += ["--device", "--workers.name", "--workers.lease", "PATHS"]
    assert all(flag in out for flag in names), [f for f in names if f not in out]
    assert "probe each checkpoint of this run folder (or its checkpoints/)" in out  # the docstring
    assert "default: probes.jsonl" in out and "default: 30.0" in out  # from the signature


def test_unknown_flag_is_one_line_and_exit_2(capsys):
    assert main(["probe", "x.ckpt", "--bogus"]) == 2
    captured = capsys.readouterr()
    assert captured.err == "error: unrecognized arguments: --bogus\n" and captured.out == ""
    assert main(["probe", "x.ckpt", "--series.interval", "soon"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "interval" in err and len(err.splitlines()) == 1


def test_probe_flags_reach_the_runner(monkeypatch, tmp_path, capsys):
    """The runner is replaced (no model is loaded); every flag lands in its job."""
    from bytecanary.probes.runner import training_run

    calls = []
    runner = types.ModuleType("bytecanary.probes.runner")
    runner.training_run = training_run
    runner.run = lambda *args, **kwargs: calls.append((args, kwargs)) or 0
    monkeypatch.setitem(sys.modules, "bytecanary.probes.runner", runner)
    out = tmp_path / "p.jsonl"
    args = ["probe", "org/model", "--probes", "[level0, {name: mcqa, trial: true}]", "--trial=true"]
    args += ["--eval_sets.level1", "l1.json", "--out", str(out), "--wandb=false"]
    args += ["--revision", "[step1, step2]", "--device", "cpu"]
    assert main(args) == 0
    [(positional, kwargs)] = calls
    paths, specs, options = positional
    assert (paths, specs, kwargs) == (
        ["org/model"],
        [{"name": "level0"}, {"name": "mcqa", "trial": True}],
        {"finish": add_series},
    )
    assert options == ProbeOptions(
        probes=[ProbeSpec("level0"), ProbeSpec({"name": "mcqa", "trial": True})],
        out=str(out),
        trial=True,
        eval_sets={"level1": "l1.json"},
        wandb=False,
        revision=["step1", "step2"],
        device="cpu",
    )
    assert (options.project, options.lease) == (None, DEFAULT_LEASE)
    assert capsys.readouterr().out == f"\nrecords: {out}\n"  # no records yet: an empty summary
    assert main(["probe", "m", "--wandb_project", "mine", "--watch", "ckpts", "--series.interval", "2"]) == 0
    options = calls[-1][0][2]
    assert (options.project, options.watch, options.series.interval, options.trial) == (
        "mine",
        "ckpts",
        2.0,
        False,
    )
    assert (options.wandb_group, options.tokens_per_step) == (None, None)
    assert main(["probe", "m", "--wandb_group", "pythia-vs-ours", "--tokens_per_step", "2097152"]) == 0
    options = calls[-1][0][2]
    assert (options.wandb_group, options.tokens_per_step) == ("pythia-vs-ours", 2097152)


@pytest.mark.parametrize(
    "old",
    [["--trial"], ["--level0-set", "a.json"], ["--no-wandb"], ["--idle-limit", "5"], ["--worker", "w1"]],
)
def test_one_spelling_per_flag(old, capsys):
    """The previous release's spellings are refused like any unknown flag."""
    assert main(["probe", "m", *old]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and old[0] in err and len(err.splitlines()) == 1


def test_probes_and_revisions_are_typed_lists(monkeypatch):
    """A bare name is ``{name: ...}``; jsonargparse's append syntax adds one item."""
    values = cli.build_parser()[0].parse_args(
        [
            "probe",
            "m",
            "--probes",
            "[ppl, {name: level0, trial: true}]",
            "--revision+",
            "a",
            "--revision+",
            "b",
        ]
    )
    options = cli.arguments(cli.probe, values.probe)["options"]
    assert [s.spec for s in options.probes] == [{"name": "ppl"}, {"name": "level0", "trial": True}]
    assert options.revision == ["a", "b"]


@pytest.mark.parametrize("flag", ["--probes", "--revision"])
def test_an_empty_list_is_refused(flag, capsys):
    """Not a silent run of the default probes, nor of no revision."""
    assert main(["probe", "m", flag, "[]", "--wandb=false"]) == 2
    assert (
        capsys.readouterr().err
        == f"error: probe: {flag} is an empty list: name at least one, or leave it out\n"
    )


def test_an_unknown_old_looking_flag_is_still_refused(capsys):
    assert main(["probe", "x.ckpt", "--no-such-flag"]) == 2
    assert capsys.readouterr().err == "error: unrecognized arguments: --no-such-flag\n"


def test_probe_without_a_path_or_watch_is_one_line(capsys):
    assert main(["probe"]) == 2
    assert capsys.readouterr().err == "error: probe: give at least one PATH or --watch DIR\n"


def test_train_passes_its_arguments_to_lightning_cli_unchanged(monkeypatch):
    seen = []
    train_cli = types.ModuleType("bytecanary.train.cli")
    train_cli.main = lambda args: seen.append(args) or 0
    monkeypatch.setitem(sys.modules, "bytecanary.train.cli", train_cli)
    argv = ["--config", "configs/tiny.yaml", "--trainer.max_steps=3", "--help"]
    assert main(["train", *argv]) == 0
    assert seen == [argv]


def test_defaults_live_in_the_signatures():
    from bytecanary.tracking import DEFAULT_PROJECT

    probe = cli.build_parser()[0].parse_args(["probe", "x"]).probe
    assert (probe.out, probe.series.interval, probe.wandb_project) == ("probes.jsonl", 30.0, DEFAULT_PROJECT)
    demo = cli.build_parser()[0].parse_args(["demo"]).demo
    assert (demo.out, demo.minutes, demo.config) == ("runs/demo", 10.0, "configs/tiny.yaml")


@pytest.mark.slow
def test_demo_prepares_trains_probes_reports_and_summarises(tmp_path, capfd, small_data):
    config = write_config(tmp_path / "small.yaml")
    shutil.copytree(small_data, tmp_path / "data")  # that config's data: its prepare finds it up to date
    micro = tmp_path / "micro.yaml"
    mcqa = {"name": "mcqa", "trial": True, "embedded_per_language": 4, "nonsense_per_language": 4,
            "generative_per_task": 2}  # fmt: skip
    probes = [{"name": "level0", "trial": True, "per_language": 4},
              {"name": "level1", "trial": True, "per_language": 4}, mcqa]  # fmt: skip
    micro.write_text(yaml.safe_dump({**MICRO, "probes": probes, "run": {**MICRO["run"], "wandb": True}}))
    args = ["demo", "--out", str(tmp_path / "runs" / "demo"), "--config", str(micro), "--steps", "6"]
    args += ["--data_config", str(config), "--data", str(tmp_path / "data")]
    assert main(args) == 0
    printed, stderr = capfd.readouterr()
    assert "[corpus] up to date, skipped" in printed  # the copy was found
    assert "validation perplexity:" in printed and "Level 1 (context-guided retrieval)" in printed
    assert "MCQA (accuracy, mean over tasks)" in printed and "validity/perplexity tokens:" in printed
    run = tmp_path / "runs" / "demo"
    records = read_records(run / "probes.jsonl")
    assert {r.probe for r in records} == {"level0", "level1", "mcqa"}
    assert all(r.status == "ok" for r in records)
    for name in ("convergence.png", "tiers.png", "mcqa.png"):
        assert (run / "report" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (run / "report" / "report.md").read_text()
    last = max(records, key=lambda r: r.step)
    assert "| tokens seen | step | val ppl ↓ |" in md  # the per-checkpoint table...
    assert f"\n| {last.tokens_seen:,} | {last.step} | " in md  # ...down to the last checkpoint
    # one command uploads training and report alike, and it is the last line: none on stderr
    assert "wandb sync" not in stderr and "wandb sync" in printed.strip().splitlines()[-1]
    assert_one_sync_of_every_offline_run(printed, run, 2)
    # the share of the run spent in probes, from the logs: the records' seconds over the wall time
    share = re.search(r"^probes: (\d+) s of (\d+) s of training \(([\d.]+)%\): level0 ", printed, re.M)
    assert share, printed
    wall = [r["perf/wall_seconds"] for r in read_jsonl(run / "metrics.jsonl") if "perf/wall_seconds" in r][-1]
    assert abs(int(share[1]) - sum(r.seconds for r in records)) <= 0.5 and abs(int(share[2]) - wall) <= 0.5
    assert abs(float(share[3]) - 100 * sum(r.seconds for r in records) / wall) <= 0.05
    assert main(args) == 0  # a rerun continues the finished run: nothing more to train or probe
    assert len(read_records(tmp_path / "runs" / "demo" / "probes.jsonl")) == len(records)


def test_bad_config_is_one_line_on_stderr(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nmixture: {en: 1.0}\nsources: []\n")
    assert main(["prepare", "--config", str(bad), "--out", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {bad}: sources: no source for ['en']"
    assert not (tmp_path / "d").exists() or not any((tmp_path / "d").iterdir())


@pytest.mark.slow
def test_prepare_takes_a_field_of_its_data_config_as_a_flag(tmp_path, capsys):
    """``--tokenizer.vocab_size`` over configs/data/synthetic.yaml (its text cut small)."""
    from tokenizers import Tokenizer

    sources = [{"language": lang, "synthetic": {"megabytes": 0.3}} for lang in ("en", "ja", "ko", "zh")]
    args = ["prepare", "--config", "configs/data/synthetic.yaml", "--tokenizer.vocab_size=2048"]
    args += [f"--sources={sources}", "--eval.snapshot_tokens=[]", "--eval.max_per_tier=20"]
    args += ["--eval.level1_per_language=8", "--eval.wordcomp_per_language=8", "--out", str(tmp_path / "d")]
    assert main(args) == 0, capsys.readouterr().err
    tokenizer = Tokenizer.from_file(str(tmp_path / "d" / "tokenizer" / "tokenizer.json"))
    assert tokenizer.get_vocab_size() == 2048
