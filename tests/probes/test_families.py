"""The checkpoint families researchers probe (issue 32): a tiny random model of each, with its
family's tokenizer type (SentencePiece byte fallback, GPT-2 byte-level BPE, pure bytes), tied,
untied and padded where the family has them; ALiBi (BLOOM's from the attention mask, MPT's by
column, which the engine's first-batch check catches) and a Mistral window shorter than prompt
and answer (issue 46). Level 0 and Level 1 equal the one-sample-at-a-time reference
(``model.generate`` on each prompt alone, CPython's decoder, ``p_valid`` summed over the whole
vocabulary); MCQA log-likelihoods equal one plain forward per (prompt, choice), and generated
MCQA answers ``model.generate`` on each prompt alone."""

import json
from dataclasses import replace

import pytest
import torch
import transformers

from bytecanary.bytecodec import ByteCodec
from bytecanary.probes import get_probe
from bytecanary.probes.engine import Sampling
from bytecanary.probes.mcqa.generation import Answering, generate_answers, stop_strings
from bytecanary.probes.models import context_size, output_size
from bytecanary.probes.registry import NO_CONTEXT
from bytecanary.probes.stops import cut_at_stop

from .conftest import generate_alone
from .reference import reference_metrics
from .test_mcqa_probe import ITEMS, _ll

SHAPE = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
             num_key_value_heads=1, max_position_embeddings=128, initializer_range=0.5)  # fmt: skip
FAMILIES = {  # name -> (config class, model class, tokenizer type, extra config, variants)
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", "gpt2", {}, ("tied", "untied")),
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM", "gpt2", {}, ("untied", "padded")),
    "llama": ("LlamaConfig", "LlamaForCausalLM", "byte_fallback", {}, ("tied", "untied")),
    "mistral": ("MistralConfig", "MistralForCausalLM", "byte_fallback", {}, ("untied", "window")),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", "gpt2", {}, ("tied", "padded")),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", "byte_fallback", {"head_dim": 16}, ("tied",)),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", "byte_fallback", {"head_dim": 16}, ("tied",)),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", "byte_fallback", {"head_dim": 16}, ("tied",)),
    "olmo": ("OlmoConfig", "OlmoForCausalLM", "gpt2", {}, ("untied", "padded")),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", "gpt2", {}, ("untied", "padded")),
    "bloom": ("BloomConfig", "BloomForCausalLM", "gpt2", {}, ("tied",)),
    "mpt": ("MptConfig", "MptForCausalLM", "gpt2", {"max_seq_len": 256, "initializer_range": 0.6}, ("tied",)),
    "bytes": ("LlamaConfig", "LlamaForCausalLM", "bytes", {}, ("untied",)),
}
CASES = [(family, variant) for family, spec in FAMILIES.items() for variant in spec[4]]
PADDING = 24  # ids past the tokenizer in a padded variant
# the window variant: a sliding_window shorter than prompt and answer on every probe, in a context
# that cuts no MCQA prompt, so a batch's prompts differ in length (the left padding is what it tests)
WINDOW = {"sliding_window": 8, "max_position_embeddings": 256}


@pytest.fixture
def family_model(request, byte_fallback_tokenizer, gpt2_tokenizer, bytes_tokenizer):
    family, variant = request.param
    config_name, model_name, kind, extra, _ = FAMILIES[family]
    tok = {"gpt2": gpt2_tokenizer, "byte_fallback": byte_fallback_tokenizer, "bytes": bytes_tokenizer}[kind]
    config_cls, model_cls = getattr(transformers, config_name), getattr(transformers, model_name)
    shape = (
        dict(n_embd=32, n_layer=2, n_head=2, n_positions=128, initializer_range=0.5)
        if family == "gpt2"
        else {**SHAPE, **extra, **(WINDOW if variant == "window" else {})}
    )
    ids = {k: getattr(tok, k) for k in ("eos_token_id", "bos_token_id", "pad_token_id")}
    config = config_cls(
        **shape,
        **{k: v for k, v in ids.items() if v is not None},
        vocab_size=len(tok) + (PADDING if variant == "padded" else 0),
        tie_word_embeddings=variant == "tied",
    )
    torch.manual_seed(0)
    return tok, model_cls(config).eval()


@pytest.mark.parametrize("family_model", CASES, ids=[f"{f}-{v}" for f, v in CASES], indirect=True)
@pytest.mark.parametrize("level", [0, 1])
def test_utf8_probes_equal_the_reference_on_every_family(family_model, level, eval_dir):
    tok, model = family_model
    probe = get_probe(f"level{level}", trial=False, batch_size=5)
    prep = probe.prepare(tok, eval_dir)
    got = probe.aggregate(prep, [probe.compute(model, tok, prep)], NO_CONTEXT)
    want = reference_metrics(model, replace(prep, codec=prep.codec.padded(output_size(model))), level)
    assert got.keys() == want.keys()
    for key in want:  # float32 sums of log-probs: batched vs one sample alone
        assert got[key] == pytest.approx(want[key], rel=1e-4, abs=1e-4), key


def _mcqa_probe(tmp_path, protocols: list[str]):
    path = tmp_path / "mmlu.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in ITEMS), encoding="utf-8")
    task = {"name": "mini", "schema": "mmlu", "language": "en", "path": "json", "split": "train",
            "data_files": [str(path)]}  # fmt: skip
    return get_probe("mcqa", tasks=[task], trial=True, embedded_per_language=0, nonsense_per_language=0,
                     protocols=protocols, batch_size=3)  # fmt: skip


@pytest.mark.parametrize("family_model", CASES, ids=[f"{f}-{v}" for f, v in CASES], indirect=True)
def test_mcqa_scores_equal_a_plain_forward_per_choice_on_every_family(family_model, tmp_path):
    tok, model = family_model
    probe = _mcqa_probe(tmp_path, ["letter_separate", "letter_merged", "cloze"])
    views = probe.prepare(tok, None)
    payload = probe.compute(model, tok, views)
    for protocol in ("letter_separate", "letter_merged", "cloze"):
        for row, view in enumerate(views):
            prompt, choices = view.encodings[protocol]
            for k, choice in enumerate(choices):
                assert payload[protocol][row, k] == pytest.approx(_ll(model, prompt, choice), abs=1e-4)


@pytest.mark.parametrize("family_model", CASES, ids=[f"{f}-{v}" for f, v in CASES], indirect=True)
def test_mcqa_answers_equal_generate_on_each_prompt_alone_on_every_family(family_model, tmp_path):
    """Greedy answers, each cut at its protocol's stop strings as the probe cuts them."""
    tok, model = family_model
    protocols = ("dashed", "wrapper_plain")
    views = _mcqa_probe(tmp_path, list(protocols)).prepare(tok, None)
    answering = Answering(protocols, (Sampling(),), max_new_tokens=12, batch_size=3)
    texts = generate_answers(model, tok, views, answering)
    codec = ByteCodec.from_tokenizer(tok).padded(output_size(model))
    keep = context_size(model) - answering.max_new_tokens
    asked = 0
    for v, view in enumerate(views):
        for j, protocol in enumerate(protocols):
            stops = stop_strings(protocol)
            until = [s.decode() for s in stops]
            ids = generate_alone(model, view.prompts[protocol][-keep:], 12, tok, stop_strings=until)
            ids = ids[:-1] if ids and ids[-1] == tok.eos_token_id else ids
            assert texts[v, j, 0] == cut_at_stop(codec.decode(ids), stops).decode("utf-8", errors="replace")
            asked += 1
    assert asked == 2 * len(ITEMS)
