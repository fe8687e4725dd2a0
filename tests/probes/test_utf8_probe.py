"""The UTF-8 probe base: every metric equals a one-sample-at-a-time reference, sharding,
per-sample records, and Level 0 / Level 1 as siblings."""

import json

import numpy as np
import pytest

from bytecanary.probes import get_probe, utf8_keys
from bytecanary.probes.level0 import Level0Probe
from bytecanary.probes.level1 import Level1Probe
from bytecanary.probes.registry import NO_CONTEXT
from bytecanary.probes.utf8_probe import Utf8Probe, decode_and_score, fit_context
from bytecanary.records import Context

from .reference import expected_validity, reference_metrics


@pytest.mark.parametrize("level", [0, 1])
def test_every_metric_equals_the_per_sample_reference(random_model, byte_fallback_tokenizer, eval_dir, level):
    probe = get_probe(f"level{level}", trial=False, batch_size=5)
    prep = probe.prepare(byte_fallback_tokenizer, eval_dir)
    got = probe.aggregate(prep, [probe.compute(random_model, byte_fallback_tokenizer, prep)], NO_CONTEXT)
    want = reference_metrics(random_model, prep, level)
    assert got.keys() == want.keys()
    for key in want:  # float32 sums of log-probs: batched vs one sample alone
        assert got[key] == pytest.approx(want[key], rel=1e-4, abs=1e-4), key


@pytest.mark.parametrize("level", [0, 1])
def test_expected_validity_equals_a_brute_force_loop_over_the_vocabulary(
    random_model, byte_fallback_tokenizer, eval_dir, level
):
    """p_valid@t and p_complete@t of every sample and step: the engine's one product with
    the (state, token) table equals the model's distribution from a fresh forward pass,
    summed token by token over the whole vocabulary by CPython's decoder."""
    probe = get_probe(f"level{level}", trial=False, batch_size=5)
    prep = probe.prepare(byte_fallback_tokenizer, eval_dir)
    r = decode_and_score(random_model, prep, probe.config)
    samples = fit_context(prep.samples, random_model, probe.config.max_new_tokens, prep.codec)
    pending_steps = 0
    for i, sample in enumerate(samples):
        n = int(r.lengths[i])
        p_valid, p_complete = expected_validity(random_model, prep, sample, r.tokens[i, :n].tolist())
        assert r.p_valid[i, :n] == pytest.approx(p_valid, abs=1e-5), i
        want = [np.nan if c is None else c for c in p_complete]
        assert r.p_complete[i, :n] == pytest.approx(want, abs=1e-5, nan_ok=True), i
        assert np.isnan(r.p_valid[i, n:]).all() and np.isnan(r.p_complete[i, n:]).all()
        pending_steps += sum(c is not None for c in p_complete)
    assert pending_steps and 0 < np.nanmin(r.p_valid) < np.nanmax(r.p_valid) < 1  # not a trivial table


def test_sharded_compute_equals_single_process(random_model, byte_fallback_tokenizer, eval_dir):
    probe = get_probe("level0", trial=False, batch_size=4)
    prep = probe.prepare(byte_fallback_tokenizer, eval_dir)
    single = probe.aggregate(prep, [probe.compute(random_model, byte_fallback_tokenizer, prep)], NO_CONTEXT)
    shards = [probe.compute(random_model, byte_fallback_tokenizer, prep, rank=r, world=3) for r in range(3)]
    assert probe.aggregate(prep, shards, NO_CONTEXT) == single


@pytest.mark.parametrize("level", [0, 1])
def test_per_sample_records_name_checkpoint_and_item(
    wide_model, byte_fallback_tokenizer, eval_dir, tmp_path, level
):
    """Two "checkpoints" write to one file; rows join to checkpoint and item by their fields."""
    out = tmp_path / "samples.jsonl"
    probe = get_probe(f"level{level}", trial=False, records=str(out))
    prep = probe.prepare(byte_fallback_tokenizer, eval_dir)
    for step in (1, 2):
        context = Context(f"step{step}.ckpt", step, 4096 * step)
        metrics = probe.aggregate(prep, [probe.compute(wide_model, byte_fallback_tokenizer, prep)], context)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    n = int(metrics[utf8_keys.level0(metric="n") if level == 0 else utf8_keys.level1(metric="n")])
    assert len(rows) == 2 * n
    by_key = {(r["checkpoint"], r["item_id"], r["k"]): r for r in rows}
    assert len(by_key) == 2 * n  # (checkpoint, item, k) names one row
    assert {(r["step"], r["tokens_seen"]) for r in rows} == {(1, 4096), (2, 8192)}
    item = "zh:U+2B740" if level == 0 else "level1.json[2]"
    row = by_key[("step2.ckpt", item, 2)]
    assert row["char"] == "𫝀" and row["probe"] == f"level{level}" and row["remainder"] == "9d80"
    assert row["prompt_bytes"].endswith("f0ab") and len(row["partial"]) == 5 and row["delta_ll"] is not None


def test_level0_and_level1_are_siblings_and_only_level1_reports_term_match():
    assert issubclass(Level0Probe, Utf8Probe) and issubclass(Level1Probe, Utf8Probe)
    assert not issubclass(Level1Probe, Level0Probe)
    assert Level1Probe.term_match and not Level0Probe.term_match


def test_an_unknown_prefix_is_refused():
    from bytecanary.errors import BytecanaryError

    with pytest.raises(
        BytecanaryError, match="probes: level1: prefix must be one of eos, bos, none, byte_space"
    ):
        get_probe("level1", prefix="space")
