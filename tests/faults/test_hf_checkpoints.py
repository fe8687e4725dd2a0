"""Issue 32, classes 2, 3 and 6: an HF model folder that would be probed as something it is
not (a revision of a local folder, weights that do not fit the architecture) or that does
not load (a tokenizer without byte tokens, shapes unlike the config's, named with both, a
pickle that ``weights_only`` refuses) is one ``error:`` line naming it, exit 2, and no
record. Class 1: a model whose embedding is padded past its tokenizer, and that emits those
ids, is probed. Class 4: a sliding window shorter than a Level 1 prompt is decoded through
the model's own forward, and says so; class 5: a model that caps its logits is scored as its
forward scores; class 7: a folder of HF model folders is a series, and an HF Trainer output
folder its checkpoints, then its final model (issue 46)."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from bytecanary.cli import main
from bytecanary.records import read as read_records
from bytecanary.train.export import export

from .conftest import one_error


@pytest.fixture
def hf(trained, tmp_path):
    return export(trained / "checkpoints" / "step0000004.safetensors", tmp_path / "hf")


def _probe(hf, out, *args):
    return main(
        ["probe", str(hf), "--probes", "[level0]", "--trial=true", "--wandb=false", "--out", str(out), *args]
    )


def test_a_revision_of_a_local_folder_is_refused(hf, tmp_path, capsys):
    """transformers reads a local folder as checked out, whatever the revision: each
    revision would get the same numbers under another step."""
    out = tmp_path / "p.jsonl"
    assert _probe(hf, out, "--revision", "[step1, step2]") == 2
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


def test_shapes_unlike_the_configs_are_one_line_naming_the_first_with_both_shapes(hf, tmp_path, capsys):
    config = json.loads((hf / "config.json").read_text(encoding="utf-8"))
    (hf / "config.json").write_text(json.dumps({**config, "n_embd": 2 * config["n_embd"]}), encoding="utf-8")
    wte = list(load_file(hf / "model.safetensors")["transformer.wte.weight"].shape)
    out = tmp_path / "p.jsonl"
    assert _probe(hf, out) == 2
    one_error(
        capsys.readouterr().err,
        str(hf),
        "weights do not fit the config",
        f"transformer.wte.weight is {wte} in the checkpoint's files, {[wte[0], 2 * wte[1]]} in the config",
    )
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


def test_a_padded_embedding_that_emits_its_padding_ids_is_probed(small_data, tmp_path):
    """Pythia, OLMo and Qwen pad the embedding past the tokenizer, and an early checkpoint
    emits those ids: they are tokens with no bytes on every path (Level 0 and 1 decoding and
    scoring, MCQA generation)."""
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    from bytecanary.bytecodec import ByteCodec
    from bytecanary.probes import get_probe

    from ..probes.reference import py_score

    tok = AutoTokenizer.from_pretrained(small_data / "tokenizer")
    n_tok, id_bytes = len(tok), ByteCodec.from_tokenizer(tok).id_bytes
    cfg = GPT2Config(vocab_size=n_tok + 64, n_positions=64, n_embd=32, n_layer=1, n_head=2,
                     tie_word_embeddings=False, eos_token_id=tok.eos_token_id)  # fmt: skip
    torch.manual_seed(0)
    model = GPT2LMHeadModel(cfg).eval()
    with (
        torch.no_grad()
    ):  # each padding id a louder copy of a real token: it wins where that one's logit is > 0
        head = model.lm_head.weight
        head[n_tok:] = 10 * head[torch.randint(0, n_tok, (64,))]
    records = tmp_path / "samples.jsonl"
    for name in ("level0", "level1"):
        got = get_probe(name, trial=True, per_language=4, records=str(records)).run(model, tok, small_data)
        assert got and all(np.isfinite(v) for v in got.values())
    rows = [json.loads(line) for line in records.read_text(encoding="utf-8").splitlines()]
    padded = [r for r in rows if any(i >= n_tok for i in r["generated_ids"])]
    assert len(padded) > len(rows) // 2  # the model emits its padding ids
    for r in padded:  # scored as the bytes of the tokenizer's ids alone
        kept = bytes.fromhex(r["prompt_bytes"]) + b"".join(
            id_bytes[i] for i in r["generated_ids"] if i < n_tok
        )
        assert r["partial"][-1] == pytest.approx(py_score(kept)[2])
    mcqa = get_probe(
        "mcqa", trial=True, embedded_per_language=2, nonsense_per_language=2, protocols=["dashed"]
    )
    got = mcqa.run(model, tok, small_data)
    assert any(k.endswith("/dashed/acc") for k in got)


def _hf_folder(trained, folder, step):
    """An exported model of ``trained``'s step, with no bytecanary.json (a hub model has none)."""
    export(trained / "checkpoints" / f"step{step:07d}.safetensors", folder)
    (folder / "bytecanary.json").unlink()
    return folder


