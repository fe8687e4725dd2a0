"""``bytecanary demo``: the default pipeline end to end on 2 CPU cores (docs/demo.md): prepare,
train the tiny GPT-2, probe its checkpoints, log offline to W&B and report; a rerun continues
the same run. Its defaults live in ``bytecanary.cli.demo``.
"""

from __future__ import annotations

from pathlib import Path

from bytecanary import keys
from bytecanary.config import load_config
from bytecanary.data.config import DataConfig
from bytecanary.data.corpus import source_name
from bytecanary.data.debian import unpacked
from bytecanary.data.languages import LANGUAGES
from bytecanary.data.prepare import prepare
from bytecanary.errors import BytecanaryError
from bytecanary.report.summary import summary
from bytecanary.report.writer import report_summary, write_report
from bytecanary.tracking import one_sync_command

SYNTHETIC = "configs/data/synthetic.yaml"  # needs neither apt nor the network


def corpus_config(data_config: str) -> str:
    """``data_config``, or the synthetic corpus when its Debian packages cannot be had here
    (no apt, empty package lists, no network), said on one line: the demo runs anywhere."""
    cfg = load_config(DataConfig, data_config)
    try:
        for i, src in enumerate(cfg.sources):
            for package in src.debian.packages if src.debian else []:
                unpacked(package, src.debian, f"sources[{i}] ({src.language})")
    except BytecanaryError as err:
        print(f"demo: {err}; using {SYNTHETIC} instead")
        return SYNTHETIC
    return data_config


def corpus_line(data_config: str, data_dir: Path) -> str:
    cfg = load_config(DataConfig, data_config)
    sources = ", ".join(dict.fromkeys(source_name(s) for s in cfg.sources))
    return f"corpus: {data_config} -> {data_dir} ({sources})"


def run_demo(
    out: str, minutes: float, config: str, data_config: str, data: str | None, steps: int | None
) -> int:
    """Prepare, train with probes, summarise. ``steps`` defaults to what fits ``minutes``."""
    from bytecanary.train.cli import latest_checkpoint  # torch and Lightning: only once the corpus is chosen
    from bytecanary.train.cli import main as train_main

    data_config = corpus_config(data_config)
    data_dir = prepare(data_config, data)
    run_dir = Path(out)
    max_steps = steps or max(20, int(minutes * 15))  # about 1.3 s a step on 2 cores, plus probes
    args = [
        "--config", config,
        "--data.data_dir", str(data_dir),
        "--run.root", str(run_dir.parent),
        "--run.name", run_dir.name,
        "--trainer.max_steps", str(max_steps),
        "--trainer.val_check_interval", str(max(5, max_steps // 6)),
        "--run.checkpoint_every", str(max(5, max_steps // 3)),
        "--data.max_repeats", "null",  # a long demo reads the small default corpus many times over
    ]  # fmt: skip
    if latest_checkpoint(run_dir / "checkpoints") is not None:
        args += ["--run.resume", "true"]
    with one_sync_command() as offline:  # training's and the report's: one command at the end
        train_main(args)
        print()
        ppl = perplexity_line(run_dir)
        if ppl:
            print(ppl)
        print()
        print(summary(run_dir / "probes.jsonl"))
        print()
        write_report(run_dir, wandb=True)  # figures and tables into the run's W&B run too
    print(corpus_line(data_config, data_dir))
    print(report_summary(run_dir))
    if offline:
        print(f"W&B offline runs saved; upload training and report with: wandb sync {run_dir / 'wandb'}")
    return 0


def perplexity_line(run_dir: Path) -> str | None:
    """Validation perplexity at the first and the last validation, by language (None before any)."""
    from bytecanary.train.loggers import read_metrics

    ppl, seen = keys.val_ppl(), keys.TOKENS_SEEN
    val = [r for r in read_metrics(run_dir / "metrics.jsonl") if ppl in r]
    if not val:
        return None
    first, last = val[0], val[-1]
    langs = "  ".join(f"{lang} {last[k]:.0f}" for lang in LANGUAGES if (k := keys.val_ppl(lang)) in last)
    return (
        f"validation perplexity: {first[ppl]:.0f} at {first[seen]:,} tokens -> "
        f"{last[ppl]:.0f} at {last[seen]:,} tokens ({langs})"
    )
