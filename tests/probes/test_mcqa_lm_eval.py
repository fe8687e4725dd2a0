"""MCQA on lm-evaluation-harness tasks: a local two-language task (Jinja prompt, list choices,
index gold, 2-shot, json data files) scored by the mcqa probe and by lm-eval 0.4.13 on the
same tiny model; the letter strategies and McNemar on it; the one-line errors."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from tokenizers import Tokenizer
from tokenizers.processors import TemplateProcessing
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

from bytecanary import stats
from bytecanary.errors import BytecanaryError
from bytecanary.probes.mcqa.lm_eval_tasks import task_source
from bytecanary.probes.registry import NO_CONTEXT
from bytecanary.probes.specs import get_probe

from .conftest import assert_clear_argmax

LETTERS = ("letter_separate", "letter_merged")
REASON = "lm-eval is an optional extra: pip install -e '.[lm-eval]' (make test installs it)"

TEMPLATE = {
    "output_type": "multiple_choice",
    "dataset_path": "json",
    "training_split": "train",
    "test_split": "test",
    "fewshot_split": "train",
    "doc_to_text": "{{premise}}\n问：{{question}}\n答：",
    "doc_to_choice": "{{choices}}",
    "doc_to_target": "label",
    "num_fewshot": 2,
    "metric_list": [
        {"metric": "acc", "aggregation": "mean", "higher_is_better": True},
        {"metric": "acc_norm", "aggregation": "mean", "higher_is_better": True},
    ],
}
ZH = [  # options of one to four characters, so acc_norm (per character) can differ from acc
    ("北京很大", "哪里大", ["北京", "上海市", "广州"], 0),
    ("天很蓝", "什么蓝", ["天", "大海", "高山"], 0),
    ("猫在睡觉", "谁在睡", ["小狗", "猫", "一只鸟"], 1),
    ("水很冷", "什么冷", ["火", "大风", "冷水"], 2),
    ("书在桌上", "什么在桌上", ["书", "一支笔", "纸"], 0),
    ("他喝茶", "他喝什么", ["红酒", "茶", "开水"], 1),
    ("花是红的", "什么是红的", ["树叶", "青草", "花"], 2),
    ("雨下了", "什么下了", ["雨", "大雪", "浓雾"], 0),
    ("鱼在游", "谁在游", ["小鸟", "鱼", "一匹马"], 1),
]
JA = [
    ("東京は大きい", "大きいか", 0),
    ("空は青い", "赤いか", 1),
    ("猫が寝る", "寝るか", 0),
    ("水は冷たい", "熱いか", 1),
    ("本がある", "あるか", 0),
    ("茶を飲む", "飲むか", 2),
    ("花が赤い", "青いか", 1),
    ("雨が降る", "降るか", 0),
    ("魚が泳ぐ", "飛ぶか", 1),
]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def _write_tasks(root, newline=False):
    """Two tasks sharing a template (``include``): ``mc_zh`` says its language in its metadata,
    ``mc_ja`` does not (given in the probe entry) and has fixed choices and an empty delimiter.
    Each has 3 few-shot (train) and 6 test documents. With ``newline``, a third, ``mc_ja_nl``:
    ``mc_ja`` with the delimiter "\n"."""
    (root / "_template_yaml").write_text(yaml.safe_dump(TEMPLATE, allow_unicode=True), encoding="utf-8")
    zh = [{"premise": p, "question": q, "choices": c, "label": a} for p, q, c, a in ZH]
    ja = [{"premise": p, "question": q, "label": a} for p, q, a in JA]
    for lang, rows, extra in (
        ("zh", zh, {"metadata": {"version": 2.0, "language": "zh"}}),
        ("ja", ja, {"metadata": {"version": 1.0}, "doc_to_choice": ["はい", "いいえ", "たぶん"],
                    "target_delimiter": "", "doc_to_text": "{{premise}}。{{question}}："}),
    ):  # fmt: skip
        files = {"train": _jsonl(root / f"{lang}_train.jsonl", rows[:3]),
                 "test": _jsonl(root / f"{lang}_test.jsonl", rows[3:])}  # fmt: skip
        task = {"include": "_template_yaml", "task": f"mc_{lang}", "dataset_kwargs": {"data_files": files}}
        (root / f"mc_{lang}.yaml").write_text(yaml.safe_dump({**task, **extra}, allow_unicode=True), "utf-8")
        if lang == "ja" and newline:
            nl = {**task, **extra, "task": "mc_ja_nl", "target_delimiter": "\n"}
            (root / "mc_ja_nl.yaml").write_text(yaml.safe_dump(nl, allow_unicode=True), "utf-8")
    return root


@pytest.fixture(scope="module")
def lm_eval_tasks(tmp_path_factory):
    return _write_tasks(tmp_path_factory.mktemp("lm_eval_tasks"))


@pytest.fixture(scope="module")
def letter_tokenizer(byte_fallback_tokenizer):
    """The test tokenizer with ``A``..``C`` and ``▁A``..``▁C`` in its vocabulary, as real
    vocabularies have them: merged letters are then tokens of their own. (Without them both
    strategies score ``▁`` + the letter's byte, and rank options alike on any model.)"""
    spec = json.loads(byte_fallback_tokenizer.backend_tokenizer.to_str())
    vocab, merges = spec["model"]["vocab"], spec["model"]["merges"]
    for letter in "ABC":
        vocab[letter], vocab[f"▁{letter}"] = len(vocab), len(vocab) + 1
        merges.append(["▁", letter])
    specials = {
        k: getattr(byte_fallback_tokenizer, k) for k in ("unk_token", "bos_token", "eos_token", "pad_token")
    }
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)), **specials)


