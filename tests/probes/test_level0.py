"""Level 0: byte-prefix prompts of every eval character, trial subsets, key layout."""

from probes import get_probe


def test_prompts_are_eos_space_then_byte_tokens(byte_fallback_tokenizer, eval_dir):
    tok = byte_fallback_tokenizer
    prep = get_probe("level0", trial=False).prepare(tok, eval_dir)
    s = next(x for x in prep.samples if x.char == "𫝀" and x.k == 2)
    assert s.prompt_ids[0] == tok.eos_token_id
    assert tok.convert_ids_to_tokens(list(s.prompt_ids[1:])) == ["▁", "<0xF0>", "<0xAB>"]
    assert s.prompt_bytes == b" \xf0\xab" and s.remainder == b"\x9d\x80"
    assert tok.convert_ids_to_tokens(list(s.gold_ids)) == ["<0x9D>", "<0x80>"]  # byte tokens, not ""


def test_trial_takes_m_characters_spread_over_tiers(byte_fallback_tokenizer, eval_dir):
    prep = get_probe("level0", per_language=3).prepare(byte_fallback_tokenizer, eval_dir)
    for lang in ("ja", "zh"):
        chosen = {(s.char, s.tier) for s in prep.samples if s.language == lang}
        assert len(chosen) == 3 and {t for _, t in chosen} == {"common", "rare", "unseen"}


def test_keys_cover_language_tier_and_prefix_length(random_model, byte_fallback_tokenizer, eval_dir):
    probe = get_probe("level0", trial=False, batch_size=8)
    got = probe.run(random_model, byte_fallback_tokenizer, eval_dir)
    assert {
        "probe/level0/zh/unseen/k3/partial",
        "probe/level0/zh/unseen/kfull/ema",
        "probe/level0/ja/common/kfull/strict",
        "probe/level0/ja/all/ppl",
    } <= got.keys()
    assert got["probe/level0/all/all/n"] == sum(
        len(c.encode()) for cs in ("語鬱𠀋ア", "中龘𫝀𪛖") for c in cs
    )
    assert not any(k.endswith("/term_match") for k in got)
