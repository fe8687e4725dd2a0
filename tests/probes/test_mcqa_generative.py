"""Matched-and-Dashed and the prompt wrappers: extraction rules, TF-IDF matching, FSI/PSI,
and the probe's generative metrics against an independent per-prompt recomputation."""

import json
import math
import re

import numpy as np
import pytest

from bytecanary.probes import get_probe
from bytecanary.probes.mcqa import wrappers
from bytecanary.probes.mcqa.dashed import Matcher, extract, tfidf_similarities
from bytecanary.probes.mcqa.generation import stop_strings
from bytecanary.probes.mcqa.keys import GENERATED_PROTOCOLS, WRAPPER_FAMILIES
from bytecanary.probes.mcqa.prompts import content, dashed
from bytecanary.probes.mcqa.tasks import McqaItem
from bytecanary.probes.registry import NO_CONTEXT

from .conftest import generate_alone

CHOICES = ("the red house", "a blue car", "green tea", "black cat")


@pytest.mark.parametrize(
    ("response", "text", "rule"),
    [
        ("I think the answer is a blue car. Wait, the answer is green tea", "green tea", "answer_is"),
        ("the answer  is:  black cat", "black cat", "answer_is"),
        ("Answer: red house\nmore\nAnswer: black cat", "black cat", "answer_colon"),
        ("hmm, the red house or a blue car", "the red house", "option_text"),
        ("Nothing here. Something else entirely!", "Something else entirely!", "last_sentence"),
        ("文は長い。最後の文です。", "最後の文です。", "last_sentence"),
        ("   \n ", "", "none"),
    ],
)
def test_the_extraction_hierarchy(response, text, rule):
    assert extract(response, CHOICES) == (text, rule)


def _tfidf_dense(answer, choices, sizes=(1, 2, 3)):
    """Straightforward dense TF-IDF over an explicit vocabulary of the choices' n-grams."""

    def grams(t):
        t = f" {t.lower()} "
        return [t[i : i + n] for n in sizes for i in range(len(t) - n + 1) if t[i : i + n].strip()]

    vocab = sorted({g for c in choices for g in grams(c)})
    df = np.array([sum(g in grams(c) for c in choices) for g in vocab])
    idf = np.log((1 + len(choices)) / (1 + df)) + 1
    docs = np.array([[grams(c).count(g) for g in vocab] for c in choices]) * idf
    q_all = grams(answer)
    q = np.array([q_all.count(g) for g in vocab]) * idf
    extra = sum(q_all.count(g) ** 2 for g in set(q_all) if g not in vocab)  # unseen n-grams, idf 1
    q_norm = math.sqrt(float(q @ q) + extra)
    return np.array([(q @ d) / (np.linalg.norm(d) * q_norm) for d in docs])


@pytest.mark.parametrize("answer", ["a blue car", "blue", "猫", "the cat is black", "zzz"])
def test_tfidf_equals_a_dense_computation(answer):
    choices = (*CHOICES, "黒い猫")
    assert np.allclose(tfidf_similarities(answer, choices), _tfidf_dense(answer, choices))


def test_matching_picks_the_nearest_option_and_refuses_no_overlap():
    m = Matcher()
    assert m.match("blue car", CHOICES) == 1
    assert m.match("", CHOICES) == -1
    assert m.match("ZQX", ("ab", "cd")) == -1  # no shared n-gram: no match, not option A


def test_an_unknown_similarity_model_is_a_clear_error():
    from bytecanary.errors import BytecanaryError

    with pytest.raises(BytecanaryError, match="similarity"):
        Matcher("/nonexistent/model")


ITEM = McqaItem("t", "en", "What is red?", ("fire", "sky", "grass", "coal"), 0)


def test_wrappers_share_content_and_character_budget():
    prompts = {f: wrappers.wrap(ITEM, f) for f in WRAPPER_FAMILIES}
    assert len(set(map(len, prompts.values()))) == 1
    assert all(content(ITEM) in p for p in prompts.values())
    assert "─ fire" in dashed(ITEM).splitlines()
    cont = McqaItem("w", "en", "The sun is ho", ("t", "x", "q", "z"), 0, True, "")
    assert dashed(cont).endswith("The sun is ho")


@pytest.mark.parametrize(
    ("family", "generation", "strict", "normalised"),
    [
        ("plain", " B\nQuestion", 1, 1),
        ("plain", " b", -1, 1),
        ("plain", " sky", -1, 1),
        ("json", 'C"}', 2, 2),
        ("json", 'C", "why": "x"}', -1, 2),
        ("json", 'E"}', -1, -1),
        ("structured", " D\nnext", 3, 3),
        ("structured", " (d)", -1, 3),
        ("structured_delim", " A ###", 0, 0),
        ("deliberate", " fire is red\nfinal answer: A", 0, 0),
        ("deliberate", " Final Answer - (b)", -1, 1),
        ("deliberate", " nothing", -1, -1),
    ],
)
def test_strict_and_normalised_extraction(family, generation, strict, normalised):
    text = wrappers.response(family, generation)
    assert wrappers.extract_strict(family, text, 4) == strict
    assert wrappers.extract_normalised(family, text, ITEM.choices) == normalised


