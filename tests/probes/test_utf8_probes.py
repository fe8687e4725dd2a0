"""Level 0/1 engine vs HF generate and a one-sample-at-a-time reference."""

import json

import numpy as np
import pytest
import torch

from bytecanary import utf8
from bytecanary.errors import BytecanaryError
from probes import PROBES, get_probe
from probes.engine import Sampling, generate
from probes.reference import py_score, reference_metrics
from probes.utf8_probe import my_batches

from .conftest import generate_alone


def test_engine_tokens_equal_generate_on_each_prompt_alone(random_model, byte_fallback_tokenizer):
    tok = byte_fallback_tokenizer
    rng = np.random.default_rng(0)
    prompts = [rng.integers(4, len(tok), rng.integers(1, 12)).tolist() for _ in range(40)]
    out = generate(random_model, prompts, 6, tok.eos_token_id, tok.pad_token_id, batch_size=16)
    bare = generate(random_model, prompts, 6, tok.eos_token_id, tok.pad_token_id, 16, score_prompt=False)
    assert np.array_equal(bare.tokens, out.tokens) and np.allclose(bare.logprobs, out.logprobs, atol=1e-5)
    for i, p in enumerate(prompts):
        ref = generate_alone(random_model, p, 6, tok)
        assert out.tokens[i, : out.lengths[i]].tolist() == ref
        x = torch.tensor([p + ref])
        with torch.no_grad():
            lp = random_model(x).logits[0, :-1].log_softmax(-1).gather(-1, x[0, 1:, None]).squeeze(-1)
        assert out.logprobs[i, : len(ref)].sum() == pytest.approx(lp[len(p) - 1 :].sum().item(), abs=1e-4)
        assert out.prompt_logprob[i] == pytest.approx(lp[: len(p) - 1].sum().item(), abs=1e-4)


def test_gold_scored_in_the_prefill_matches_unpadded_passes(random_model, byte_fallback_tokenizer):
    tok = byte_fallback_tokenizer
    prompts, golds = [[5, 9, 300], [7], [40, 41, 42, 43, 44]], [[10, 11], [12], []]
    with_gold = generate(random_model, prompts, 4, tok.eos_token_id, tok.pad_token_id, 2, golds=golds)
    without = generate(random_model, prompts, 4, tok.eos_token_id, tok.pad_token_id, 2)
    np.testing.assert_array_equal(with_gold.tokens, without.tokens)  # gold never leaks into decoding
    np.testing.assert_allclose(with_gold.logprobs, without.logprobs, atol=1e-4)
    for g, p, c in zip(with_gold.gold_logprob, prompts, golds, strict=True):
        if not c:
            assert np.isnan(g)
            continue
        x = torch.tensor([p + c])
        with torch.no_grad():
            lp = random_model(x).logits[0, :-1].log_softmax(-1).gather(-1, x[0, 1:, None]).squeeze(-1)
        assert g == pytest.approx(lp[len(p) - 1 :].sum().item(), abs=1e-4)


@pytest.mark.parametrize("level", [0, 1])
def test_every_metric_equals_the_per_sample_reference(random_model, byte_fallback_tokenizer, eval_dir, level):
    probe = get_probe(f"level{level}", trial=False, batch_size=5)
    prep = probe.prepare(byte_fallback_tokenizer, eval_dir)
    got = probe.aggregate(prep, [probe.compute(random_model, byte_fallback_tokenizer, prep)])
    want = reference_metrics(random_model, prep, level)
    assert got.keys() == want.keys()
    for key in want:
        assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-5), key
    if level == 0:
        assert (
            "probe/level0/zh/unseen/k3/partial" in got
            and "probe/level0/zh/unseen/kfull/ema" in got
            and "probe/level0/ja/common/kfull/strict" in got
        )
        assert got["probe/level0/all/all/n"] == sum(
            len(c.encode()) for cs in ("語鬱𠀋ア", "中龘𫝀𪛖") for c in cs
        )
    else:
        assert "probe/level1/zh/k3/term_match" in got