def _model(tokenizer):
    """A tiny random GPT-2 over the tokenizer's vocabulary, context long enough for the 2-shot prompts."""
    cfg = GPT2Config(vocab_size=len(tokenizer), n_positions=512, n_embd=32, n_layer=2, n_head=2,
                     initializer_range=0.5)  # fmt: skip
    torch.manual_seed(0)
    return GPT2LMHeadModel(cfg).eval()


@pytest.fixture(scope="module")
def letter_model(letter_tokenizer):
    return _model(letter_tokenizer)


def _variant(tokenizer, bos=False, merges=()):
    """``tokenizer`` adding BOS before every text as Llama's does (``bos``), or merging each
    pair of ``merges`` into one token, as a tokenizer may merge a context's end with the
    delimiter or the choice after it."""
    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    vocab = spec["model"]["vocab"]
    for a, b in merges:
        for token in (a, b, a + b):
            vocab.setdefault(token, len(vocab))
        spec["model"]["merges"].append([a, b])
    backend = Tokenizer.from_str(json.dumps(spec))
    if bos:
        backend.post_processor = TemplateProcessing(
            single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", tokenizer.bos_token_id)]
        )
    specials = {k: getattr(tokenizer, k) for k in ("unk_token", "bos_token", "eos_token", "pad_token")}
    return PreTrainedTokenizerFast(tokenizer_object=backend, **specials)


@pytest.fixture(scope="module", params=["adds BOS", "merges across the delimiter"])
def other_tokenizer(request, letter_tokenizer):
    if request.param == "adds BOS":
        return _variant(letter_tokenizer, bos=True)
    return _variant(letter_tokenizer, merges=[("：", "は"), ("：", "\n"), ("：", "い")])


@pytest.fixture
def offline(monkeypatch):
    """Nothing may reach a hub: lm-eval and datasets read local files only."""
    pytest.importorskip("lm_eval", reason=REASON)
    import datasets
    import huggingface_hub

    for name in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.setenv(name, "1")
    for module in (datasets.config, huggingface_hub.constants):  # both read the variables at import
        monkeypatch.setattr(module, "HF_HUB_OFFLINE", True)


def _tasks(root):
    return [
        {"name": "mc_zh", "source": "lm_eval", "include_path": str(root)},
        {"name": "mc_ja", "source": "lm_eval", "include_path": str(root), "language": "ja"},
    ]


def _probe(root, **params):
    return get_probe("mcqa", tasks=_tasks(root), embedded_per_language=0, nonsense_per_language=0, **params)


def _lm_eval_samples(model, tokenizer, root, tasks=("mc_zh", "mc_ja")):
    """lm-eval 0.4.13's own run on the same model: its logged samples per task, by doc_id."""
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=8, device="cpu")
    manager = TaskManager(include_path=str(root), include_defaults=False)
    out = simple_evaluate(model=lm, tasks=list(tasks), task_manager=manager, log_samples=True,
                          bootstrap_iters=0)  # fmt: skip
    return {task: {s["doc_id"]: s for s in samples} for task, samples in out["samples"].items()}, out


