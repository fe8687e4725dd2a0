"""MCQA cloze throughput against lm-evaluation-harness: the same model, the same items.

The model is a random GPT-2 medium shape (312M, the prepared 8K tokenizer), saved with
``save_pretrained`` so both sides load the same files. Items are the first word-completion
items of each language of the prepared data, written as one mixed-language jsonl (``id``,
``question``, ``choices``, ``answer``, ``language``). Ours is the ``mcqa`` probe (cloze
only, one task per language through the ``language`` column); lm-eval 0.4.13 runs the same
rows as a ``multiple_choice`` task (``Question: ...\\nAnswer:``, delimiter " ") through its
Python API, in its own virtualenv (``benchmarks/requirements-lmeval.txt``). Each side runs
in its own process, so its peak RSS is its own; the timed part is the evaluation (tokenising,
scoring, metrics), not imports or loading the model. Every item's log-likelihoods must agree
within 1e-4 and its acc and acc_norm must be equal.

A pass per option (lm-eval) costs sum(P + C) tokens per item where one pass over the
shared prompt costs P + 4C, so sharing can save at most 4(P+C)/(P+4C) with P prompt and C
continuation tokens: the ratio is printed beside that bound.

``--case lm-eval-task`` runs an lm-eval task through both instead: the 1,024 word-completion
items as a local task YAML, 5-shot from 24 of them, 1,000 documents. Ours is the probe's
``source: lm_eval`` entry, timed in two parts, building the items (lm-eval loads the task
and renders each document's few-shot context, once for checking and preparing alike) and
scoring them; lm-eval's is ``simple_evaluate`` on the same YAML.

    python benchmarks/mcqa_throughput.py --against lm-eval [--items 64] [--venv .venv-lmeval]
    python benchmarks/mcqa_throughput.py --case lm-eval-task --model tiny --venv .venv
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bytecanary.probes.registry import NO_CONTEXT

TASK = "bytecanary_cloze"
LANGUAGES = ("en", "ja", "ko", "zh")
SHOTS, FEWSHOT_POOL = 5, 6  # the lm-eval task case: 5-shot from the first 6 items of each language


def write_inputs(shape: str, data: str, items: int, folder: Path) -> tuple[Path, Path]:
    """The saved random model and the items file both sides read."""
    import torch
    from probe_throughput import SHAPES  # beside this script
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    tokenizer = AutoTokenizer.from_pretrained(f"{data}/tokenizer")
    torch.manual_seed(0)
    cfg = GPT2Config(
        vocab_size=len(tokenizer),
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
        **SHAPES[shape],
    )
    model_dir = folder / "model"
    GPT2LMHeadModel(cfg).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    rows = []
    for lang in LANGUAGES:
        lines = (Path(data) / "evalsets" / f"mcqa_wordcomp_{lang}.jsonl").read_text(encoding="utf-8")
        for line in lines.splitlines()[: items // len(LANGUAGES)]:
            r = json.loads(line)
            rows.append({k: r[k] for k in ("id", "question", "choices", "answer", "language")})
    items_file = folder / "items.jsonl"
    items_file.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return model_dir, items_file


def write_task(items: Path) -> Path:
    """The lm-eval task case: every word-completion item as a local task YAML beside
    ``items``, 5-shot from the first items of each language, the rest its documents."""
    import yaml

    rows = [json.loads(line) for line in items.read_text(encoding="utf-8").splitlines()]
    pool = {r["language"]: [] for r in rows}
    for r in rows:
        pool[r["language"]].append(r)
    train = [r for lang in pool for r in pool[lang][:FEWSHOT_POOL]]
    test = [r for lang in pool for r in pool[lang][FEWSHOT_POOL:]]
    for name, part in (("train", train), ("test", test)):
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in part)
        (items.parent / f"{name}.jsonl").write_text(text, encoding="utf-8")
    task = {
        "task": TASK,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {n: str(items.parent / f"{n}.jsonl") for n in ("train", "test")}},
        "training_split": "train",
        "fewshot_split": "train",
        "test_split": "test",
        "output_type": "multiple_choice",
        "num_fewshot": SHOTS,
        "doc_to_text": "Question: {{question}}\nAnswer:",
        "doc_to_choice": "{{choices}}",
        "doc_to_target": "answer",
        "metric_list": [{"metric": "acc"}, {"metric": "acc_norm"}],
        "metadata": {"version": 1.0, "language": "en"},
    }
    (items.parent / f"{TASK}.yaml").write_text(yaml.safe_dump(task, allow_unicode=True), encoding="utf-8")
    return items.parent


def run_ours_task(model_dir: str, folder: str, batch: int) -> dict:
    """The mcqa probe on the lm-eval task: build (check and prepare) and score seconds apart."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from bytecanary.probes import get_probe

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    records = Path(folder) / "ours.jsonl"
    entry = {"name": TASK, "source": "lm_eval", "include_path": folder}
    probe = get_probe("mcqa", tasks=[entry], embedded_per_language=0, nonsense_per_language=0,
                      protocols=["cloze"], trial=False, batch_size=batch, records=str(records))  # fmt: skip
    with torch.no_grad():
        start = time.perf_counter()
        probe.validate(None)
        views = probe.prepare(tokenizer, None)
        built = time.perf_counter()
        probe.aggregate(views, [probe.compute(model, tokenizer, views)], NO_CONTEXT)
        done = time.perf_counter()
    rows = map(json.loads, records.read_text(encoding="utf-8").splitlines())
    return {
        "seconds": done - start,
        "build": built - start,
        "score": done - built,
        "lls": {str(r["doc_id"]): r["ll"] for r in rows},
        "P": sum(len(v.encodings["cloze"][0]) for v in views) / len(views),
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def run_lm_eval_task(model_dir: str, folder: str, batch: int) -> dict:
    """lm-evaluation-harness on the same task YAML: its per-document log-likelihoods and acc."""
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    lm = HFLM(pretrained=model_dir, device="cpu", batch_size=batch, dtype="float32")
    manager = TaskManager(include_path=folder, include_defaults=False)
    start = time.perf_counter()
    out = simple_evaluate(model=lm, tasks=[TASK], task_manager=manager, log_samples=True, bootstrap_iters=0)
    seconds = time.perf_counter() - start
    samples = out["samples"][TASK]
    return {
        "seconds": seconds,
        "lls": {str(s["doc_id"]): [float(r[0]) for r in s["filtered_resps"]] for s in samples},
        "acc": {str(s["doc_id"]): (s["acc"], s["acc_norm"]) for s in samples},
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def run_ours(model_dir: str, items: str, batch: int) -> dict:
    """The mcqa probe, cloze only: per item its log-likelihoods, and the items' P and C."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from bytecanary.probes import get_probe

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    records = Path(items).with_name("ours.jsonl")
    task = {
        "name": "bench",
        "schema": "mmlu",
        "path": "json",
        "split": "train",
        "data_files": [items],
        "columns": {"language": "language"},
    }
    probe = get_probe(
        "mcqa",
        tasks=[task],
        embedded_per_language=0,
        nonsense_per_language=0,
        protocols=["cloze"],
        trial=False,
        batch_size=batch,
        records=str(records),
    )
    with torch.no_grad():
        start = time.perf_counter()
        views = probe.prepare(tokenizer, None)
        probe.aggregate(views, [probe.compute(model, tokenizer, views)], NO_CONTEXT)
        seconds = time.perf_counter() - start
    lls = {r["item_id"]: r["ll"] for r in map(json.loads, records.read_text(encoding="utf-8").splitlines())}
    prompts = [len(v.encodings["cloze"][0]) for v in views]
    conts = [len(c) for v in views for c in v.encodings["cloze"][1]]
    return {
        "seconds": seconds,
        "lls": lls,
        "P": sum(prompts) / len(prompts),
        "C": sum(conts) / len(conts),
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def run_lm_eval(model_dir: str, items: str, batch: int) -> dict:
    """lm-evaluation-harness's HF model on the same rows: its per-item log-likelihoods."""
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM

    lm = HFLM(pretrained=model_dir, device="cpu", batch_size=batch, dtype="float32")
    task = {
        "task": TASK,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": items}},
        "test_split": "test",
        "output_type": "multiple_choice",
        "doc_to_text": "Question: {{question}}\nAnswer:",
        "doc_to_choice": "choices",
        "doc_to_target": "answer",
        "target_delimiter": " ",
        "metric_list": [{"metric": "acc"}, {"metric": "acc_norm"}],
    }
    start = time.perf_counter()
    out = simple_evaluate(model=lm, tasks=[task], log_samples=True, bootstrap_iters=0)
    seconds = time.perf_counter() - start
    lls = {s["doc"]["id"]: [float(r[0]) for r in s["filtered_resps"]] for s in out["samples"][TASK]}
    acc = {s["doc"]["id"]: (s["acc"], s["acc_norm"]) for s in out["samples"][TASK]}
    return {
        "seconds": seconds,
        "lls": lls,
        "acc": acc,
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


SIDES = {
    ("cloze", "ours"): run_ours,
    ("cloze", "lm-eval"): run_lm_eval,
    ("lm-eval-task", "ours"): run_ours_task,
    ("lm-eval-task", "lm-eval"): run_lm_eval_task,
}


def side(python: str, which: str, model_dir: Path, items: Path, batch: int, case: str = "cloze") -> dict:
    cmd = [
        python,
        __file__,
        "--case",
        case,
        "--side",
        which,
        "--model-dir",
        str(model_dir),
        "--items-file",
        str(items),
        "--batch",
        str(batch),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"{which} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def check_items(ours: dict, theirs: dict, items: Path) -> float:
    """Every item's log-likelihoods within 1e-4, acc and acc_norm equal; the largest gap.
    ``items``: a file of rows with an ``id`` (the cloze case) or of the task's documents in
    order (the lm-eval task case: keyed by ``doc_id``)."""
    lines = items.read_text(encoding="utf-8").splitlines()
    rows = {r["id"]: r for r in map(json.loads, lines)}
    if items.name == "test.jsonl":
        rows = {str(i): json.loads(line) for i, line in enumerate(lines)}
    assert ours["lls"].keys() == theirs["lls"].keys() == rows.keys(), "the two scored different items"
    worst, worst_id = 0.0, None
    for item_id, row in rows.items():
        mine, their = ours["lls"][item_id], theirs["lls"][item_id]
        gap = max(abs(a - b) for a, b in zip(mine, their, strict=True))
        worst, worst_id = max((worst, worst_id), (gap, item_id))
        norm = [ll / len(c) for ll, c in zip(mine, row["choices"], strict=True)]
        acc = (float(_argmax(mine) == row["answer"]), float(_argmax(norm) == row["answer"]))
        assert acc == tuple(theirs["acc"][item_id]), (
            f"item {item_id}: ours {acc}, lm-eval {theirs['acc'][item_id]}"
        )
    far = sum(
        max(abs(a - b) for a, b in zip(ours["lls"][i], theirs["lls"][i], strict=True)) >= 1e-4 for i in rows
    )
    assert worst < 1e-4, (
        f"log-likelihoods differ by up to {worst:.2e} (item {worst_id}; {far} of {len(rows)} items)"
    )
    return worst


def _argmax(values: list[float]) -> int:
    return max(range(len(values)), key=values.__getitem__)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", choices=["lm-eval"], default="lm-eval")
    parser.add_argument(
        "--case", choices=["cloze", "lm-eval-task"], default="cloze", help="items or a task YAML"
    )
    parser.add_argument("--model", choices=["medium", "tiny"], default="medium", help="random GPT-2 shape")
    parser.add_argument("--data", default="data/default", help="a prepared data folder (tokenizer, items)")
    parser.add_argument("--items", type=int, default=64, help="items in all, split over the four languages")
    parser.add_argument("--batch", type=int, default=16, help="prompts per batch (lm-eval: 4x requests)")
    parser.add_argument("--venv", default=".venv-lmeval", help="the virtualenv holding lm-eval")
    parser.add_argument("--threads", type=int, help="torch threads on both sides (default: torch's)")
    parser.add_argument("--side", choices=["ours", "lm-eval"], help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    parser.add_argument("--items-file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        print(json.dumps(SIDES[args.case, args.side](args.model_dir, args.items_file, args.batch)))
        return
    if args.threads:  # on a shared machine, fewer threads than free cores keeps barriers from stalling
        os.environ["OMP_NUM_THREADS"] = str(args.threads)  # for the sides' processes
    (task_case if args.case == "lm-eval-task" else cloze_case)(args)


def cloze_case(args: argparse.Namespace) -> None:
    """The items as our schema and as an inline lm-eval task: wall time against the bound."""
    with tempfile.TemporaryDirectory() as tmp:
        model_dir, items = write_inputs(args.model, args.data, args.items, Path(tmp))
        theirs = side(f"{args.venv}/bin/python", "lm-eval", model_dir, items, 4 * args.batch)
        ours = side(sys.executable, "ours", model_dir, items, args.batch)
        worst = check_items(ours, theirs, items)
    p, c = ours["P"], ours["C"]
    bound = 4 * (p + c) / (p + 4 * c)
    ratio = theirs["seconds"] / ours["seconds"]
    n = len(ours["lls"])
    print(
        f"load {os.getloadavg()[0]:.2f}  threads {args.threads or 'default'}  random GPT-2 {args.model}, "
        f"{n} cloze items x 4 choices "
        f"({args.data} word completion, {', '.join(LANGUAGES)}), P = {p:.1f}, C = {c:.1f} tokens"
    )
    print(f"per item: acc and acc_norm equal, log-likelihoods within {worst:.1e} of lm-eval's")
    print(f"{'engine':<44}{'wall s':>9}{'items/s':>9}{'peak MB':>9}{'ratio':>8}{'bound':>8}{'of bound':>10}")
    print(
        f"{'lm-evaluation-harness 0.4.13 (batch ' + str(4 * args.batch) + ')':<44}{theirs['seconds']:>9.2f}"
        f"{n / theirs['seconds']:>9.1f}{theirs['peak_mb']:>9.0f}{1:>8.2f}"
    )
    print(
        f"{'ours (mcqa probe, cloze, batch ' + str(args.batch) + ')':<44}{ours['seconds']:>9.2f}"
        f"{n / ours['seconds']:>9.1f}{ours['peak_mb']:>9.0f}{ratio:>8.2f}{bound:>8.2f}{ratio / bound:>10.0%}"
    )


def task_case(args: argparse.Namespace) -> None:
    """The lm-eval task YAML through both: our build and score seconds beside lm-eval's total."""
    with tempfile.TemporaryDirectory() as tmp:
        model_dir, items = write_inputs(args.model, args.data, 4 * 256, Path(tmp))  # every item
        folder = write_task(items)
        theirs = side(f"{args.venv}/bin/python", "lm-eval", model_dir, folder, 4 * args.batch, args.case)
        ours = side(sys.executable, "ours", model_dir, folder, args.batch, args.case)
        worst = check_items(ours, theirs, folder / "test.jsonl")
    n = len(ours["lls"])
    print(
        f"load {os.getloadavg()[0]:.2f}  threads {args.threads or 'default'}  random GPT-2 {args.model}, "
        f"lm-eval task YAML: {n} documents x 4 choices, {SHOTS}-shot, P = {ours['P']:.1f} tokens"
    )
    print(f"per document: acc and acc_norm equal, log-likelihoods within {worst:.1e} of lm-eval's")
    print(f"{'engine':<44}{'wall s':>9}{'build s':>9}{'score s':>9}{'docs/s':>9}{'peak MB':>9}{'ratio':>8}")
    print(
        f"{'lm-evaluation-harness 0.4.13 (batch ' + str(4 * args.batch) + ')':<44}{theirs['seconds']:>9.2f}"
        f"{'-':>9}{'-':>9}{n / theirs['seconds']:>9.1f}{theirs['peak_mb']:>9.0f}{1:>8.2f}"
    )
    print(
        f"{'ours (mcqa probe, source: lm_eval, batch ' + str(args.batch) + ')':<44}{ours['seconds']:>9.2f}"
        f"{ours['build']:>9.2f}{ours['score']:>9.2f}{n / ours['seconds']:>9.1f}{ours['peak_mb']:>9.0f}"
        f"{theirs['seconds'] / ours['seconds']:>8.2f}"
    )


if __name__ == "__main__":
    main()