@pytest.mark.parametrize("layout", ["checkpoint-{}", "global_step{}", "iter_{}", "hub cache"])
def test_a_folder_of_hf_model_folders_is_a_series_in_step_order(trained, small_data, tmp_path, layout):
    """Issue 32, class 7: HF Trainer's checkpoint-N (and stepN, global_stepN, iter_N)
    subfolders, and the hub cache's snapshots named by refs/, probed in step order with the
    step from the name; a rerun does nothing."""
    series = tmp_path / "series"
    if layout == "hub cache":
        series = tmp_path / "hub" / "models--bc--tiny"
        for step in (8, 4):
            _hf_folder(trained, series / "snapshots" / f"{step:040d}", step)
            (series / "refs").mkdir(exist_ok=True)
            (series / "refs" / f"step{step}").write_text(f"{step:040d}", encoding="utf-8")
        (series / "refs" / "main").write_text(f"{8:040d}", encoding="utf-8")
    else:
        for step in (8, 4):
            _hf_folder(trained, series / layout.format(step), step)
        (series / "logs").mkdir()  # anything else beside them is no checkpoint
    out = tmp_path / "p.jsonl"
    args = ["--eval_sets.level0", str(small_data / "evalsets" / "level0_zh.json")]
    assert _probe(series, out, *args) == 0
    rows = read_records(out)
    if layout == "hub cache":
        assert [(r.checkpoint.rsplit("@", 1)[1], r.step) for r in rows] == [
            ("main", None),
            ("step4", 4),
            ("step8", 8),
        ]
        assert rows[0].metrics == rows[2].metrics  # main is step8's snapshot
    else:
        assert [r.step for r in rows] == [4, 8]
        assert [Path(r.checkpoint).name for r in rows] == [layout.format(4), layout.format(8)]
    assert rows[0].metrics != rows[1].metrics and all(r.ok for r in rows)
    assert _probe(series, out, *args) == 0 and len(read_records(out)) == len(rows)


def test_an_hf_trainer_output_folder_is_its_checkpoints_then_its_final_model(trained, small_data, tmp_path):
    """Issue 46: HF Trainer's output folder holds the final model at its root beside
    checkpoint-N subfolders, each a model of its own: every one is probed, the checkpoints in
    step order with the step of their names, then the final model with trainer_state.json's."""
    root = _hf_folder(trained, tmp_path / "trainer_out", 8)
    (root / "trainer_state.json").write_text(json.dumps({"global_step": 8}), encoding="utf-8")
    for step in (8, 4):
        _hf_folder(trained, root / f"checkpoint-{step}", step)
    out = tmp_path / "p.jsonl"
    args = ["--eval_sets.level0", str(small_data / "evalsets" / "level0_zh.json")]
    assert _probe(root, out, *args) == 0
    rows = read_records(out)
    assert [(Path(r.checkpoint).name, r.step) for r in rows] == [
        ("checkpoint-4", 4),
        ("checkpoint-8", 8),
        ("trainer_out", 8),
    ]
    assert all(r.ok for r in rows) and rows[0].metrics != rows[1].metrics == rows[2].metrics


