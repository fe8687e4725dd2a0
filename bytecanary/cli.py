"""The ``bytecanary`` command: one subcommand per function below (litgpt style).

Each function's typed signature is its schema and its docstring its ``--help``, read by
jsonargparse as ``bytecanary train``'s LightningCLI reads its config: one flag style,
``--out FILE``, ``--trial=true``, ``--series.interval=5`` for a nested group, and the default
written in the signature is the flag's only default. Heavy libraries (torch, lightning) load
inside the functions, so ``bytecanary --help`` stays fast. With ``bytecanary/demo.py`` this
is the face of the project: the only code that imports ``train`` and the report room.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from docstring_parser import parse as parse_docstring
from jsonargparse import ArgumentError, ArgumentParser

from bytecanary.config import flag_names, parse_error
from bytecanary.data.parallel import Parallel
from bytecanary.errors import BytecanaryError
from bytecanary.flags import arguments, command_parser, modernize
from bytecanary.probe_options import ProbeOptions
from bytecanary.settling import Tolerance

DESCRIPTION = (
    "Train byte-aware language models and probe every checkpoint for UTF-8 validity and MCQA scoring traps."
)


def prepare(*, config: str, out: str | None = None, verify: bool = False, work: Parallel) -> int:
    """Corpus -> tokenizer -> token shards -> character snapshot -> eval sets.

    Every stage is skipped when its output matches its inputs, so a rerun is a no-op; a killed
    run resumes at the corpus files or chunks it had not finished.

    Args:
        config: data config, e.g. configs/data/default.yaml
        out: output folder (unset: data/<config name>)
        verify: also check every token shard against the hash in shards/index.json
        work: how the parallel stages run
    """
    from bytecanary.data.engine import Submitted
    from bytecanary.data.prepare import prepare as prepare_data

    try:
        prepare_data(config, out, verify=verify, run=work)
    except Submitted as submitted:
        print(submitted)
    return 0


def train(args: list[str]) -> int:
    """Train with LightningCLI: --config configs/tiny.yaml [--trainer.max_steps=N ...].

    Args:
        args: LightningCLI's own arguments, passed on unchanged (``bytecanary train --help``)
    """
    from bytecanary.train.cli import main as train_main

    return train_main(args)


def export(checkpoint: str, out_dir: str, *, force: bool = False) -> int:
    """A run's checkpoint -> HF save_pretrained folder.

    Args:
        checkpoint: a weights file (step<N>.safetensors) or a Lightning .ckpt
        out_dir: output folder (safetensors + tokenizer)
        force: replace a previous export in OUT_DIR (nothing else is ever replaced)
    """
    from bytecanary.train.export import export as export_checkpoint

    out = export_checkpoint(checkpoint, out_dir, force=force)
    print(f"exported {checkpoint} -> {out} (AutoModelForCausalLM / AutoTokenizer load it)")
    return 0


def _set_threads(threads: int | None) -> None:
    """``--threads``: torch's CPU threads for this process (None: torch's own default)."""
    if threads is None:
        return
    if threads < 1:
        raise BytecanaryError(f"probe: --threads must be >= 1, got {threads}")
    import torch

    torch.set_num_threads(threads)


def probe_names(probes: str | None) -> list[str] | None:
    """The names ``--probes`` lists (None: unset); an empty one (``--probes ,``) is refused,
    as it would otherwise leave the default probes to run unasked."""
    if probes is None:
        return None
    names = [name.strip() for name in probes.split(",")]
    if not all(names):
        raise BytecanaryError(
            f"--probes: {probes!r} holds an empty probe name; give comma-separated names, e.g. level0,level1"
        )
    return names


def probe(paths: list[str], *, options: ProbeOptions) -> int:
    """Attach probes to existing checkpoints.

    Pairs of (checkpoint, probe) already in --out are skipped, so a rerun after a crash only
    does what is missing. Several workers (torchrun --nproc-per-node N -m bytecanary.cli probe,
    srun bytecanary probe, array jobs) share a series: each claims a pair before computing it.
    Prints a table per probe (on a training run's folder, with the ratios to its perplexity that
    bytecanary report states) and writes an offline W&B run (the first rank's).

    Args:
        paths: .safetensors/.ckpt checkpoints, HF model folders, (run) folders of checkpoints, or model ids
        options: which probes run on which checkpoints, and where their results go
    """
    if not paths and not options.watch:
        raise BytecanaryError("probe: give at least one PATH or --watch DIR")
    names = probe_names(options.probes)
    from bytecanary.probes.registry import load_probes
    from bytecanary.probes.runner import probe_specs, run, training_run
    from bytecanary.report.summary import add_mcqa_series, summary
    from bytecanary.report.writer import probe_ratio_lines

    load_probes()
    _set_threads(options.threads)
    code = run(paths, probe_specs(options.config, names), options, finish=add_mcqa_series)
    training = training_run(paths, options.watch, options.revisions)
    out = Path(options.out)
    ratios = probe_ratio_lines(training, out) if training else []
    print("\n".join([summary(out), *ratios, f"records: {out}"]))
    if code:
        print(f"error: probe: some probes failed; their records in {out} say why", file=sys.stderr)
    return code


def demo(
    *,
    out: str = "runs/demo",
    minutes: float = 10.0,
    config: str = "configs/tiny.yaml",
    data_config: str = "configs/data/default.yaml",
    data: str | None = None,
    steps: int | None = None,
) -> int:
    """Run the embedded default end to end: prepare, train with probes, report, summarise.

    A rerun continues the same run.

    Args:
        out: run directory
        minutes: time budget in minutes
        config: training config
        data_config: data config to prepare
        data: data folder (unset: data/<data config name>)
        steps: training steps (unset: what fits --minutes)
    """
    from bytecanary.demo import run_demo

    return run_demo(out, minutes, config, data_config, data, steps)


def report(
    paths: list[str],
    *,
    tolerance: Tolerance,
    wandb: bool | None = None,
    tokens_per_step: int | None = None,
    out: str | None = None,
) -> int:
    """Convergence analysis, figures and tables into report/ beside one run's records; of
    several runs, one comparison (compare.png, compare.md).

    Perplexity is the run's val/ppl (metrics.jsonl), else the ppl probe's held-out one.

    Args:
        paths: a training run folder (metrics.jsonl, probes.jsonl), a records file (bytecanary
            probe --out FILE) or a folder holding probes.jsonl; two or more: a comparison
        tolerance: the time-to-tolerance rule's tolerances (docs/report-and-wandb.md)
        wandb: log to the training run's W&B run (unset: when RUN/wandb has one; false: never);
            records without a training run, and a comparison, log nothing
        tokens_per_step: place records without tokens_seen at step x N (unset: where some lack
            it, every curve is drawn against the step)
        out: with several PATHS, the comparison's folder (unset: <parent of the first>/compare-<names>)
    """
    from bytecanary.probes.registry import load_probes
    from bytecanary.report.compare import write_compare
    from bytecanary.report.writer import report_summary, write_report

    if not paths:
        raise BytecanaryError("report: give a run folder, a records file or a folder holding probes.jsonl")
    if out is not None and len(paths) == 1:
        raise BytecanaryError(
            f"--out goes with two or more PATHS; {paths[0]}'s report goes to report/ beside it"
        )
    load_probes()
    if len(paths) > 1:
        print(write_compare(paths, out, tolerance, tokens_per_step, wandb))
        return 0
    write_report(paths[0], wandb=wandb, tolerance=tolerance, tokens_per_step=tokens_per_step)
    print(report_summary(paths[0], tolerance, tokens_per_step))
    return 0


COMMANDS: dict[str, Callable[..., int]] = {
    f.__name__: f for f in (prepare, train, export, probe, demo, report)
}


def _parse(argv: list[str]) -> tuple[Callable[..., int], dict[str, Any]]:
    """The subcommand ``argv`` names and its keyword arguments; old spellings noted on stderr."""
    command = COMMANDS.get(argv[0]) if argv else None
    if command is None:  # --help, no command or an unknown one: the top parser answers
        build_parser().parse_args(argv)  # exits on --help, else refuses the argv
        raise ArgumentError(None, f"give a command: {', '.join(COMMANDS)}")
    parser, flags = command_parser(command)
    parser.prog = f"bytecanary {argv[0]}"
    args, notes = modernize(argv[1:], flags)
    for note in notes:
        print(note, file=sys.stderr)
    try:
        values = parser.parse_args(args)
    except ArgumentError as err:  # worded here, where the parser's flags are known
        raise ArgumentError(None, parse_error(str(err), flag_names(parser))) from None
    return command, arguments(command, parser, values)


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="bytecanary", description=DESCRIPTION, exit_on_error=False, allow_abbrev=False
    )
    subcommands = parser.add_subcommands(metavar="COMMAND", dest="command")
    for name, func in COMMANDS.items():
        summary = parse_docstring(func.__doc__ or "").short_description
        subcommands.add_subcommand(name, command_parser(func)[0], help=summary)
    return parser


def describe(err: BaseException) -> str:
    """One line naming the path and the cause."""
    if isinstance(err, OSError) and err.filename is not None:
        target = f" -> {err.filename2}" if err.filename2 is not None else ""
        text = f"{err.filename}{target}: {err.strerror or err}"
    elif isinstance(err, json.JSONDecodeError):
        text = f"not valid JSON: {err.msg} (line {err.lineno}, column {err.colno})"
    else:
        text = str(err) or type(err).__name__
    return " ".join(text.split())


def _user_errors() -> tuple[type[BaseException], ...]:
    """What a user can cause and fix: our errors, the file system (disk full, file too large,
    a file where a folder should be, permissions), an unreadable weights file, bad JSON/YAML."""
    import yaml
    from safetensors import SafetensorError

    return (BytecanaryError, OSError, SafetensorError, json.JSONDecodeError, yaml.YAMLError)


def main(argv: Sequence[str] | None = None) -> int:
    """Run a subcommand. Every error a user can fix is one ``error:`` line on stderr and exit
    code 2; ``BYTECANARY_DEBUG=1`` shows the traceback instead."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["train"]:  # LightningCLI parses its own arguments
        command, kwargs = train, {"args": argv[1:]}
    else:
        try:
            command, kwargs = _parse(argv)
        except ArgumentError as err:  # one line, like every other error
            print(f"error: {parse_error(str(err))}", file=sys.stderr)
            return 2
    try:
        return command(**kwargs)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except _user_errors() as err:
        if os.environ.get("BYTECANARY_DEBUG", "0") not in ("", "0"):
            raise
        print(f"error: {describe(err)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
