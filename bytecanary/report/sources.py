"""What ``bytecanary report`` reads (a run folder, a records file, or a folder holding ``probes.jsonl``),
its records placed on one x-axis (``axis.place``), and the commands that make them again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bytecanary.config import read_yaml
from bytecanary.errors import BytecanaryError
from bytecanary.io import read_jsonl, warn
from bytecanary.records import Record, merge, read
from bytecanary.report.axis import TOKENS_AXIS, Axis, place
from bytecanary.report.run_state import unfinished

METRICS, RECORDS = "metrics.jsonl", "probes.jsonl"


@dataclass(frozen=True)
class RunData:
    """What a run directory or records file holds for the report: ``probes`` are its successful
    records merged (``bytecanary.records.merge``) and placed on ``axis``, ``left_out`` says
    which records the merge left out."""

    run_dir: Path
    """The folder the report goes into: the training run's, or the records file's."""
    metrics: list[dict[str, Any]]
    probes: list[Record]
    config: dict[str, Any]
    left_out: list[str]
    unfinished: str | None = None
    """Why the run's training has not finished (``unfinished``); None once it has."""
    records: Path | None = None
    """The records file of a report that is not a training run's (None: a training run)."""
    axis: Axis = TOKENS_AXIS
    tokens_per_step: int | None = None

    @property
    def training(self) -> bool:
        return self.records is None

    @property
    def source(self) -> Path:
        """What the report is of, as a user names it: the run folder or the records file."""
        return self.run_dir if self.records is None else self.records

    @property
    def name(self) -> str:
        """The run folder's name, or the records file's folder name."""
        return self.run_dir.resolve().name


def locate(path: str | Path) -> tuple[Path, Path | None]:
    """(the folder a report goes into, its records file or None for a training run), checked
    before anything is created: a mistyped path must not be left behind as an empty folder."""
    path = Path(path)
    give = f"give a training run folder, e.g. runs/tiny, a records file or a folder holding {RECORDS}"
    if path.is_file() and path.suffix == ".jsonl":
        training = path.name == RECORDS and (path.parent / METRICS).is_file()
        return path.parent, None if training else path
    if not path.is_dir():
        what = "not a folder, nor a records file (.jsonl)" if path.exists() else "no such folder or file"
        raise BytecanaryError(f"{path}: {what}; {give}")
    if (path / METRICS).is_file():
        return path, None
    if (path / RECORDS).is_file():
        return path, path / RECORDS
    raise BytecanaryError(
        f"{path}: no training run ({METRICS}: no such file) and no probe records ({RECORDS}); make "
        f"records with bytecanary probe {path} --out {path / RECORDS}"
    )


def load_run(
    path: str | Path, on_bad: Callable[[str], None] = warn, tokens_per_step: int | None = None
) -> RunData:
    """The records of a run folder, records file or folder of records (``locate``), placed on
    one axis (``axis.place``); ``on_bad`` hears of each line skipped and of each
    parameterisation left out."""
    run_dir, records_path = locate(path)
    left_out: list[str] = []
    every = read(records_path or run_dir / RECORDS, on_bad)
    if records_path is not None and not every:
        raise BytecanaryError(f"{records_path}: holds no probe records (bytecanary probe --out writes them)")
    probe_records = merge(every, left_out.append)
    for note in left_out:
        on_bad(note)
    config_path = run_dir / "config.yaml"
    training = records_path is None
    config = _read_config(config_path) if training and config_path.is_file() else {}
    metrics = read_jsonl(run_dir / METRICS, on_bad=on_bad) if training else []
    state = unfinished(run_dir, metrics, on_bad) if training else None
    axis, metrics, probe_records = place(metrics, probe_records, tokens_per_step)
    return RunData(
        run_dir,
        metrics,
        probe_records,
        config,
        left_out,
        unfinished=state,
        records=records_path,
        axis=axis,
        tokens_per_step=tokens_per_step,
    )


def _read_config(path: Path) -> dict[str, Any]:
    config = read_yaml(path)
    return config if isinstance(config, dict) else {}


def _probe_command(data: RunData, run: str) -> str:
    """``bytecanary probe`` over the run's checkpoints: with the probes and parameters of its
    config when it has them, else with the probes its records name."""
    names = ", ".join(dict.fromkeys(r.probe for r in data.probes))
    if data.config.get("probes"):
        return f"bytecanary probe {run}/checkpoints --config {run}/config.yaml --out {run}/probes.jsonl"
    return f"bytecanary probe {run}/checkpoints --probes '[{names}]' --out {run}/probes.jsonl"


def _records_commands(data: RunData) -> list[str]:
    """``bytecanary probe`` that makes the records again (a model id's revisions when every
    checkpoint is ``model@revision`` of one model, else the folder's checkpoints), and the report."""
    names = ", ".join(dict.fromkeys(r.probe for r in data.probes))
    probes = f" --probes '[{names}]'" if names else ""  # none succeeded: the default probes
    models = {str(r.checkpoint).partition("@")[0] for r in data.probes}
    revisions = [str(r.checkpoint).partition("@")[2] for r in data.probes]
    what = str(data.run_dir)
    if len(models) == 1 and all(revisions):
        what = f"{models.pop()} --revision '[{', '.join(dict.fromkeys(revisions))}]'"
    per_step = f" --tokens_per_step {data.tokens_per_step}" if data.tokens_per_step else ""
    return [
        f"bytecanary probe {what}{probes} --out {data.records}  # skips what it holds",
        f"bytecanary report {data.records}{per_step}",
    ]


def commands(data: RunData) -> list[str]:
    """Shell lines that rebuild this run and its report (comments say what each reads)."""
    if not data.training:
        return _records_commands(data)
    run = str(data.run_dir)
    lines = []
    data_dir = (data.config.get("data") or {}).get("data_dir")
    if data_dir:
        name = Path(data_dir).name
        lines.append(
            f"bytecanary prepare --config configs/data/{name}.yaml  # builds {data_dir}, the run's data"
        )
    if data.config:
        rerun = f"{(data.config.get('run') or {}).get('name') or data.run_dir.name}-rerun"
        lines.append(
            f"bytecanary train --config {run}/config.yaml --run.name={rerun}  # this run's resolved config"
        )
    else:
        lines.append(f"# {run}/config.yaml is missing: the training config of this run is unknown")
    if data.probes or data.config.get("probes"):
        lines.append(f"{_probe_command(data, run)}  # skips what probes.jsonl holds")
    per_step = f" --tokens_per_step {data.tokens_per_step}" if data.tokens_per_step else ""
    lines.append(f"bytecanary report {run}{per_step}")
    return lines
