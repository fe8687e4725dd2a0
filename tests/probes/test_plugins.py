"""A probe of another package, in three files (its module and the two files of its metadata that
name it under the ``bytecanary.probes`` entry points), with no declarations: ``bytecanary probe``
finds it, and its records, the summary, the W&B payload and the report all show it."""

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from bytecanary import display, tracking
from bytecanary.cli import main
from bytecanary.errors import BytecanaryError
from bytecanary.probes import registry
from bytecanary.records import read as read_records
from bytecanary.report.summary import summary

from ..conftest import installed_plugin
from ..report.runs import TOKENS, make_run, record, write_jsonl

TOY = '''
    import torch

    from bytecanary.probes.registry import Probe, register_probe


    @register_probe("toy")
    class ToyProbe(Probe):
        """The mean log-probability of one sentence per language."""

        def prepare(self, tokenizer, data_dir):
            texts = {"en": "The cat sat.", "ja": "猫が座った。"}
            return {lang: tokenizer(text)["input_ids"] for lang, text in texts.items()}

        def compute(self, model, tokenizer, prepared, rank=0, world=1):
            out = {}
            for lang, ids in prepared.items():
                x = torch.tensor([ids])
                lp = model(input_ids=x).logits[0, :-1].float().log_softmax(-1)
                out[lang] = float(lp.gather(-1, x[0, 1:, None]).mean())
            return out

        def aggregate(self, prepared, payloads, context):
            scores = payloads[0]
            mean = sum(scores.values()) / len(scores)
            each = {f"probe/toy/{lang}/logprob": v for lang, v in scores.items()}
            return each | {"probe/toy/all/logprob": mean}
'''


# the same probe, declaring how its keys are shown (bytecanary.display)
DECLARING = TOY.replace(
    "import torch\n",
    "import torch\n\n    from bytecanary.display import Display, Table\n"
    "    from bytecanary.keys import Metric\n",
).replace(
    '''"""The mean log-probability of one sentence per language."""''',
    '''"""The mean log-probability of one sentence per language."""

        display = Display(
            fields=("language",),
            headline=lambda k: k.fields == ("ja",),
            metrics=(Metric("logprob", True, "mean"),),
            table=Table(
                "Toy log-probability", (("mean lp", "probe/toy/all/logprob"),), "probe/toy/{}/logprob".format
            ),
        )''',
)


@pytest.fixture
def toy_plugin(tmp_path, monkeypatch):
    folder = tmp_path / "plugin"
    with installed_plugin(folder, monkeypatch, {"toyprobe": TOY}):
        assert len([p for p in folder.rglob("*") if p.is_file()]) == 3
        yield


@pytest.fixture
def declaring_plugin(tmp_path, monkeypatch):
    with installed_plugin(tmp_path / "plugin", monkeypatch, {"toyprobe": DECLARING}):
        yield


@pytest.mark.slow
def test_a_probe_in_three_files_of_another_package_shows_everywhere(
    toy_plugin, byte_fallback_tokenizer, tmp_path, capsys
):
    tok = byte_fallback_tokenizer
    torch.manual_seed(0)
    model_dir = tmp_path / "model"
    GPT2LMHeadModel(
        GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=32, n_layer=1, n_head=2)
    ).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    config, out = tmp_path / "probes.yaml", tmp_path / "p.jsonl"
    config.write_text(json.dumps({"probes": [{"name": "toy"}]}))
    args = [
        "probe",
        str(model_dir),
        "--config",
        str(config),
        "--out",
        str(out),
        "--wandb=false",
        "--device",
        "cpu",
    ]
    assert main(args) == 0
    [rec] = read_records(out)
    assert (
        rec.probe == "toy"
        and rec.ok
        and set(rec.metrics)
        == {
            "probe/toy/en/logprob",
            "probe/toy/ja/logprob",
            "probe/toy/all/logprob",
        }
    )
    assert rec.metrics["probe/toy/all/logprob"] < 0
    # the summary: a table of its aggregate keys, not silence
    printed = capsys.readouterr().out.splitlines()
    at = printed.index("toy")
    assert printed[at + 1].split()[-1] == "logprob"
    assert printed[at + 2].split()[-1] == f"{rec.metrics['probe/toy/all/logprob']:.3f}"

    # W&B: the aggregate as a charted scalar on the tokens_seen axis, the rest in its detail table
    defined = {}
    run = SimpleNamespace(define_metric=lambda key, **kwargs: defined.setdefault(key, kwargs))
    logged = tracking.WandbView().payload(run, {**rec.metrics, "tokens_seen": 5, "step": 5}, 5)
    assert logged["probe/toy/all/logprob"] == rec.metrics["probe/toy/all/logprob"]
    assert "probe/toy/en/logprob" not in logged and "detail/toy" in logged
    assert defined["probe/toy/all/logprob"]["step_metric"] == "tokens_seen"
    assert tracking.detail_fields("probe/toy/en/logprob") == ("en", "logprob")

    # the report: a table of it per checkpoint
    (tmp_path / "r").mkdir()
    run = make_run(tmp_path / "r")
    rows = read_records(run / "probes.jsonl") + [
        record(t, "toy", {"probe/toy/all/logprob": -t / 1e6}) for t in TOKENS
    ]
    write_jsonl(run / "probes.jsonl", rows)
    assert main(["report", str(run), "--wandb=false"]) == 0
    md = (run / "report" / "report.md").read_text()
    assert "toy per checkpoint" in md and f"{-TOKENS[-1] / 1e6:.3f}" in md