def test_cloze_equals_lm_eval_item_for_item(offline, lm_eval_tasks, letter_model, letter_tokenizer, tmp_path):
    records = tmp_path / "items.jsonl"
    probe = _probe(
        lm_eval_tasks, protocols=["letter_separate", "letter_merged", "cloze"], records=str(records)
    )
    views = probe.prepare(letter_tokenizer, None)
    got = probe.aggregate(views, [probe.compute(letter_model, letter_tokenizer, views)], NO_CONTEXT)
    theirs, results = _lm_eval_samples(letter_model, letter_tokenizer, lm_eval_tasks)
    rows = [json.loads(line) for line in records.read_text(encoding="utf-8").splitlines()]
    cloze = [r for r in rows if r["protocol"] == "cloze"]
    assert {(r["task"], r["doc_id"]) for r in cloze} == {(t, d) for t in theirs for d in theirs[t]}
    assert len(cloze) == 12
    contexts = {(v.item.task, v.item.doc_id): v.item.context for v in views}
    for r in cloze:
        sample = theirs[r["task"]][r["doc_id"]]
        assert r["source"] == "lm_eval" and r["item_id"] == str(r["doc_id"])
        assert r["task_version"] == results["versions"][r["task"]]
        # the same prompt, few-shot examples included, and the same continuations
        assert {ctx for ctx, _ in sample["arguments"]} == {contexts[r["task"], r["doc_id"]]}
        assert r["answer"] == sample["target"]
        their_ll = [float(resp[0]) for resp in sample["filtered_resps"]]
        np.testing.assert_allclose(r["ll"], their_ll, atol=1e-4, rtol=0)
        by_chars = np.array(r["ll"]) / [len(c) for c in r["choices"]]
        assert_clear_argmax(their_ll)  # accuracies below are compared across batchings
        assert_clear_argmax(by_chars)
        assert float(np.argmax(r["ll"]) == r["answer"]) == sample["acc"]
        assert float(np.argmax(by_chars) == r["answer"]) == sample["acc_norm"]
    assert any(s["acc"] != s["acc_norm"] for docs in theirs.values() for s in docs.values())
    for task in ("mc_zh", "mc_ja"):
        for metric in ("acc", "acc_norm"):
            assert got[f"probe/mcqa/{task}/cloze/{metric}"] == pytest.approx(
                results["results"][task][f"{metric},none"]
            )
    assert any("\n\n" in c for c in contexts.values())  # the two few-shot examples are in the prompts

    # the two letter strategies on the same items, McNemar between them as the records say
    for task in ("mc_zh", "mc_ja"):
        mine = [r for r in rows if r["task"] == task]
        correct = {
            p: [np.argmax(r["ll"]) == r["answer"] for r in mine if r["protocol"] == p] for p in LETTERS
        }
        p = got[f"probe/mcqa/{task}/mcnemar_p"]
        assert 0.0 <= p <= 1.0
        assert p == pytest.approx(_mcnemar(correct["letter_separate"], correct["letter_merged"]))
        assert p == pytest.approx(stats.mcnemar_exact(correct["letter_separate"], correct["letter_merged"]))
        for strategy in ("letter_separate", "letter_merged"):
            assert 0.0 <= got[f"probe/mcqa/{task}/{strategy}/acc"] <= 1.0
    separate = {r["doc_id"]: r["continuation_ids"] for r in rows if r["protocol"] == "letter_separate"}
    merged = {r["doc_id"]: r["continuation_ids"] for r in rows if r["protocol"] == "letter_merged"}
    assert all(separate[d] != merged[d] for d in separate)  # the strategies score different ids