@pytest.mark.parametrize("family", ["plain", "json", "structured", "structured_delim"])
def test_a_strict_grade_cannot_change_after_the_stop(family):
    """Whatever follows the stop string, the strict format reads the same before and after
    the cut: stopping there loses no answer and spares the rest of the decoding (json: but
    for an object broken over lines after its one-line opening)."""
    pieces = [" B", " C", "B", 'B"', ".", ")", '"', '"}', "}", " ", "\t", "\n", "\n\n", "###", " ### ",
              "answer: D", 'answer": "A"}', "{", ", ", '"x": 1', "final answer: C"]  # fmt: skip
    rng = np.random.default_rng(0)
    stops = [s.decode() for s in stop_strings(f"wrapper_{family}")]
    broken = 0
    for _ in range(4000):
        generation = "".join(rng.choice(pieces, rng.integers(1, 7)))
        cut = generation
        for stop in stops:
            cut = cut.split(stop)[0]
        full, stopped = (
            wrappers.extract_strict(family, wrappers.response(family, g), 4) for g in (generation, cut)
        )
        if family == "json" and "\n" in generation.split("}")[0]:
            broken += full >= 0 and stopped < 0
            continue
        assert stopped == full, generation
    assert broken > 0 or family != "json"  # the one case a newline loses does occur here


def test_sensitivity_indices_and_their_bootstrap():
    rng = np.random.default_rng(0)
    correct = rng.random((40, 5, 2)) < np.linspace(0.2, 0.8, 5)[None, :, None]
    parsable = rng.random((40, 5, 2)) < 0.7
    got = wrappers.sensitivity(correct, parsable, n_resamples=200, seed=3)
    acc = [correct[:, f].mean() for f in range(5)]
    par = [parsable[:, f].mean() for f in range(5)]
    assert got["fsi"] == pytest.approx(max(acc) - min(acc))
    assert got["psi"] == pytest.approx(max(par) - min(par))
    assert got["nfsi"] == pytest.approx((max(acc) - min(acc)) / (np.mean(acc) + 1e-6))
    draws = np.random.default_rng(3).integers(0, 40, (200, 40))
    accs = [correct[d].mean(axis=(0, 2)) for d in draws]
    by_index = {
        "fsi": [np.ptp(a) for a in accs],
        "psi": [np.ptp(parsable[d].mean(axis=(0, 2))) for d in draws],
        "nfsi": [np.ptp(a) / (a.mean() + 1e-6) for a in accs],
    }
    for name, values in by_index.items():  # each index over the same resamples
        want = tuple(np.percentile(values, [2.5, 97.5]))
        assert (got[f"{name}_lo"], got[f"{name}_hi"]) == pytest.approx(want), name
    assert wrappers.delta_tok(np.array([[100, 104, 96]])) == pytest.approx(8 / 100)


def _probe(**kw):
    return get_probe(
        "mcqa",
        trial=True,
        embedded_per_language=0,
        nonsense_per_language=5,
        languages=["en", "ja"],
        protocols=["letter_separate", "dashed", *(f"wrapper_{f}" for f in WRAPPER_FAMILIES)],
        batch_size=3,
        **kw,
    )