def test_prompts_are_eos_space_then_byte_tokens(byte_fallback_tokenizer, eval_dir):
    tok = byte_fallback_tokenizer
    prep = get_probe("level0", trial=False).prepare(tok, eval_dir)
    s = next(x for x in prep.samples if x.char == "𫝀" and x.k == 2)
    assert s.prompt_ids[0] == tok.eos_token_id
    assert tok.convert_ids_to_tokens(list(s.prompt_ids[1:])) == ["▁", "<0xF0>", "<0xAB>"]
    assert s.prompt_bytes == b" \xf0\xab" and s.remainder == b"\x9d\x80"
    assert tok.convert_ids_to_tokens(list(s.gold_ids)) == ["<0x9D>", "<0x80>"]  # byte tokens, not ""


def test_python_reference_dfa_agrees_with_the_table_dfa():
    rng = np.random.default_rng(3)
    streams = [rng.integers(0x70, 0x100, rng.integers(0, 10)).astype(np.uint8).tobytes() for _ in range(3000)]
    got = utf8.score_batch(streams)
    want = np.array([py_score(s) for s in streams])
    np.testing.assert_allclose(np.stack([got.strict, got.soft, got.partial], 1), want, atol=1e-12)


def test_batches_are_dealt_whole_to_ranks():
    assert my_batches(10, 3, 0, 2).tolist() == [0, 1, 2, 6, 7, 8]
    assert my_batches(10, 3, 1, 2).tolist() == [3, 4, 5, 9]


def test_sharded_compute_equals_single_process(random_model, byte_fallback_tokenizer, eval_dir):
    probe = get_probe("level0", trial=False, batch_size=4)
    prep = probe.prepare(byte_fallback_tokenizer, eval_dir)
    single = probe.aggregate(prep, [probe.compute(random_model, byte_fallback_tokenizer, prep)])
    shards = [probe.compute(random_model, byte_fallback_tokenizer, prep, rank=r, world=3) for r in range(3)]
    assert probe.aggregate(prep, shards) == single


def test_registry():
    assert {"level0", "level1"} <= set(PROBES)
    with pytest.raises(BytecanaryError, match="did you mean 'level0'"):
        get_probe("levl0")
    with pytest.raises(BytecanaryError, match="unexpected keyword"):
        get_probe("level0", bogus=1)
    with pytest.raises(BytecanaryError, match="probe 'mcqa': unknown protocols \\['dashd'\\]"):
        get_probe("mcqa", protocols=["dashd"])


def test_sampling_is_seeded_and_top_k_1_is_greedy(random_model, byte_fallback_tokenizer):
    tok = byte_fallback_tokenizer
    prompts = [[5, 9, 300], [7], [40, 41, 42]] * 4
    greedy = generate(random_model, prompts, 5, tok.eos_token_id, tok.pad_token_id)
    hot = Sampling(temperature=5.0, seed=3)
    a = generate(random_model, prompts, 5, tok.eos_token_id, tok.pad_token_id, sampling=hot)
    b = generate(random_model, prompts, 5, tok.eos_token_id, tok.pad_token_id, sampling=hot)
    np.testing.assert_array_equal(a.tokens, b.tokens)
    assert not np.array_equal(a.tokens, greedy.tokens)
    top1 = generate(
        random_model, prompts, 5, tok.eos_token_id, tok.pad_token_id, sampling=Sampling(1.0, top_k=1)
    )
    np.testing.assert_array_equal(top1.tokens, greedy.tokens)
    tiny_p = Sampling(1.0, top_p=1e-6, seed=1)
    np.testing.assert_array_equal(
        generate(random_model, prompts, 5, tok.eos_token_id, tok.pad_token_id, sampling=tiny_p).tokens,
        greedy.tokens,
    )


def test_per_sample_records_stream_to_jsonl(random_model, byte_fallback_tokenizer, eval_dir, tmp_path):
    out = tmp_path / "samples.jsonl"
    probe = get_probe("level0", trial=False, records=str(out))
    prep = probe.prepare(byte_fallback_tokenizer, eval_dir)
    metrics = probe.aggregate(prep, [probe.compute(random_model, byte_fallback_tokenizer, prep)])
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == metrics["probe/level0/all/all/n"]
    row = next(r for r in rows if r["char"] == "𫝀" and r["k"] == 2)
    assert row["prompt_bytes"] == " \xf0\xab".encode("latin-1").hex() and row["remainder"] == "9d80"
    assert len(row["partial"]) == 5 and row["delta_ll"] is not None