def test_cloze_equals_lm_eval_where_the_tokenizer_adds_bos_or_merges(offline, other_tokenizer, tmp_path):
    """Issue 33: lm-eval encodes the context on its own (with the tokenizer's BOS) and scores
    what follows its length in the whole encoding, even where the tokenizer merges the
    context's end with a "" or "\n" delimiter's choice; the probe scores the same tokens."""
    (tmp_path / "tasks").mkdir()
    root = _write_tasks(tmp_path / "tasks", newline=True)
    names = ("mc_zh", "mc_ja", "mc_ja_nl")
    entries = [{"name": n, "source": "lm_eval", "include_path": str(root), "language": "ja"} for n in names]
    records = tmp_path / "items.jsonl"
    probe = get_probe("mcqa", tasks=entries, embedded_per_language=0, nonsense_per_language=0,
                      protocols=["cloze", "letter_merged"], records=str(records))  # fmt: skip
    model = _model(other_tokenizer)
    views = probe.prepare(other_tokenizer, None)
    got = probe.aggregate(views, [probe.compute(model, other_tokenizer, views)], NO_CONTEXT)
    theirs, results = _lm_eval_samples(model, other_tokenizer, root, names)
    rows = [json.loads(line) for line in records.read_text(encoding="utf-8").splitlines()]
    cloze = [r for r in rows if r["protocol"] == "cloze"]
    assert len(cloze) == 18
    for r in cloze:
        their_ll = [float(resp[0]) for resp in theirs[r["task"]][r["doc_id"]]["filtered_resps"]]
        np.testing.assert_allclose(r["ll"], their_ll, atol=1e-4, rtol=0)
    for task in names:
        for metric in ("acc", "acc_norm"):
            want = results["results"][task][f"{metric},none"]
            assert got[f"probe/mcqa/{task}/cloze/{metric}"] == pytest.approx(want)
    bos = other_tokenizer.bos_token_id
    adds_bos = other_tokenizer.encode("x")[0] == bos
    for v in views:  # every prompt, letters included, begins as lm-eval's context does
        assert all((p[0] == bos) == adds_bos for p, _ in v.encodings.values())
    if not adds_bos:  # the merges happen: some choice's whole encoding does not begin with its context's
        merged = [
            v.item.task
            for v in views
            for c in v.item.choices
            if other_tokenizer.encode(v.item.context + v.item.delimiter + c)[: len(v.encodings["cloze"][0])]
            != v.encodings["cloze"][0]
        ]
        assert {"mc_ja", "mc_ja_nl"} <= set(merged) and "mc_zh" not in merged


def test_lm_eval_pair_is_hflms_own_encoding(offline, other_tokenizer):
    from lm_eval.models.huggingface import HFLM

    from bytecanary.probes.mcqa.encoding import lm_eval_pair

    tok = other_tokenizer
    lm = HFLM(pretrained=_model(tok), tokenizer=tok, device="cpu")
    pairs = [("問：", "はい"), ("答：", "\nいいえ"), ("Answer: ", "A"), ("x", " y"), ("<s>x", " y")]
    for context, continuation in pairs:
        assert lm_eval_pair(tok, context, continuation) == tuple(
            map(list, lm._encode_pair(context, continuation))
        )
    # an empty context (an empty doc_to_text, zero-shot) is lm-eval's prefix token
    assert lm.prefix_token_id == tok.bos_token_id
    assert lm_eval_pair(tok, "", "はい") == ([tok.bos_token_id], tok.encode("はい", add_special_tokens=False))
    if tok.encode("x")[0] != tok.bos_token_id:  # the merging one: a choice swallowed whole is refused
        with pytest.raises(BytecanaryError, match="no tokens of its own after the context"):
            lm_eval_pair(tok, "問：", "は")


def test_add_special_tokens_forces_or_drops_bos_on_every_prompt(offline, lm_eval_tasks, letter_tokenizer):
    tokenizer = _variant(letter_tokenizer, bos=True)
    bos = tokenizer.bos_token_id
    for setting, first in ((None, True), (True, True), (False, False)):
        entry = {
            "name": "mc_zh",
            "source": "lm_eval",
            "include_path": str(lm_eval_tasks),
            "add_special_tokens": setting,
        }
        probe = get_probe("mcqa", tasks=[entry], embedded_per_language=0, nonsense_per_language=0,
                          protocols=["cloze", "letter_separate", "dashed"])  # fmt: skip
        for v in probe.prepare(tokenizer, None):
            prompts = [p for p, _ in v.encodings.values()] + list(v.prompts.values())
            assert prompts and all((p[0] == bos) == first and p[1] != bos for p in prompts)
    with pytest.raises(BytecanaryError, match="add_special_tokens: expected true, false or null, got 'yes'"):
        task_source(
            {
                "name": "mc_zh",
                "source": "lm_eval",
                "include_path": str(lm_eval_tasks),
                "add_special_tokens": "yes",
            }
        )


def _mcnemar(a, b):
    """Exact McNemar, straight from its definition: two-sided binomial(b + c, 1/2)."""
    from scipy.stats import binomtest

    b_only = sum(x and not y for x, y in zip(a, b, strict=True))
    c_only = sum(y and not x for x, y in zip(a, b, strict=True))
    return 1.0 if b_only + c_only == 0 else binomtest(b_only, b_only + c_only, 0.5).pvalue