def test_generated_metrics_equal_generate_on_each_prompt_alone(wide_model, byte_fallback_tokenizer, tmp_path):
    tok = byte_fallback_tokenizer
    out = tmp_path / "items.jsonl"
    probe = _probe(records=str(out))
    views = probe.prepare(tok, None)
    got = probe.aggregate(views, [probe.compute(wide_model, tok, views)], NO_CONTEXT)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    line = {(r["task"], r["item_id"], r["rotation"], r["protocol"]): r for r in rows}
    matcher = Matcher()
    for view in views:
        for p, ids in view.prompts.items():
            row = line[(view.item.task, view.item.item_id, view.rotation, p)]
            stops = [s.decode() for s in stop_strings(p)]
            ref = generate_alone(wide_model, ids, 24, tok, stop_strings=stops)
            ref = ref[:-1] if ref and ref[-1] == tok.eos_token_id else ref
            raw = b"".join(
                bytes([int(t[3:5], 16)])
                if re.fullmatch(r"<0x[0-9A-F]{2}>", t)
                else t.replace("▁", " ").encode()
                for t in tok.convert_ids_to_tokens(ref)
                if t not in tok.all_special_tokens  # special tokens spell no text
            )
            for stop in stops:  # lm-evaluation-harness's cut
                raw = raw.split(stop.encode())[0]
            text = raw.decode("utf-8", errors="replace")

            assert row["generated"] == [text]
            if p == "dashed":
                answer, _ = extract(row["generated"][0], view.item.choices)
                assert row["prediction"] == [matcher.match(answer, view.item.choices)]
            else:
                f = p.removeprefix("wrapper_")
                response = wrappers.response(f, row["generated"][0])
                assert row["prediction"] == [wrappers.extract_strict(f, response, 4)]
    for task in ("nonsenseqa_en", "nonsenseqa_ja"):
        of = {p: [r for r in rows if r["task"] == task and r["protocol"] == p] for p in GENERATED_PROTOCOLS}
        acc = {}
        for f in WRAPPER_FAMILIES:
            mine = of[f"wrapper_{f}"]
            preds = [r["prediction"][0] for r in mine]
            acc[f] = np.mean([p == r["answer"] for p, r in zip(preds, mine, strict=True)])
            assert got[f"probe/mcqa/{task}/wrapper_{f}/acc"] == pytest.approx(acc[f])
            assert got[f"probe/mcqa/{task}/wrapper_{f}/parsable"] == pytest.approx(
                np.mean([p >= 0 for p in preds])
            )
        assert got[f"probe/mcqa/{task}/fsi"] == pytest.approx(max(acc.values()) - min(acc.values()))
        mine = of["dashed"]
        dashed_acc = np.mean([r["prediction"][0] == r["answer"] for r in mine])
        assert got[f"probe/mcqa/{task}/dashed/acc"] == pytest.approx(dashed_acc)
        assert got[f"probe/mcqa/{task}/dashed/chance_distance"] == pytest.approx(abs(dashed_acc - 0.25))
        hits = [r["prediction"][0] == r["answer"] for r in mine if r["prediction"][0] >= 0]
        assert got[f"probe/mcqa/{task}/dashed/matched"] == pytest.approx(len(hits) / len(mine))
        assert got[f"probe/mcqa/{task}/dashed/acc_matched"] == pytest.approx(np.mean(hits), nan_ok=True)
        rules = sum(got[f"probe/mcqa/{task}/dashed/rule_{r}"] for r in ("answer_is", "answer_colon",
                    "option_text", "last_sentence", "none"))  # fmt: skip
        assert rules == pytest.approx(1.0)
    fsis = [got[f"probe/mcqa/{t}/fsi"] for t in ("nonsenseqa_en", "nonsenseqa_ja")]
    assert got["probe/mcqa/all/fsi"] == pytest.approx(np.mean(fsis))
    assert got["probe/mcqa/all/fsi_lo"] <= got["probe/mcqa/all/fsi"] <= got["probe/mcqa/all/fsi_hi"]


def test_sampled_generation_is_the_same_sharded(wide_model, byte_fallback_tokenizer):
    probe = _probe(seeds=2, generative_per_task=3)
    views = probe.prepare(byte_fallback_tokenizer, None)
    assert sum(bool(v.prompts) for v in views) == 6
    single = probe.compute(wide_model, byte_fallback_tokenizer, views)
    shards = [probe.compute(wide_model, byte_fallback_tokenizer, views, rank=r, world=2) for r in range(2)]
    np.testing.assert_equal(
        probe.aggregate(views, shards, NO_CONTEXT), probe.aggregate(views, [single], NO_CONTEXT)
    )  # nan == nan
    texts = single["generated"]
    assert texts.shape[2] == 2 and (texts[:, :, 0] != texts[:, :, 1]).any()  # two seeds, two samples


def test_token_matched_subset_and_wins():
    from bytecanary.probes.mcqa.aggregate import wrapper_indices, wrapper_wins
    from bytecanary.probes.mcqa.generation import Grades
    from bytecanary.probes.mcqa.views import View

    rng = np.random.default_rng(5)
    n, fams = 30, [f"wrapper_{f}" for f in WRAPPER_FAMILIES]
    views = [View(McqaItem("t", "en", f"q{i}", ("a", "b", "c", "d"), i % 4), 0, {}) for i in range(n)]
    grades = {}
    for j, f in enumerate(fams):
        predicted = rng.integers(-1, 4, (n, 2))
        tokens = np.where(np.arange(n) < 10, 100, 100 + 10 * j)  # 10 items matched
        grades[f] = Grades(predicted, predicted, np.full((n, 2), "", dtype=object), tokens)
    got = wrapper_indices(grades, views, list(range(n)), fams, seed=0)
    answers = np.array([i % 4 for i in range(n)])[:, None]
    acc = [(grades[f].predicted[:10] == answers[:10]).mean() for f in fams]
    assert got["matched_share"] == pytest.approx(10 / n)
    assert got["fsi_matched"] == pytest.approx(max(acc) - min(acc))
    assert got["fsi_matched_lo"] <= got["fsi_matched_hi"]
    full = [(grades[f].predicted == answers).mean() for f in fams]
    wins = wrapper_wins(grades, views, list(range(n)), fams)
    assert [wins[f] for f in fams] == [float(a == max(full)) for a in full]
