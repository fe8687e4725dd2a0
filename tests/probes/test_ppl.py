"""The held-out perplexity probe against a plain forward pass per window over text read
straight from the shards; its stream against the shards' ids; ranks; bad data folders."""

import json
import math

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

from bytecanary import display, keys
from bytecanary.errors import BytecanaryError
from bytecanary.probes import build_probes, get_probe
from bytecanary.probes.ppl import heldout
from bytecanary.probes.registry import NO_CONTEXT
from bytecanary.probes.runner import with_cli_params

BUDGET = 3000  # UTF-8 bytes per language: a few documents, a few windows at seq_len 48


@pytest.fixture(scope="module")
def data_tokenizer(small_data):
    return AutoTokenizer.from_pretrained(str(small_data / "tokenizer"))


@pytest.fixture(scope="module")
def long_model(data_tokenizer):
    """The data's own vocabulary and a context of 1024, so the default windows fit."""
    tok = data_tokenizer
    cfg = GPT2Config(
        vocab_size=len(tok), n_positions=1024, n_embd=32, n_layer=2, n_head=2, eos_token_id=tok.eos_token_id
    )
    torch.manual_seed(0)
    return GPT2LMHeadModel(cfg).eval()


def shard_documents(data_dir, budget: int) -> dict[str, tuple[list[np.ndarray], list[str]]]:
    """Per language, the leading documents' ids and texts, read without the probe: the val
    shards' ids back to back, cut after each eos, until the texts' bytes reach ``budget``."""
    index = json.loads((data_dir / "shards" / "index.json").read_text(encoding="utf-8"))
    data_tok = AutoTokenizer.from_pretrained(str(data_dir / "tokenizer"))
    out = {}
    for lang, entry in index["languages"].items():
        files = entry["val"]["files"]
        ids = np.concatenate(
            [np.fromfile(data_dir / "shards" / f["path"], dtype=index["dtype"]) for f in files]
        )
        ends = np.flatnonzero(ids == index["eos_id"])
        docs, texts, start = [], [], 0
        for end in ends:
            docs.append(ids[start:end])
            texts.append(data_tok.decode(ids[start:end].tolist()))
            start = end + 1
            if sum(len(t.encode("utf-8")) for t in texts) >= budget:
                break
        out[lang] = docs, texts
    return out


def reference(model, tok, data_dir, budget: int, seq_len: int) -> dict[str, float]:
    """ppl, bpb, tokens and bytes from one unbatched ``model(ids).logits`` per window."""
    sums: dict[str, list[float]] = {}
    for lang, (_, texts) in shard_documents(data_dir, budget).items():
        stream = [tok.eos_token_id]
        for text in texts:
            stream += [*tok.encode(text, add_special_tokens=False), tok.eos_token_id]
        nll = 0.0
        for lo in range(0, len(stream) - 1, seq_len):
            window = torch.tensor([stream[lo : lo + seq_len + 1]])
            with torch.no_grad():
                logits = model(window[:, :-1]).logits[0].float()
            nll += float(
                torch.nn.functional.cross_entropy(logits, window[0, 1:], reduction="none").double().sum()
            )
        sums[lang] = [nll, len(stream) - 1, sum(len(t.encode("utf-8")) for t in texts)]
    sums["all"] = [sum(s[i] for s in sums.values()) for i in range(3)]
    out = {}
    for lang, (nll, tokens, size) in sums.items():
        out[heldout(lang, "ppl")] = math.exp(nll / tokens)
        out[heldout(lang, "bpb")] = nll / math.log(2) / size
        out[heldout(lang, "tokens")] = tokens
        out[heldout(lang, "bytes")] = size
    return out


def assert_matches(got: dict[str, float], want: dict[str, float]) -> None:
    assert got.keys() == want.keys()
    for k, v in want.items():
        assert got[k] == (v if keys.metric_of(k) in ("tokens", "bytes") else pytest.approx(v, rel=1e-6)), k


@pytest.mark.parametrize("seq_len", [48, None])
def test_equals_a_plain_forward_per_window(seq_len, long_model, data_tokenizer, small_data):
    params = {"seq_len": seq_len} if seq_len else {}
    probe = get_probe("ppl", bytes=BUDGET, batch_size=3, **params)
    got = probe.run(long_model, data_tokenizer, small_data)
    want = reference(long_model, data_tokenizer, small_data, BUDGET, seq_len or 1024)
    assert_matches(got, want)
    langs = ("en", "ja", "ko", "zh")
    assert all(got[heldout(lang, "tokens")] > (seq_len or 1024) for lang in langs), "several windows"