def test_letter_prompts_show_lm_evals_few_shot_documents(offline, lm_eval_tasks, byte_fallback_tokenizer):
    pairs = [pair for entry in _tasks(lm_eval_tasks) for pair in task_source(entry).items()]
    assert [len(shots) for _, shots in pairs] == [2] * 12
    for item, shots in pairs:
        for shot in shots:  # each few-shot document's text and answer is in the cloze context
            assert f"{shot.question}{item.delimiter}{shot.choices[shot.answer]}" in item.context
        assert item.context.endswith(item.question)
    ja = [item for item, _ in pairs if item.task == "mc_ja"]
    assert {i.language for i in ja} == {"ja"} and {i.delimiter for i in ja} == {""}
    assert ja[0].choices == ("はい", "いいえ", "たぶん")
    # the letter prompt: both few-shot documents answered with their letter, then the question
    view = _probe(lm_eval_tasks, protocols=["letter_merged"]).prepare(byte_fallback_tokenizer, None)[0]
    prompt = byte_fallback_tokenizer.decode(view.encodings["letter_merged"][0])
    item, shots = next((i, s) for i, s in pairs if i == view.item)
    blocks = prompt.split("\n\n")
    assert len(blocks) == 3 and blocks[-1].startswith(f"Question: {item.question}\nA. {item.choices[0]}\n")
    for block, shot in zip(blocks, shots, strict=False):
        assert block.startswith(f"Question: {shot.question}\n") and block.endswith(
            f"Answer: {'ABC'[shot.answer]}"
        )


def test_the_fingerprint_follows_the_task_files(offline, tmp_path):
    root = _write_tasks(tmp_path)
    files = {f.name for f in _probe(root).eval_files(None)}
    assert {"mc_zh.yaml", "mc_ja.yaml", "_template_yaml", "zh_test.jsonl", "ja_train.jsonl"} <= files
    before = _probe(root).fingerprint(None)
    template = root / "_template_yaml"
    template.write_text(template.read_text(encoding="utf-8").replace("答：", "答案："), encoding="utf-8")
    after_yaml = _probe(root).fingerprint(None)
    data = root / "zh_test.jsonl"
    data.write_text(data.read_text(encoding="utf-8").replace("水很冷", "水很热"), encoding="utf-8")
    assert len({before, after_yaml, _probe(root).fingerprint(None)}) == 3


def test_an_empty_doc_to_text_scores_the_choices_as_lm_eval_does(
    offline, letter_model, letter_tokenizer, tmp_path
):
    """PAWS-X's form: no prompt, each choice the whole text; lm-eval scores each choice after
    its prefix token, and so does the probe."""
    rows = [{"s1": p, "s2": q, "label": i % 2} for i, (p, q, *_) in enumerate(ZH)]
    task = {**TEMPLATE, "task": "pawsish", "num_fewshot": 0, "doc_to_text": "", "target_delimiter": "",
            "doc_to_choice": "{{[s1 + '，对吗？是的，' + s2, s1 + '，对吗？不是，' + s2]}}",
            "metadata": {"version": 1.0, "language": "zh"},
            "dataset_kwargs": {"data_files": {"train": _jsonl(tmp_path / "tr.jsonl", rows[:3]),
                                              "test": _jsonl(tmp_path / "te.jsonl", rows[3:])}}}  # fmt: skip
    (tmp_path / "pawsish.yaml").write_text(yaml.safe_dump(task, allow_unicode=True), encoding="utf-8")
    records = tmp_path / "items.jsonl"
    entry = {"name": "pawsish", "source": "lm_eval", "include_path": str(tmp_path)}
    probe = get_probe("mcqa", tasks=[entry], embedded_per_language=0, nonsense_per_language=0,
                      protocols=["cloze", "letter_merged"], records=str(records))  # fmt: skip
    views = probe.prepare(letter_tokenizer, None)
    probe.aggregate(views, [probe.compute(letter_model, letter_tokenizer, views)], NO_CONTEXT)
    theirs, _ = _lm_eval_samples(letter_model, letter_tokenizer, tmp_path, ["pawsish"])
    cloze = [json.loads(x) for x in records.read_text(encoding="utf-8").splitlines()]
    cloze = [r for r in cloze if r["protocol"] == "cloze"]
    assert len(cloze) == 6 and all(v.encodings["cloze"][0] == [letter_tokenizer.bos_token_id] for v in views)
    for r in cloze:
        sample = theirs["pawsish"][r["doc_id"]]
        their_ll = [float(resp[0]) for resp in sample["filtered_resps"]]
        np.testing.assert_allclose(r["ll"], their_ll, atol=1e-4, rtol=0)
        by_chars = np.array(r["ll"]) / [len(c) for c in r["choices"]]
        assert_clear_argmax(their_ll)
        assert_clear_argmax(by_chars)
        assert (float(np.argmax(r["ll"]) == r["answer"]), float(np.argmax(by_chars) == r["answer"])) == (
            sample["acc"],
            sample["acc_norm"],
        )


