"""The ``bytecanary`` command: one subcommand per job, each imported only when run.

Subcommands map to functions; heavy libraries (torch, lightning) load inside them so
``bytecanary --help`` stays fast. This is the one module that may reach into ``probes``
and ``train``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from bytecanary.errors import BytecanaryError


def _demo(args: argparse.Namespace) -> int:
    from train.demo import run_demo

    return run_demo(args.minutes, args.out, args.config, args.data_config, args.data, args.steps)


def _prepare(args: argparse.Namespace) -> int:
    from bytecanary.data.prepare import prepare

    prepare(args.config, args.out)
    return 0


def _probe(args: argparse.Namespace) -> int:
    from probes.runner import probe_specs, run

    if not args.paths and not args.watch:
        raise BytecanaryError("probe: give at least one PATH or --watch DIR")
    names = [p.strip() for p in args.probes.split(",") if p.strip()] if args.probes else None
    return run(
        args.paths,
        probe_specs(args.config, names),
        out=args.out,
        trial=args.trial,
        eval_sets={"level0": args.level0_set, "level1": args.level1_set},
        wandb_project=None if args.no_wandb else args.wandb_project,
        watch_dir=args.watch,
        interval=args.interval,
        revisions=[r for r in (args.revision or "").split(",") if r] or None,
        device=args.device,
    )


def _report(args: argparse.Namespace) -> int:
    from bytecanary.report import report_summary, write_report

    write_report(args.run_dir, wandb=False if args.no_wandb else None)
    print(report_summary(args.run_dir))
    return 0


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bytecanary",
        description="Train byte-aware language models and probe every checkpoint "
        "for UTF-8 validity and MCQA scoring traps.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    prep = sub.add_parser(
        "prepare", help="corpus -> tokenizer -> token shards -> character snapshot -> eval sets"
    )
    prep.add_argument("--config", required=True, help="data config, e.g. configs/data/default.yaml")
    prep.add_argument("--out", default=None, help="output folder (default: data/<config name>)")
    prep.set_defaults(run=_prepare)
    sub.add_parser(
        "train",
        help="train with LightningCLI: --config configs/tiny.yaml [--trainer.max_steps=N ...]",
        add_help=False,
    )
    export = sub.add_parser("export", help="Lightning checkpoint -> HF save_pretrained folder")
    export.add_argument("checkpoint", help="a .ckpt file")
    export.add_argument("out_dir", help="output folder (safetensors + tokenizer)")
    export.set_defaults(run=_export)
    probe = sub.add_parser("probe", help="attach probes to existing checkpoints")
    probe.add_argument(
        "paths", nargs="*", metavar="PATH", help=".ckpt, HF model folder, folder of checkpoints, or model id"
    )
    probe.add_argument(
        "--probes", help="comma-separated names (default: level0,level1, or every probe of --config)"
    )
    probe.add_argument(
        "--config", help="YAML with a probes: list of {name, parameters}, e.g. the run's configs/tiny.yaml"
    )
    probe.add_argument("--trial", action="store_true", help="trial sets (M per language) instead of full")
    probe.add_argument("--level0-set", help="Level 0 eval-set file (default: the checkpoint's data)")
    probe.add_argument("--level1-set", help="Level 1 eval-set file (default: the checkpoint's data)")
    probe.add_argument("--out", default="probes.jsonl", help="records file (default: probes.jsonl)")
    probe.add_argument("--wandb-project", default="bytecanary", help="W&B project (offline without a key)")
    probe.add_argument("--no-wandb", action="store_true", help="write probes.jsonl only")
    probe.add_argument("--watch", metavar="DIR", help="probe each new checkpoint in DIR until Ctrl-C")
    probe.add_argument("--interval", type=float, default=30.0, help="seconds between looks with --watch")
    probe.add_argument("--revision", help="with a model id: revisions to probe, e.g. step1000,step2000")
    probe.add_argument("--device", help="cpu, cuda, ... (default: cuda when available)")
    probe.set_defaults(run=_probe)
    demo = sub.add_parser("demo", help="run the embedded default end to end")
    demo.add_argument("--out", default="runs/demo", help="run directory (default: runs/demo)")
    demo.add_argument("--minutes", type=float, default=10.0, help="time budget in minutes")
    demo.add_argument("--config", default="configs/tiny.yaml", help="training config (default: tiny)")
    demo.add_argument("--data-config", default="configs/data/default.yaml", help="data config to prepare")
    demo.add_argument("--data", default=None, help="data folder (default: data/<config name>)")
    demo.add_argument("--steps", type=int, default=None, help="training steps (default: what fits --minutes)")
    demo.set_defaults(run=_demo)
    report = sub.add_parser("report", help="convergence analysis, figures and tables into RUN_DIR/report/")
    report.add_argument(
        "run_dir", metavar="RUN_DIR", help="a training run folder (metrics.jsonl, probes.jsonl)"
    )
    report.add_argument(
        "--no-wandb",
        action="store_true",
        help="do not log to the run's W&B run (default: when RUN_DIR/wandb has one)",
    )
    report.set_defaults(run=_report)
    return parser


def _train(args: argparse.Namespace) -> int:
    from train.cli import main as train_main

    return train_main(args.lightning_args)


def _export(args: argparse.Namespace) -> int:
    from train.checkpointing import export

    out = export(args.checkpoint, args.out_dir)
    print(f"exported {args.checkpoint} -> {out} (AutoModelForCausalLM / AutoTokenizer load it)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["train"]:  # LightningCLI parses its own arguments
        args = argparse.Namespace(run=_train, lightning_args=argv[1:])
    else:
        args = _build_parser().parse_args(argv)
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        return run(args)
    except BytecanaryError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
