"""The mcqa probe against an independent one-pass-per-choice recomputation."""

import json

import numpy as np
import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from bytecanary import stats
from bytecanary.probes import get_probe
from bytecanary.probes.registry import NO_CONTEXT
from bytecanary.records import Context

from .conftest import assert_clear_argmax

ITEMS = [
    {"question": "2+2?", "choices": ["3", "4", "5", "6"], "answer": 1},
    {"question": "東京は?", "choices": ["都市", "川", "山", "海"], "answer": 0},
    {"question": "Sky color?", "choices": ["red", "blue", "green", "black"], "answer": 1},
    {"question": "首都?", "choices": ["北京", "上海", "广州", "深圳"], "answer": 0},
]


@pytest.fixture
def mmlu_file(tmp_path):
    path = tmp_path / "mmlu.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in ITEMS), encoding="utf-8")
    return str(path)


def _probe(mmlu_file, **kw):
    task = {"name": "mini", "schema": "mmlu", "language": "en", "path": "json", "split": "train",
            "data_files": [mmlu_file]}  # fmt: skip
    kw = {
        "trial": True,
        "embedded_per_language": 0,
        "nonsense_per_language": 6,
        "languages": ["ja", "zh"],
        "batch_size": 3,
        **kw,
    }
    return get_probe("mcqa", tasks=[task], **kw)


def _ll(model, prompt, cont):
    x = torch.tensor([prompt + cont])
    with torch.no_grad():
        lp = model(x).logits[0, :-1].log_softmax(-1).gather(-1, x[0, 1:, None]).squeeze(-1)
    return lp[len(prompt) - 1 :].sum().item()


def test_every_metric_equals_one_pass_per_choice(wide_model, byte_fallback_tokenizer, mmlu_file):
    probe = _probe(mmlu_file)
    views = probe.prepare(byte_fallback_tokenizer, None)
    got = probe.aggregate(views, [probe.compute(wide_model, byte_fallback_tokenizer, views)], NO_CONTEXT)
    for task in {v.item.task for v in views}:
        mine = [v for v in views if v.item.task == task]
        answers = [v.item.answer for v in mine]
        correct = {}
        for protocol in ("letter_separate", "letter_merged", "cloze"):
            lls = [
                np.array([_ll(wide_model, v.encodings[protocol][0], c) for c in v.encodings[protocol][1]])
                for v in mine
            ]
            for x in lls:  # accuracies are compared across batchings
                assert_clear_argmax(x)
            correct[protocol] = np.array([np.argmax(x) == a for x, a in zip(lls, answers, strict=True)])
            key = f"probe/mcqa/{task}/{protocol}"
            assert got[f"{key}/acc"] == pytest.approx(correct[protocol].mean())
            if protocol == "cloze":
                chars = [
                    np.argmax(x / [len(c) for c in v.item.choices]) == v.item.answer
                    for x, v in zip(lls, mine, strict=True)
                ]
                assert got[f"{key}/acc_norm"] == pytest.approx(np.mean(chars))
            else:
                probs = [np.exp(x - x.max()) / np.exp(x - x.max()).sum() for x in lls]
                conf = [p.max() for p in probs]
                assert got[f"{key}/ece"] == pytest.approx(
                    stats.ece(conf, correct[protocol]), abs=1e-4
                )  # float32 batching noise in the log-likelihoods
                brier = np.mean(
                    [((p - np.eye(len(p))[a]) ** 2).sum() for p, a in zip(probs, answers, strict=True)]
                )
                assert got[f"{key}/brier"] == pytest.approx(
                    brier, abs=1e-4
                )  # float32 batching noise in the log-likelihoods
        p = stats.mcnemar_exact(correct["letter_separate"], correct["letter_merged"])
        assert got[f"probe/mcqa/{task}/mcnemar_p"] == pytest.approx(p)
    assert got["probe/mcqa/mini/n"] == 4 and got["probe/mcqa/nonsenseqa_ja/n"] == 6


def test_records_reproduce_mcnemar_and_the_strategies_differ(
    wide_model, byte_fallback_tokenizer, mmlu_file, tmp_path
):
    out = tmp_path / "items.jsonl"
    probe = _probe(mmlu_file, records=str(out))
    views = probe.prepare(byte_fallback_tokenizer, None)
    got = probe.aggregate(views, [probe.compute(wide_model, byte_fallback_tokenizer, views)], NO_CONTEXT)
    rows = [r for r in map(json.loads, out.read_text().splitlines()) if r["task"] == "mini"]
    sep = [np.argmax(r["ll"]) == r["answer"] for r in rows if r["protocol"] == "letter_separate"]
    mer = [np.argmax(r["ll"]) == r["answer"] for r in rows if r["protocol"] == "letter_merged"]
    assert got["probe/mcqa/mini/mcnemar_p"] == pytest.approx(stats.mcnemar_exact(sep, mer))
    ids = {(r["item_id"], r["protocol"]): r["continuation_ids"] for r in rows if "continuation_ids" in r}
    assert all(ids[i, "letter_separate"] != ids[i, "letter_merged"] for i, _ in ids)