def test_windows_capped_at_the_model_context(random_model, byte_fallback_tokenizer, small_data):
    """Another tokenizer than the data's, and a model of 64 positions: windows of 64."""
    got = get_probe("ppl", bytes=BUDGET).run(random_model, byte_fallback_tokenizer, small_data)
    assert_matches(got, reference(random_model, byte_fallback_tokenizer, small_data, BUDGET, 64))


def test_stream_is_the_shards_ids_under_the_data_tokenizer(data_tokenizer, gpt2_tokenizer, small_data):
    probe = get_probe("ppl", bytes=BUDGET)
    own = probe.prepare(data_tokenizer, small_data)
    docs = shard_documents(small_data, BUDGET)
    assert len(own.streams) == len(docs) == 4
    for stream, (ids, _) in zip(own.streams, docs.values(), strict=True):
        eos = data_tokenizer.eos_token_id
        assert stream.tolist() == [eos, *(t for d in ids for t in [*d.tolist(), eos])]
    other = probe.prepare(gpt2_tokenizer, small_data)
    assert [d.bytes for d in other.documents] == [d.bytes for d in own.documents]
    assert [d.tokens for d in other.documents] != [d.tokens for d in own.documents]
    assert all(len(a) != len(b) or (a != b).any() for a, b in zip(own.streams, other.streams, strict=True))


def test_ranks_add_up_to_one_process(long_model, data_tokenizer, small_data, tmp_path):
    records = tmp_path / "docs.jsonl"
    probe = get_probe("ppl", bytes=BUDGET, seq_len=40, batch_size=2, records=str(records))
    prepared = probe.prepare(data_tokenizer, small_data)
    single = probe.aggregate(prepared, [probe.compute(long_model, data_tokenizer, prepared)], NO_CONTEXT)
    shards = [probe.compute(long_model, data_tokenizer, prepared, rank=r, world=2) for r in range(2)]
    assert all(len(s["index"]) for s in shards), "both ranks have windows"
    np.testing.assert_equal(probe.aggregate(prepared, shards, NO_CONTEXT), single)
    rows = [json.loads(line) for line in records.read_text(encoding="utf-8").splitlines()]
    first = rows[: len(rows) // 2]  # the single process's lines: one per document
    assert len(first) == len(prepared.documents)
    total_nll = sum(r["nll"] for r in first)
    assert sum(r["tokens"] for r in first) == single[heldout("all", "tokens")]
    assert math.exp(total_nll / sum(r["tokens"] for r in first)) == pytest.approx(single[heldout()])


def test_missing_data_folder_or_index_is_one_line(tmp_path):
    probe = get_probe("ppl", eval_sets=[str(tmp_path / "nowhere")])
    with pytest.raises(BytecanaryError, match=r"nowhere: no such folder .*--eval_sets.ppl=DATA_DIR") as err:
        probe.validate(None)
    assert "\n" not in str(err.value)
    (tmp_path / "default").mkdir()
    want = (
        f"{tmp_path / 'default' / 'shards' / 'index.json'}: no such file (run bytecanary prepare "
        "--config configs/data/default.yaml first, or give --eval_sets.ppl=DATA_DIR)"
    )
    with pytest.raises(BytecanaryError) as err:
        get_probe("ppl").validate(tmp_path / "default")
    assert str(err.value) == want


def test_data_folder_from_the_command_line(small_data):
    (spec,) = with_cli_params([{"name": "ppl"}], False, {"ppl": str(small_data)})
    (probe,) = build_probes([spec])
    assert probe.config.eval_sets == [str(small_data)]
    probe.validate(None)
    assert probe.eval_files(None)[0] == small_data / "shards" / "index.json"
    with pytest.raises(BytecanaryError, match="eval_sets must name one data folder"):
        get_probe("ppl", eval_sets=["a", "b"])


def test_display_charts_ppl_and_bpb_and_tables_them():
    names = [heldout(lang, m) for lang in ("en", "all") for m in ("ppl", "bpb", "tokens", "bytes")]
    title, columns = display.columns("ppl", names)
    assert title == "Held-out perplexity"
    assert columns[:2] == [("ppl", heldout(metric="ppl")), ("bpb", heldout(metric="bpb"))]
    assert columns[2:] == [("en", heldout("en", "bpb"))]
    charted = {k for k in names if display.display_of("ppl").headline(keys.read(k))}
    assert charted == {heldout(lang, m) for lang in ("en", "all") for m in ("ppl", "bpb")}
