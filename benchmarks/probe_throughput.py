"""Level 0 probe throughput: our engine vs a straightforward reference, same run.

Reference (``probes/reference.py``): ``model.generate`` per batch, then per sample a
teacher-forced pass for each likelihood and every prefix re-decoded from scratch by a
per-byte Python DFA. Ours: left-padded batches with a KV cache, log-probs taken from the
decoding passes, and the incremental numpy DFA. Each side runs in its own process so its
peak memory is its own; the two metric dicts must be identical.

    python benchmarks/probe_throughput.py [--checkpoint runs/tiny/checkpoints/last.ckpt]
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import time

import torch


def measure(which: str, checkpoint: str, per_language: int, batch: int, repeat: int) -> dict:
    from transformers import AutoTokenizer

    from bytecanary.checkpoints import checkpoint_meta, gpt2_from_checkpoint, load_checkpoint, tokenizer_dir
    from probes import get_probe
    from probes.reference import reference_metrics

    ckpt = load_checkpoint(checkpoint)
    tok_dir = tokenizer_dir(checkpoint_meta(ckpt, checkpoint), checkpoint)
    model = gpt2_from_checkpoint(ckpt, checkpoint)
    tokenizer = AutoTokenizer.from_pretrained(str(tok_dir))
    probe = get_probe("level0", trial=True, per_language=per_language, batch_size=batch)
    prep = probe.prepare(tokenizer, tok_dir.parent)
    seconds = float("inf")
    for _ in range(repeat):  # best of ``repeat``: the machine's noise is not the engine's
        start = time.perf_counter()
        with torch.no_grad():
            if which == "ours":
                metrics = probe.aggregate(prep, [probe.compute(model, tokenizer, prep)])
            else:
                metrics = reference_metrics(model, prep, level=0, generate_batch=batch)
        seconds = min(seconds, time.perf_counter() - start)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"seconds": seconds, "samples": len(prep.samples), "peak_mb": peak_mb, "metrics": metrics}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default="runs/tiny/checkpoints/last.ckpt")
    parser.add_argument("--per-language", type=int, default=256, help="trial M")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=2, help="best of this many runs per side")
    parser.add_argument("--only", choices=["ours", "reference"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.only:
        print(json.dumps(measure(args.only, args.checkpoint, args.per_language, args.batch, args.repeat)))
        return
    results = {}
    for which in ("reference", "ours"):
        cmd = [
            sys.executable,
            __file__,
            "--only",
            which,
            "--checkpoint",
            args.checkpoint,
            "--per-language",
            str(args.per_language),
            "--batch",
            str(args.batch),
            "--repeat",
            str(args.repeat),
        ]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        results[which] = json.loads(out.strip().splitlines()[-1])
    ours, ref = results["ours"], results["reference"]
    assert ours["metrics"].keys() == ref["metrics"].keys(), "the two report different metrics"

    def gap(key: str) -> float:  # relative above 1: log-likelihoods are sums of many terms
        return abs(ours["metrics"][key] - ref["metrics"][key]) / max(1.0, abs(ref["metrics"][key]))

    worst_key = max(ref["metrics"], key=gap)
    worst = gap(worst_key)
    assert worst < 1e-5, (
        f"{worst_key}: ours {ours['metrics'][worst_key]}, reference {ref['metrics'][worst_key]}"
    )
    print(f"torch {torch.__version__}  {platform.machine()}  threads {torch.get_num_threads()}")
    print(
        f"Level 0 trial on {args.checkpoint}: {ours['samples']:,} samples, "
        f"{len(ref['metrics']):,} metrics identical (max relative diff {worst:.1e}), best of {args.repeat}"
    )
    print(f"{'engine':<44}{'wall s':>9}{'samples/s':>11}{'peak MB':>9}{'speed':>8}")
    for name, r in (
        ("reference (generate + per-sample passes + py DFA)", ref),
        ("ours (KV-cache batches + numpy DFA)", ours),
    ):
        print(
            f"{name[:44]:<44}{r['seconds']:>9.2f}{r['samples'] / r['seconds']:>11.0f}{r['peak_mb']:>9.0f}"
            f"{ref['seconds'] / r['seconds']:>7.1f}x"
        )


if __name__ == "__main__":
    main()