def test_a_task_including_a_registry_yaml_with_its_functions_equals_lm_eval(
    offline, letter_model, letter_tokenizer, tmp_path
):
    """The user's YAML includes lm-eval's own xcopa_zh (which includes xcopa_et's, and whose
    ``doc_to_text``/``doc_to_choice`` are ``!function``s of the registry's utils.py) and
    points it at local data in XCOPA's schema."""
    import lm_eval

    registry = Path(lm_eval.__file__).parent / "tasks" / "xcopa"
    rows = [
        {"premise": f"{p}。", "choice1": c[0], "choice2": c[1], "question": ("cause", "effect")[i % 2],
         "label": min(a, 1), "idx": i}
        for i, (p, _, c, a) in enumerate(ZH)
    ]  # fmt: skip
    files = {
        "validation": _jsonl(tmp_path / "va.jsonl", rows[:3]),
        "test": _jsonl(tmp_path / "te.jsonl", rows[3:]),
    }
    task = {"include": str(registry / "default_zh.yaml"), "task": "my_xcopa_zh", "dataset_path": "json",
            "dataset_name": None, "dataset_kwargs": {"data_files": files},
            "metadata": {"version": 1.0, "language": "zh"}}  # fmt: skip
    (tmp_path / "my_xcopa_zh.yaml").write_text(yaml.safe_dump(task, allow_unicode=True), encoding="utf-8")
    records = tmp_path / "items.jsonl"
    entry = {"name": "my_xcopa_zh", "source": "lm_eval", "include_path": str(tmp_path)}
    probe = get_probe("mcqa", tasks=[entry], embedded_per_language=0, nonsense_per_language=0,
                      protocols=["cloze"], records=str(records))  # fmt: skip
    assert {registry / "utils.py", registry / "default_et.yaml"} <= set(probe.eval_files(None))
    views = probe.prepare(letter_tokenizer, None)
    probe.aggregate(views, [probe.compute(letter_model, letter_tokenizer, views)], NO_CONTEXT)
    theirs, _ = _lm_eval_samples(letter_model, letter_tokenizer, tmp_path, ["my_xcopa_zh"])
    lines = [json.loads(x) for x in records.read_text(encoding="utf-8").splitlines()]
    assert len(lines) == 6 and views[0].item.context.endswith(("因为", "所以"))  # the registry's connectors
    for r in lines:
        sample = theirs["my_xcopa_zh"][r["doc_id"]]
        their_ll = [float(resp[0]) for resp in sample["filtered_resps"]]
        np.testing.assert_allclose(r["ll"], their_ll, atol=1e-4, rtol=0)
        assert_clear_argmax(their_ll)
        assert float(np.argmax(r["ll"]) == r["answer"]) == sample["acc"]  # xcopa's only metric


WINO = [  # sentence with a blank, the two fill-ins, the gold ("1" or "2"), as Winogrande's rows
    ("猫追狗，因为_很饿。", "猫", "狗", "1"),
    ("水比油重，所以_沉下去。", "油", "水", "2"),
    ("书在桌上，_很旧。", "书", "桌子", "1"),
    ("鱼离开了水，_很快就死了。", "水", "鱼", "2"),
    ("雨停了，_出来了。", "太阳", "雨", "1"),
    ("花比草高，_更显眼。", "草", "花", "2"),
    ("车撞了树，_坏了。", "车", "树", "1"),
    ("山比河高，_更难爬。", "河", "山", "2"),
]


