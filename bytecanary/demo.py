"""``bytecanary demo``: the embedded default, end to end, on 2 CPU cores.

Prepares the default data (wordfreq corpus, 8K byte-fallback tokenizer, shards, eval
sets), trains the tiny GPT-2 with checkpoints on a log-spaced + regular schedule, fires
the Level 0, Level 1 and MCQA probes at every checkpoint, logs to an offline W&B run,
writes the convergence report (``bytecanary report``), then prints perplexity, the probe
tables and where the report and the W&B run are. A rerun continues the same run (or only
reports, when it is complete). Its defaults live in ``bytecanary.cli.demo``.
"""

from __future__ import annotations

from pathlib import Path

from bytecanary import keys
from bytecanary.data.prepare import prepare
from bytecanary.report.summary import summary
from bytecanary.report.writer import report_summary, write_report
from train.cli import latest_checkpoint
from train.cli import main as train_main
from train.loggers import read_metrics


def run_demo(
    out: str, minutes: float, config: str, data_config: str, data: str | None, steps: int | None
) -> int:
    """Prepare, train with probes, summarise. ``steps`` defaults to what fits ``minutes``."""
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
    ]  # fmt: skip
    if latest_checkpoint(run_dir / "checkpoints") is not None:
        args += ["--run.resume", "true"]
    train_main(args)
    print()
    ppl = keys.val_ppl()
    val = [r for r in read_metrics(run_dir / "metrics.jsonl") if ppl in r]
    if val:
        first, last = val[0], val[-1]
        langs = "  ".join(f"{k.split('/')[1]} {v:.0f}" for k, v in last.items() if k.count("/") == 2)
        print(f"validation perplexity: {first[ppl]:.0f} at {first['tokens_seen']:,} tokens -> "
              f"{last[ppl]:.0f} at {last['tokens_seen']:,} tokens ({langs})")  # fmt: skip
    print()
    print(summary(run_dir / "probes.jsonl"))
    print()
    write_report(run_dir, wandb=True)  # figures and tables into the run's W&B run too
    print(report_summary(run_dir))
    return 0
