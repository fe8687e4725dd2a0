"""Level 1: the sentence before the target character, then its first bytes; Term Match."""

from bytecanary.probes import get_probe


def test_prompt_is_the_context_then_the_first_bytes(byte_fallback_tokenizer, eval_dir):
    tok = byte_fallback_tokenizer
    prep = get_probe("level1", trial=False).prepare(tok, eval_dir)
    char = "𫝀".encode()
    mine = [s for s in prep.samples if s.char == "𫝀"]
    assert sorted(s.k for s in mine) == [1, 2, 3]  # the complete character is no Level 1 prompt
    s = next(x for x in mine if x.k == 2)
    assert s.prompt_ids[0] == tok.eos_token_id
    assert s.prompt_bytes.endswith("北京很大".encode() + char[:2]) and s.remainder == char[2:]
    assert s.item_id == "level1.json[2]"


def test_byte_space_prefix_replaces_the_separator(byte_fallback_tokenizer, eval_dir):
    tok = byte_fallback_tokenizer
    prep = get_probe("level1", trial=False, prefix="byte_space").prepare(tok, eval_dir)
    s = next(x for x in prep.samples if x.char == "𫝀" and x.k == 2)
    context = tok.encode("北京很大", add_special_tokens=False)
    bytes_ = [tok.convert_tokens_to_ids(f"<0x{b:02X}>") for b in b"\xf0\xab"]
    assert list(s.prompt_ids) == [tok.convert_tokens_to_ids("<0x20>"), *context, *bytes_]


def test_keys_by_language_and_prefix_length_with_term_match(random_model, byte_fallback_tokenizer, eval_dir):
    got = get_probe("level1", trial=False, batch_size=8).run(random_model, byte_fallback_tokenizer, eval_dir)
    assert {"probe/level1/zh/k3/term_match", "probe/level1/ja/term_match", "probe/level1/all/n"} <= got.keys()
    assert 0 <= got["probe/level1/all/term_match"] <= 1
    assert got["probe/level1/all/n"] == 2 + 2 + 3  # k < length: 鬱 and 龘 have 3 bytes, 𫝀 4
