"""Issue 32, classes 2, 3 and 6: an HF model folder that would be probed as something it is
not (a revision of a local folder, weights that do not fit the architecture) or that does
not load (a tokenizer without byte tokens, shapes unlike the config's, a pickle that
``weights_only`` refuses) is one ``error:`` line naming it, exit 2, and no record."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from bytecanary.cli import main
from bytecanary.train.export import export

from .conftest import one_error


@pytest.fixture
def hf(trained, tmp_path):
    return export(trained / "checkpoints" / "step0000004.safetensors", tmp_path / "hf")


def _probe(hf, out, *args):
    return main(["probe", str(hf), "--probes", "level0", "--trial", "--no-wandb", "--out", str(out), *args])


def test_a_revision_of_a_local_folder_is_refused(hf, tmp_path, capsys):
    """transformers reads a local folder as checked out, whatever the revision: each
    revision would get the same numbers under another step."""
    out = tmp_path / "p.jsonl"
    assert _probe(hf, out, "--revision", "step1,step2") == 2
    one_error(capsys.readouterr().err, str(hf), "--revision", "local folder", "check each revision out")
    assert not out.exists()


def test_weights_the_architecture_does_not_have_are_refused(hf, tmp_path, capsys):
    weights = load_file(hf / "model.safetensors")
    save_file(
        {k.replace("transformer.", "gpt_neox."): v for k, v in weights.items()}, hf / "model.safetensors"
    )
    out = tmp_path / "p.jsonl"
    assert _probe(hf, out) == 2
    line = one_error(
        capsys.readouterr().err, str(hf), "weights missing from", "GPT2LMHeadModel", "random model"
    )
    assert "transformer.h.0" in line and not out.exists()


def test_a_tokenizer_without_byte_tokens_is_refused_before_the_model_loads(hf, tmp_path, capsys, monkeypatch):
    import transformers

    words = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1, "b": 2}, unk_token="[UNK]"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (hf / name).unlink(missing_ok=True)
    PreTrainedTokenizerFast(tokenizer_object=words, unk_token="[UNK]").save_pretrained(hf)

    def no_model(*args, **kwargs):
        raise AssertionError("the model loaded before the tokenizer was checked")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_model)
    out = tmp_path / "p.jsonl"
    assert _probe(hf, out) == 2
    one_error(capsys.readouterr().err, str(hf), "unsupported tokenizer, no complete set of byte tokens")
    assert not out.exists()


def test_shapes_unlike_the_configs_are_one_line(hf, tmp_path, capsys):
    config = json.loads((hf / "config.json").read_text(encoding="utf-8"))
    (hf / "config.json").write_text(json.dumps({**config, "n_embd": 2 * config["n_embd"]}), encoding="utf-8")
    out = tmp_path / "p.jsonl"
    assert _probe(hf, out) == 2
    one_error(capsys.readouterr().err, str(hf), "cannot load the model")
    assert not out.exists()


class Payload:
    """Anything a pickle may name: ``weights_only`` loads none of it."""


def test_a_pickle_weights_only_refuses_is_one_line(hf, tmp_path, capsys):
    (hf / "model.safetensors").unlink()
    torch.save({"transformer.wte.weight": Payload()}, hf / "pytorch_model.bin")
    out = tmp_path / "p.jsonl"
    assert _probe(hf, out) == 2
    one_error(capsys.readouterr().err, str(hf), "cannot load the model")
    assert not out.exists()
