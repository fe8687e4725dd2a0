"""Level 0: byte-prefix prompts of every eval character, the paper tool's prompt convention,
published mixed-language files, trial subsets, key layout, eval sets checked up front."""

import json

import pytest

from bytecanary.errors import BytecanaryError
from bytecanary.probes import get_probe


def test_prompts_are_eos_space_then_byte_tokens(byte_fallback_tokenizer, eval_dir):
    tok = byte_fallback_tokenizer
    prep = get_probe("level0", trial=False).prepare(tok, eval_dir)
    s = next(x for x in prep.samples if x.char == "𫝀" and x.k == 2)
    assert s.prompt_ids[0] == tok.eos_token_id
    assert tok.convert_ids_to_tokens(list(s.prompt_ids[1:])) == ["▁", "<0xF0>", "<0xAB>"]
    assert s.prompt_bytes == b" \xf0\xab" and s.remainder == b"\x9d\x80"
    assert tok.convert_ids_to_tokens(list(s.gold_ids)) == ["<0x9D>", "<0x80>"]  # byte tokens, not ""
    assert s.item_id == "zh:U+2B740"


def test_byte_space_prefix_gives_the_paper_tools_prompt_ids(byte_fallback_tokenizer, eval_dir):
    """No separator, the byte token <0x20>, then the character's first k bytes as byte tokens."""
    tok = byte_fallback_tokenizer
    prep = get_probe("level0", trial=False, prefix="byte_space").prepare(tok, eval_dir)
    assert prep.samples
    for s in prep.samples:
        data = s.char.encode("utf-8")
        want = [tok.convert_tokens_to_ids(f"<0x{b:02X}>") for b in b" " + data[: s.k]]
        assert list(s.prompt_ids) == want and s.prompt_bytes == b" " + data[: s.k]


def _published(path, chars):
    """A Level 0 file in the paper's published shape: mixed languages, no language field."""
    entries = [
        {
            "char": c,
            "codepoint": ord(c),
            "hex": f"U+{ord(c):04X}",
            "count": n,
            "frequency": n / 100,
            "tier": t,
        }
        for c, n, t in chars
    ]
    path.write_text(json.dumps({"description": "cjk", "char_frequencies": entries}, ensure_ascii=False))
    return str(path)


def test_a_published_mixed_file_reports_every_language_it_holds(
    random_model, byte_fallback_tokenizer, tmp_path
):
    chars = [
        ("中", 9, "common"),
        ("가", 5, "common"),
        ("ア", 1, "rare"),
        ("€", 0, "unseen"),
        ("é", 2, "rare"),
    ]
    probe = get_probe("level0", trial=False, eval_sets=[_published(tmp_path / "cjk_400.json", chars)])
    got = probe.run(random_model, byte_fallback_tokenizer, None)
    assert {f"probe/level0/{lang}/all/partial" for lang in ("ja", "ko", "other", "zh")} <= got.keys()
    assert got["probe/level0/other/all/n"] == 3 + 2  # € has 3 bytes, é 2: k = 1..len
    assert "probe/level0/other/unseen/k2/strict" in got


def test_validate_reads_every_eval_set_before_any_model(tmp_path, eval_dir):
    get_probe("level0").validate(eval_dir)
    bad = tmp_path / "cjk.json"
    bad.write_text(json.dumps({"char_frequencies": [{"char": "中", "count": 1}]}))
    with pytest.raises(BytecanaryError, match=r"cjk\.json: char_frequencies\[0\]: missing tier"):
        get_probe("level0", eval_sets=[str(bad)]).validate(None)
    with pytest.raises(BytecanaryError, match="no eval sets"):
        get_probe("level0").validate(tmp_path)


def test_trial_takes_m_characters_spread_over_tiers(byte_fallback_tokenizer, eval_dir):
    prep = get_probe("level0", trial=True, per_language=3).prepare(byte_fallback_tokenizer, eval_dir)
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


def _level0_file(folder, lang, chars):
    entries = [
        {"char": c, "codepoint": ord(c), "hex": f"U+{ord(c):04X}", "count": 0, "frequency": 0.0, "tier": t}
        for c, t in chars
    ]
    (folder / f"level0_{lang}.json").write_text(json.dumps({"description": "t", "char_frequencies": entries}))


def test_tier_gap_is_common_minus_rare_over_the_samples_with_a_ci_over_characters(
    random_model, byte_fallback_tokenizer, tmp_path
):
    import numpy as np

    from bytecanary import stats
    from bytecanary.probes.utf8_keys import tier_gap

    folder = tmp_path / "evalsets"
    folder.mkdir()
    tiers = {"ja": ("語ア日本人", "鬱鑑麒麟驥龜"), "zh": ("中国人大", "龘齉麤靐爨"), "ko": ("한국어", "")}
    for lang, (common, rare) in tiers.items():
        _level0_file(
            folder, lang, [(c, "common") for c in common] + [(c, "rare") for c in rare] + [("𠀋", "unseen")]
        )
    out = tmp_path / "samples.jsonl"
    got = get_probe("level0", trial=False, batch_size=16, records=str(out)).run(
        random_model, byte_fallback_tokenizer, tmp_path
    )
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    value = {
        "partial": lambda r: r["partial"][-1],
        "strict": lambda r: r["strict"][-1],
        "p_valid": lambda r: r["p_valid"][0],
    }
    for group, langs in (("ja", ["ja"]), ("zh", ["zh"]), ("all", ["ja", "zh"])):  # ko has no rare character
        mine = [r for r in rows if r["language"] in langs]
        strata = {}
        for tier in ("common", "rare"):
            for lang in langs:
                ids = sorted({r["item_id"] for r in mine if r["tier"] == tier and r["language"] == lang})
                sums = np.array(
                    [
                        [sum(pick(r) for r in mine if r["item_id"] == i) for pick in value.values()]
                        for i in ids
                    ]
                )
                counts = np.array([float(sum(r["item_id"] == i for r in mine)) for i in ids])
                strata.setdefault(tier, []).append((sums, counts))
        cis = stats.clustered_gaps(strata["common"], strata["rare"], n_resamples=1000, seed=0)
        for (m, pick), ci in zip(value.items(), cis, strict=True):
            tier_mean = {t: np.mean([pick(r) for r in mine if r["tier"] == t]) for t in ("common", "rare")}
            assert got[tier_gap(group, m)] == pytest.approx(tier_mean["common"] - tier_mean["rare"], abs=1e-9)
            assert (got[tier_gap(group, m, "_lo")], got[tier_gap(group, m, "_hi")]) == (
                ci.lo,
                ci.hi,
            )
            assert ci.lo <= got[tier_gap(group, m)] <= ci.hi
    assert not any(k.startswith("probe/level0/ko/all/tier_gap") for k in got)  # no rare characters
