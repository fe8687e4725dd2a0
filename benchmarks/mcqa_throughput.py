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

    python benchmarks/mcqa_throughput.py --against lm-eval [--items 64] [--venv .venv-lmeval]
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


def side(python: str, which: str, model_dir: Path, items: Path, batch: int) -> dict:
    cmd = [
        python,
        __file__,
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
    """Every item's log-likelihoods within 1e-4, acc and acc_norm equal; the largest gap."""
    rows = {r["id"]: r for r in map(json.loads, items.read_text(encoding="utf-8").splitlines())}
    assert ours["lls"].keys() == theirs["lls"].keys() == rows.keys(), "the two scored different items"
    worst = 0.0
    for item_id, row in rows.items():
        mine, their = ours["lls"][item_id], theirs["lls"][item_id]
        worst = max(worst, *(abs(a - b) for a, b in zip(mine, their, strict=True)))
        norm = [ll / len(c) for ll, c in zip(mine, row["choices"], strict=True)]
        acc = (float(_argmax(mine) == row["answer"]), float(_argmax(norm) == row["answer"]))
        assert acc == tuple(theirs["acc"][item_id]), (
            f"item {item_id}: ours {acc}, lm-eval {theirs['acc'][item_id]}"
        )
    assert worst < 1e-4, f"log-likelihoods differ by {worst:.2e}"
    return worst


def _argmax(values: list[float]) -> int:
    return max(range(len(values)), key=values.__getitem__)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", choices=["lm-eval"], default="lm-eval")
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
        run = run_ours if args.side == "ours" else run_lm_eval
        print(json.dumps(run(args.model_dir, args.items_file, args.batch)))
        return
    if args.threads:  # on a shared machine, fewer threads than free cores keeps barriers from stalling
        os.environ["OMP_NUM_THREADS"] = str(args.threads)  # for the sides' processes
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


if __name__ == "__main__":
    main()