def test_a_probe_that_declares_its_display_is_shown_as_it_declares(declaring_plugin, tmp_path):
    """Its fields name the detail columns, its headline is what W&B charts, its table is the
    summary's and the report's."""
    (tmp_path / "r").mkdir()
    run = make_run(tmp_path / "r")
    scores = {t: {"en": -t / 1e6, "ja": -2 * t / 1e6} for t in TOKENS}
    rows = read_records(run / "probes.jsonl") + [
        record(
            t,
            "toy",
            {f"probe/toy/{lang}/logprob": v for lang, v in s.items()} | {"probe/toy/all/logprob": -1.0},
        )
        for t, s in scores.items()
    ]
    write_jsonl(run / "probes.jsonl", rows)
    registry.load_probes()
    assert tracking.detail_columns("toy") == ("language",)
    assert display.higher_is_better("probe/toy/ja/logprob") is True
    assert tracking.is_headline("probe/toy/ja/logprob") and not tracking.is_headline("probe/toy/all/logprob")
    printed = summary(run / "probes.jsonl").splitlines()
    at = printed.index("Toy log-probability")
    assert printed[at + 1].split()[3:] == ["mean", "lp", "en", "ja"]
    last = printed[at + 1 + len(TOKENS)].split()
    assert last[-3:] == ["-1.000", f"{scores[TOKENS[-1]]['en']:.3f}", f"{scores[TOKENS[-1]]['ja']:.3f}"]
    assert main(["report", str(run), "--wandb=false"]) == 0
    md = (run / "report" / "report.md").read_text()
    assert "toy per checkpoint" in md and "mean lp ↑" in md and "| ja ↑ |" in md
    defined = {}
    view = SimpleNamespace(define_metric=lambda key, **kwargs: defined.setdefault(key, kwargs))
    tracking.WandbView().payload(view, {"probe/toy/ja/logprob": -1.0, "tokens_seen": 5, "step": 5}, 5)
    assert defined["probe/toy/ja/logprob"] == {"step_metric": "tokens_seen", "summary": "max"}


def test_a_plugin_that_does_not_import_is_named_by_the_unknown_name_error(tmp_path, monkeypatch):
    folder = tmp_path / "plugin" / "broken-0.1.dist-info"
    folder.mkdir(parents=True)
    (folder / "METADATA").write_text("Metadata-Version: 2.1\nName: broken\nVersion: 0.1\n")
    (folder / "entry_points.txt").write_text("[bytecanary.probes]\nbad = no_such_module_here\n")
    monkeypatch.syspath_prepend(str(tmp_path / "plugin"))
    display.discover.cache_clear()
    try:
        with pytest.raises(BytecanaryError) as err:
            registry.probe_class("nope")
    finally:
        display.discover.cache_clear()
    assert str(err.value).startswith("unknown probe 'nope'; known: level0, level1, mcqa")
    assert str(err.value).endswith(
        "; probe plugins that failed to load: bad (no_such_module_here): "
        "ModuleNotFoundError: No module named 'no_such_module_here'"
    )
    assert "\n" not in str(err.value)


def test_the_core_finds_each_probes_display_without_importing_the_probes():
    """A report or summary read as a library, with no probe imported: the entry points name
    every probe's module, so the displays the report reads are the declared ones."""
    code = (
        "import sys\n"
        "from bytecanary import display, tracking\n"
        "assert 'bytecanary.probes' not in sys.modules\n"
        "assert display.display_of('level0').fields == ('language', 'tier', 'k')\n"
        "assert display.language_of('probe/level0/ja/rare/partial') == 'ja'\n"
        "assert tracking.is_headline('probe/level1/ja/term_match')\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout == "ok\n", done.stderr[-2000:]