def _family_folder(byte_fallback_tokenizer, folder, config):
    """A tiny random model of another family, saved with its tokenizer as a user's folder."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    byte_fallback_tokenizer.save_pretrained(folder)
    return folder


def test_a_window_shorter_than_a_level1_prompt_is_decoded_through_the_models_own_forward(
    byte_fallback_tokenizer, small_data, tmp_path, capsys, monkeypatch
):
    """Class 4: a Mistral folder whose sliding window is shorter than Level 1's prompts is
    probed as ``model.generate`` runs it (the family matrix checks the numbers), and says why
    it is slower."""
    from transformers import MistralConfig

    from bytecanary.io import warn_once
    from bytecanary.probes import fastpath

    monkeypatch.setattr(fastpath, "_warn", warn_once())  # said once per process: say it here
    cfg = MistralConfig(vocab_size=len(byte_fallback_tokenizer), hidden_size=32, intermediate_size=64,
                        num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                        sliding_window=8)  # fmt: skip
    folder = _family_folder(byte_fallback_tokenizer, tmp_path / "mistral", cfg)
    out = tmp_path / "p.jsonl"
    (level1,) = (small_data / "evalsets").glob("level1*.json")
    args = ["--probes", "[level1]", "--trial=true", "--eval_sets.level1", str(level1), "--wandb=false"]
    assert main(["probe", str(folder), *args, "--out", str(out)]) == 0
    (row,) = read_records(out)
    assert row.ok and row.metrics
    err = capsys.readouterr().err
    assert "through its own forward and cache" in err and "sliding_window=8 is shorter than a prompt" in err


def test_a_soft_capping_model_is_scored_as_its_forward_scores(
    byte_fallback_tokenizer, tmp_path, capsys, monkeypatch
):
    """Class 5: Gemma-2 caps its logits after the head; MCQA scores through its forward."""
    from transformers import AutoModelForCausalLM, Gemma2Config

    from bytecanary.io import warn_once
    from bytecanary.probes.mcqa import scoring

    monkeypatch.setattr(scoring, "_warn", warn_once())  # said once per process: say it here

    cfg = Gemma2Config(vocab_size=len(byte_fallback_tokenizer), hidden_size=32, intermediate_size=64,
                       num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                       final_logit_softcapping=0.5)  # fmt: skip
    folder = _family_folder(byte_fallback_tokenizer, tmp_path / "gemma2", cfg)
    items = tmp_path / "mmlu.jsonl"
    rows = [
        {"question": "2+2?", "choices": ["3", "4"], "answer": 1},
        {"question": "首都?", "choices": ["北京", "上海"], "answer": 0},
    ]
    items.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    task = {
        "name": "mini",
        "schema": "mmlu",
        "language": "en",
        "path": "json",
        "split": "train",
        "data_files": [str(items)],
    }
    spec = {"name": "mcqa", "tasks": [task], "embedded_per_language": 0, "nonsense_per_language": 0,
            "protocols": ["cloze"], "records": str(tmp_path / "items.jsonl")}  # fmt: skip
    config = tmp_path / "probes.yaml"
    config.write_text(json.dumps({"probes": [spec]}), encoding="utf-8")
    out = tmp_path / "p.jsonl"
    assert main(["probe", str(folder), "--config", str(config), "--wandb=false", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "through its own forward" in err and "final_logit_softcapping=0.5" in err
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    for line in (tmp_path / "items.jsonl").read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        question = rows[int(r["item_id"])]["question"]
        prompt = byte_fallback_tokenizer.encode(f"Question: {question}\nAnswer:", add_special_tokens=False)
        for ll, cont in zip(r["ll"], r["continuation_ids"], strict=True):
            ids = torch.tensor([prompt + cont])
            with torch.no_grad():
                lp = model(ids).logits[0, :-1].double().log_softmax(-1)
            want = sum(float(lp[len(prompt) - 1 + j, t]) for j, t in enumerate(cont))
            assert ll == pytest.approx(want, abs=1e-4)