def test_a_multiple_input_task_scores_its_contexts_as_lm_eval_does(
    offline, letter_model, letter_tokenizer, tmp_path, capsys
):
    """Winogrande's form, from lm-eval's own YAML and functions, 2-shot on local data: each
    choice is a context, the continuation after the blank is shared, the gold is doc_to_text's
    index. Cloze equals lm-eval per document; the letter protocols are left out for it."""
    import lm_eval

    rows = [{"sentence": t, "option1": a, "option2": b, "answer": g} for t, a, b, g in WINO]
    files = {
        "train": _jsonl(tmp_path / "tr.jsonl", rows[:3]),
        "validation": _jsonl(tmp_path / "va.jsonl", rows[3:]),
    }
    task = {"include": str(Path(lm_eval.__file__).parent / "tasks" / "winogrande" / "default.yaml"),
            "task": "my_wino", "dataset_path": "json", "dataset_name": None, "num_fewshot": 2,
            "dataset_kwargs": {"data_files": files},
            "metadata": {"version": 1.0, "language": "zh"}}  # fmt: skip
    (tmp_path / "my_wino.yaml").write_text(yaml.safe_dump(task, allow_unicode=True), encoding="utf-8")
    records = tmp_path / "items.jsonl"
    entry = {"name": "my_wino", "source": "lm_eval", "include_path": str(tmp_path)}
    probe = get_probe("mcqa", tasks=[entry], embedded_per_language=0, nonsense_per_language=0,
                      protocols=["cloze", "letter_merged", "dashed"], records=str(records))  # fmt: skip
    probe.validate(None)
    assert "'my_wino': its choices are contexts" in capsys.readouterr().err
    views = probe.prepare(letter_tokenizer, None)
    got = probe.aggregate(views, [probe.compute(letter_model, letter_tokenizer, views)], NO_CONTEXT)
    theirs, results = _lm_eval_samples(letter_model, letter_tokenizer, tmp_path, ["my_wino"])
    lines = [json.loads(x) for x in records.read_text(encoding="utf-8").splitlines()]
    assert {r["protocol"] for r in lines} == {"cloze"} and len(lines) == 5
    for r in lines:
        sample = theirs["my_wino"][r["doc_id"]]
        assert (
            r["answer"] == {"1": 0, "2": 1}[sample["doc"]["answer"]] and len(r["choice_prompt_tail_ids"]) == 2
        )
        their_ll = [float(resp[0]) for resp in sample["filtered_resps"]]
        np.testing.assert_allclose(r["ll"], their_ll, atol=1e-4, rtol=0)
        assert_clear_argmax(their_ll)
        assert float(np.argmax(r["ll"]) == r["answer"]) == sample["acc"]
    assert got["probe/mcqa/my_wino/cloze/acc"] == pytest.approx(results["results"]["my_wino"]["acc,none"])
    assert not any("letter" in k or "dashed" in k for k in got)
    item = views[0].item  # two few-shot documents before each context, the blank's tail after
    assert all(c.count("\n\n") == 2 for c in item.contexts) and item.target.endswith("。")


def test_a_template_failing_on_a_later_document_is_one_line_naming_it(offline, tmp_path):
    root = _write_tasks(tmp_path)
    template = root / "_template_yaml"
    broken = "{% if premise == '鱼在游' %}{{ nothing.at_all }}{% endif %}{{premise}}\n问：{{question}}\n答："
    spec = yaml.safe_load(template.read_text(encoding="utf-8"))
    template.write_text(yaml.safe_dump({**spec, "doc_to_text": broken}, allow_unicode=True), encoding="utf-8")
    probe = get_probe("mcqa", tasks=_tasks(root)[:1], embedded_per_language=0, nonsense_per_language=0)
    with pytest.raises(BytecanaryError) as excinfo:
        probe.validate(None)
    assert _one_line(excinfo) == "lm-eval task 'mc_zh' doc 5: UndefinedError: 'nothing' is undefined"


def test_splits_whose_columns_differ_are_one_line_naming_the_cause(offline, tmp_path):
    train = _jsonl(tmp_path / "tr.jsonl", [{"q": "a", "choices": ["x", "y"], "label": 0}])
    test = _jsonl(tmp_path / "te.jsonl", [{"q": "a", "options": ["x", "y"], "label": 0}])
    task = {
        **TEMPLATE,
        "task": "cols",
        "num_fewshot": 0,
        "doc_to_text": "{{q}}",
        "doc_to_choice": "{{options}}",
        "dataset_kwargs": {"data_files": {"train": train, "test": test}},
        "metadata": {"version": 1.0, "language": "en"},
    }
    (tmp_path / "cols.yaml").write_text(yaml.safe_dump(task), encoding="utf-8")
    entry = {"name": "cols", "source": "lm_eval", "include_path": str(tmp_path)}
    probe = get_probe("mcqa", tasks=[entry], embedded_per_language=0, nonsense_per_language=0)
    with pytest.raises(BytecanaryError) as excinfo:
        probe.validate(None)
    assert _one_line(excinfo) == (
        "lm-eval task 'cols': cannot load: DatasetGenerationError: An error occurred while generating the "
        "dataset (caused by CastError: Couldn't cast ... because column names don't match)"
    )