def test_records_of_two_checkpoints_join_by_checkpoint_and_item(byte_fallback_tokenizer, mmlu_file, tmp_path):
    """Two models probed into one file: every line names its checkpoint, step, task, protocol
    and item (the dataset's ``id`` column when it has one, else the row index)."""
    rows = [{**r, "id": f"q{i}"} for i, r in enumerate(ITEMS)]
    with_ids = tmp_path / "ids.jsonl"
    with_ids.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "items.jsonl"
    probe = _probe(str(with_ids), records=str(out), protocols=["letter_merged", "cloze"])
    views = probe.prepare(byte_fallback_tokenizer, None)
    lls = {}
    for step, seed in ((100, 0), (200, 1)):
        torch.manual_seed(seed)
        cfg = GPT2Config(
            vocab_size=len(byte_fallback_tokenizer), n_positions=512, n_embd=32, n_layer=1, n_head=2
        )
        model = GPT2LMHeadModel(cfg).eval()
        context = Context(f"ckpt{step}", step, step * 4096)
        probe.aggregate(views, [probe.compute(model, byte_fallback_tokenizer, views)], context)
        lls[step] = probe.compute(model, byte_fallback_tokenizer, views)["cloze"]
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    by_key = {(r["checkpoint"], r["task"], r["protocol"], r["item_id"]): r for r in lines}
    assert len(by_key) == len(lines) == 2 * 2 * len(views)  # no two lines share a key
    assert {r["item_id"] for r in lines if r["task"] == "mini"} == {f"q{i}" for i in range(4)}
    assert {r["item_id"] for r in lines if r["task"] == "nonsenseqa_ja"} == {str(i) for i in range(6)}
    for step in (100, 200):
        for i, v in enumerate(views):
            row = by_key[(f"ckpt{step}", v.item.task, "cloze", v.item.item_id)]
            assert row["step"] == step and row["tokens_seen"] == step * 4096
            np.testing.assert_allclose(row["ll"], lls[step][i, : len(v.item.choices)])


def test_a_mixed_language_file_becomes_one_task_per_language(wide_model, byte_fallback_tokenizer, tmp_path):
    rows = [{**r, "lang": lang} for r, lang in zip(ITEMS, ("en", "ja", "en", "zh"), strict=True)]
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    task = {"name": "mix", "schema": "mmlu", "path": "json", "split": "train", "data_files": [str(path)],
            "columns": {"language": "lang"}}  # fmt: skip
    probe = get_probe("mcqa", trial=True, tasks=[task], embedded_per_language=0, nonsense_per_language=0,
                      protocols=["cloze"])  # fmt: skip
    probe.validate(None)
    views = probe.prepare(byte_fallback_tokenizer, None)
    assert sorted((v.item.task, v.item.language, v.item.item_id) for v in views) == [
        ("mix_en", "en", "0"), ("mix_en", "en", "2"), ("mix_ja", "ja", "1"), ("mix_zh", "zh", "3")
    ]  # fmt: skip
    got = probe.aggregate(views, [probe.compute(wide_model, byte_fallback_tokenizer, views)], NO_CONTEXT)
    assert {k for k in got if k.endswith("/n")} == {f"probe/mcqa/mix_{g}/n" for g in ("en", "ja", "zh")}
    assert got["probe/mcqa/mix_en/n"] == 2


def test_sharded_equals_single_and_permutations(wide_model, byte_fallback_tokenizer, mmlu_file):
    probe = _probe(mmlu_file, permutations=True)
    views = probe.prepare(byte_fallback_tokenizer, None)
    assert len(views) == 4 * (4 + 6 + 6)
    single = probe.aggregate(views, [probe.compute(wide_model, byte_fallback_tokenizer, views)], NO_CONTEXT)
    shards = [probe.compute(wide_model, byte_fallback_tokenizer, views, rank=r, world=2) for r in range(2)]
    np.testing.assert_equal(probe.aggregate(views, shards, NO_CONTEXT), single)  # nan == nan
    assert 0 <= single["probe/mcqa/mini/letter_merged/acc_perm_spread"] <= 1


def test_prompts_longer_than_the_context_keep_their_end(random_model, byte_fallback_tokenizer, mmlu_file):
    """Each choice of a view that overflows the context is scored as lm-eval scores its
    request: one plain forward over ``(prompt + choice)[-(n + 1):][:-1]``."""
    probe = _probe(mmlu_file, shots=2, protocols=["letter_separate", "letter_merged", "cloze"])
    views = probe.prepare(byte_fallback_tokenizer, None)
    n = random_model.config.n_positions
    assert max(len(v.encodings["letter_merged"][0]) for v in views) > n
    payload = probe.compute(random_model, byte_fallback_tokenizer, views)
    got = probe.aggregate(views, [payload], NO_CONTEXT)
    assert got["probe/mcqa/mini/n"] == 2  # two items went into the shots
    checked = 0
    for protocol in ("letter_separate", "letter_merged", "cloze"):
        for row, view in enumerate(views):
            prompt, choices = view.encodings[protocol]
            for k, choice in enumerate(choices):
                ids = (prompt + choice)[-(n + 1) :]
                with torch.no_grad():
                    logits = random_model(torch.tensor([ids[:-1]])).logits[0].double().log_softmax(-1)
                want = sum(float(logits[len(ids) - 1 - len(choice) + j, t]) for j, t in enumerate(choice))
                assert payload[protocol][row, k] == pytest.approx(want, abs=1e-4)
                checked += len(prompt) + len(choice) - 1 > n
    assert checked > 0  # some choices overflowed, and each kept the end lm-eval keeps


def test_embedded_task_from_the_prepared_data(wide_model, byte_fallback_tokenizer, small_data):
    probe = get_probe("mcqa", trial=True, embedded_per_language=8, nonsense_per_language=0, languages=["zh"])
    views = probe.prepare(byte_fallback_tokenizer, small_data)
    got = probe.aggregate(views, [probe.compute(wide_model, byte_fallback_tokenizer, views)], NO_CONTEXT)
    assert got["probe/mcqa/wordcomp_zh/n"] == 8
    # cloze endings continue the context directly: no space token between them
    conts = views[0].encodings["cloze"][1]
    assert not any(byte_fallback_tokenizer.convert_ids_to_tokens(c[0]).startswith("▁") for c in conts)
