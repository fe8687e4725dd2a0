"""MCQA throughput: shared-prompt batches vs one forward pass per choice, and batched
generation (M&D, wrappers) vs ``model.generate`` on one prompt at a time.

Items mimic the embedded tasks on the tiny model: a prompt of 40-80 tokens and four
choices of 1-4 tokens (cloze) or one token (letters). Ours runs each prompt once and all
continuations in one more pass (``probes/mcqa/scoring.py``); the reference runs
prompt + choice for every choice, unbatched. Both must give the same log-likelihoods.
Generation: prompts of 100-140 tokens (a padded wrapper), 24 greedy new tokens; ours is
``probes/engine.generate`` (left-padded batches, no prompt scoring); the tokens must match.

    python benchmarks/mcqa_throughput.py [--checkpoint runs/tiny/checkpoints/last.ckpt] [--items 256]
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np
import torch

from bytecanary.checkpoints import gpt2_from_checkpoint, load_checkpoint
from probes.engine import generate
from probes.mcqa.scoring import score_continuations


@torch.no_grad()
def reference(model, prompts, continuations) -> list[np.ndarray]:
    out = []
    for p, conts in zip(prompts, continuations, strict=True):
        lls = []
        for c in conts:
            x = torch.tensor([list(p) + list(c)])
            lp = (
                model(input_ids=x)
                .logits[0, :-1]
                .float()
                .log_softmax(-1)
                .gather(-1, x[0, 1:, None])
                .squeeze(-1)
            )
            lls.append(lp[len(p) - 1 :].sum().item())
        out.append(np.array(lls))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default="runs/tiny/checkpoints/last.ckpt")
    parser.add_argument("--items", type=int, default=256)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    path = args.checkpoint
    model = gpt2_from_checkpoint(load_checkpoint(path), path)
    vocab = model.config.vocab_size
    rng = np.random.default_rng(0)
    prompts = [rng.integers(260, vocab, rng.integers(40, 81)).tolist() for _ in range(args.items)]
    print(f"torch {torch.__version__}  {platform.machine()}  threads {torch.get_num_threads()}  {path}")
    print(f"{'protocol':<10}{'engine':<34}{'items/s':>10}{'ratio':>8}")
    for protocol, lengths in (("letters", (1, 2)), ("cloze", (1, 5))):
        conts = [
            [rng.integers(260, vocab, rng.integers(*lengths)).tolist() for _ in range(4)] for _ in prompts
        ]
        start = time.perf_counter()
        ref = reference(model, prompts, conts)
        t_ref = time.perf_counter() - start
        start = time.perf_counter()
        ours = score_continuations(model, prompts, conts, pad_id=0, batch_size=args.batch)
        t_ours = time.perf_counter() - start
        worst = max(float(np.abs(a - b).max()) for a, b in zip(ours, ref, strict=True))
        assert worst < 1e-3, f"{protocol}: log-likelihoods differ by {worst}"
        print(f"{protocol:<10}{'per-choice unbatched reference':<34}{args.items / t_ref:>10.1f}{1.0:>8.2f}")
        print(
            f"{'':<10}{'shared-prompt batches (ours)':<34}{args.items / t_ours:>10.1f}{t_ref / t_ours:>8.2f}"
        )
        print(f"{'':<10}max |difference| of log-likelihoods {worst:.1e}")
    eos = model.config.eos_token_id
    gen_prompts = [rng.integers(260, vocab, rng.integers(100, 141)).tolist() for _ in range(args.items // 4)]
    start = time.perf_counter()
    ref_tokens = [
        model.generate(
            input_ids=torch.tensor([p]), do_sample=False, max_new_tokens=24, eos_token_id=eos, pad_token_id=0
        )[0, len(p) :].tolist()
        for p in gen_prompts
    ]
    t_ref = time.perf_counter() - start
    start = time.perf_counter()
    ours = generate(model, gen_prompts, 24, eos, 0, batch_size=6 * args.batch, score_prompt=False)
    t_ours = time.perf_counter() - start
    mine = [ours.tokens[i, : ours.lengths[i]].tolist() for i in range(len(gen_prompts))]
    assert mine == [r[: r.index(eos) + 1] if eos in r else r for r in ref_tokens], "generated tokens differ"
    n = len(gen_prompts)
    print(f"{'generate':<10}{'model.generate, one prompt':<34}{n / t_ref:>10.1f}{1.0:>8.2f}")
    print(f"{'':<10}{'left-padded batches (ours)':<34}{n / t_ours:>10.1f}{t_ref / t_ours:>8.2f}")
    print(f"{'':<10}generated tokens identical ({n} prompts, up to 24 new tokens)")


if __name__ == "__main__":
    main()