def test_each_document_is_built_once_per_probe(offline, lm_eval_tasks, letter_tokenizer, monkeypatch):
    """Checking the items, preparing them and the fingerprint's files load each task once."""
    from lm_eval.tasks import TaskManager

    loads = []
    load = TaskManager.load
    monkeypatch.setattr(TaskManager, "load", lambda self, *a, **k: loads.append(a) or load(self, *a, **k))
    probe = _probe(lm_eval_tasks, protocols=["cloze"])
    probe.validate(None)
    probe.fingerprint(None)
    views = probe.prepare(letter_tokenizer, None)
    assert len(views) == 12 and len(loads) == 2  # one per task entry


def _one_line(excinfo) -> str:
    message = str(excinfo.value)
    assert "\n" not in message
    return message


def test_a_task_that_is_not_multiple_choice_is_one_line(offline, tmp_path):
    task = {"task": "gen_zh", "output_type": "generate_until", "dataset_path": "json",
            "dataset_kwargs": {"data_files": {"test": "nowhere.jsonl"}}, "test_split": "test",
            "doc_to_text": "{{q}}", "doc_to_target": "{{a}}"}  # fmt: skip
    (tmp_path / "gen.yaml").write_text(yaml.safe_dump(task), encoding="utf-8")
    entry = {"name": "gen_zh", "source": "lm_eval", "include_path": str(tmp_path), "language": "zh"}
    probe = get_probe("mcqa", tasks=[entry], embedded_per_language=0, nonsense_per_language=0)
    with pytest.raises(BytecanaryError) as excinfo:
        probe.validate(None)
    assert "'gen_zh'" in _one_line(excinfo) and "output_type generate_until" in str(excinfo.value)


def test_a_task_without_a_language_is_one_line(offline, lm_eval_tasks):
    tasks = [{"name": "mc_ja", "source": "lm_eval", "include_path": str(lm_eval_tasks)}]
    probe = get_probe("mcqa", tasks=tasks, embedded_per_language=0, nonsense_per_language=0)
    with pytest.raises(BytecanaryError, match="'mc_ja': no language") as excinfo:
        probe.validate(None)
    _one_line(excinfo)


def test_a_group_gives_its_language_to_the_tasks_that_say_none(offline, tmp_path):
    root = _write_tasks(tmp_path)
    group = {"group": "mc_both", "task": ["mc_zh", "mc_ja"]}
    (root / "mc_both.yaml").write_text(yaml.safe_dump(group), encoding="utf-8")
    entry = {"name": "mc_both", "source": "lm_eval", "include_path": str(root), "language": "ja"}
    languages = {(item.task, item.language) for item, _ in task_source(entry).items()}
    assert languages == {("mc_zh", "zh"), ("mc_ja", "ja")}  # mc_zh's metadata says zh


@pytest.mark.slow
def test_an_unknown_task_is_one_line(offline):
    probe = get_probe("mcqa", tasks=[{"name": "xcopa_zz", "source": "lm_eval", "language": "zh"}],
                      embedded_per_language=0, nonsense_per_language=0)  # fmt: skip
    with pytest.raises(BytecanaryError) as excinfo:
        probe.validate(None)
    assert "'xcopa_zz': not found" in _one_line(excinfo) and "did you mean 'xcopa_" in str(excinfo.value)


def test_without_the_extra_one_line_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "lm_eval", None)  # as if lm-eval were not installed
    with pytest.raises(BytecanaryError) as excinfo:
        get_probe("mcqa", tasks=[{"name": "xcopa_zh", "source": "lm_eval"}])
    assert "pip install -e '.[lm-eval]'" in _one_line(excinfo)


def test_an_unknown_source_or_parameter_is_one_line():
    with pytest.raises(BytecanaryError, match="source: unknown source 'lm-eval'"):
        get_probe("mcqa", tasks=[{"name": "x", "source": "lm-eval"}])
    pytest.importorskip("lm_eval", reason=REASON)
    with pytest.raises(BytecanaryError, match="unknown parameter 'schema'"):
        get_probe("mcqa", tasks=[{"name": "x", "source": "lm_eval", "schema": "mmlu"}])


def test_the_pin_is_the_extras_and_the_benchmarks():
    import tomllib
    from pathlib import Path

    from bytecanary.probes.mcqa.lm_eval_tasks import PIN

    root = Path(__file__).resolve().parents[2]
    extras = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert extras["optional-dependencies"]["lm-eval"] == [f"lm-eval[hf]{PIN}"]
    assert f"lm-eval[hf]{PIN}" in (root / "benchmarks" / "requirements-lmeval.txt").read_text(
        encoding="utf-8"
    )
