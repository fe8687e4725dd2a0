"""``bytecanary report RUN_DIR``: convergence analysis, figures and tables ("Beyond
Perplexity: UTF-8 Validity in Byte-aware LMs", arXiv:2606.14122, abstract).

Reads ``RUN_DIR/metrics.jsonl`` and ``RUN_DIR/probes.jsonl`` and writes
``RUN_DIR/report/``: ``convergence.png``, ``tiers.png``, ``mcqa.png`` and ``report.md``
with the numbers behind every figure and the commands that reproduce them.
The folder is built aside and swapped in whole, so a crash never leaves half a report.
With a W&B run in ``RUN_DIR/wandb`` the figures and tables also go to that run (offline
unless it can be online).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bytecanary import stats
from bytecanary.config import read_yaml
from bytecanary.errors import BytecanaryError
from bytecanary.io import atomic_dir, read_jsonl
from bytecanary.report import analysis, figures
from bytecanary.report.analysis import Convergence
from bytecanary.report.tables import Table, build_tables
from bytecanary.tracking import DEFAULT_PROJECT, is_offline, wandb_mode

REPORT_DIR = "report"
FIGURES = ("convergence", "tiers", "mcqa")
_WANDB_RUN_DIR = re.compile(r"^(?:offline-)?run-(\d{8}_\d{6})-([A-Za-z0-9]+)$")


@dataclass(frozen=True)
class RunData:
    """What a run directory holds for the report; ``probes`` keeps successful records only."""

    run_dir: Path
    metrics: list[dict[str, Any]]
    probes: list[dict[str, Any]]
    config: dict[str, Any]


def load_run(run_dir: str | Path) -> RunData:
    run_dir = Path(run_dir)
    metrics_path = run_dir / "metrics.jsonl"
    if not metrics_path.is_file():
        raise BytecanaryError(f"{metrics_path}: no such file (is {run_dir} a training run directory?)")
    probes_path = run_dir / "probes.jsonl"
    probes = [r for r in read_jsonl(probes_path) if r.get("status") == "ok"] if probes_path.is_file() else []
    config_path = run_dir / "config.yaml"
    config = _read_config(config_path) if config_path.is_file() else {}
    return RunData(run_dir, read_jsonl(metrics_path), probes, config)


def _read_config(path: Path) -> dict[str, Any]:
    config = read_yaml(path)
    return config if isinstance(config, dict) else {}


def _probe_command(data: RunData, run: str) -> str:
    """``bytecanary probe`` over the run's checkpoints: with the probes and parameters of its
    config when it has them, else with the probes its records name."""
    names = ",".join(dict.fromkeys(r["probe"] for r in data.probes))
    if data.config.get("probes"):
        return f"bytecanary probe {run}/checkpoints --config {run}/config.yaml --out {run}/probes.jsonl"
    return f"bytecanary probe {run}/checkpoints --probes {names} --out {run}/probes.jsonl"


def commands(data: RunData) -> list[str]:
    """Shell lines that rebuild this run and its report (comments say what each reads)."""
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
    lines.append(f"bytecanary report {run}")
    return lines


def render_markdown(data: RunData, conv: Convergence, tables: list[Table], notes: list[str]) -> str:
    """``report.md``: the headline, every table, why any statistic is missing, and the commands."""
    rule = (
        f"A curve converges at the first tokens_seen after which every point stays within "
        f"{stats.CONVERGENCE_RTOL:.0%} of its plateau (the mean of its last {stats.CONVERGENCE_TAIL:.0%} "
        f"of points); curves with fewer than {analysis.MIN_POINTS} points have none."
    )
    parts = [
        f"# bytecanary report: {data.run_dir}\n",
        f"{conv.explain()}{' (the paper reports about 2x).' if conv.ratio else '.'}\n",
        rule + "\n",
        "Figures: `convergence.png` (perplexity and validity), `tiers.png` (validity by frequency "
        "tier), `mcqa.png` (MCQA protocols, FSI/PSI). Absent data is `-`; a statistic the data "
        "cannot support is `n/a`.\n",
        *(t.markdown() for t in tables),
    ]
    if notes:
        parts.append("Statistics left out:\n\n" + "".join(f"- {n}\n" for n in notes))
    parts.append("## Reproduce\n\n```bash\n" + "\n".join(commands(data)) + "\n```\n")
    return "\n".join(parts)


def wandb_run_id(run_dir: Path) -> str | None:
    """The id of the newest W&B run under ``run_dir/wandb`` (``[offline-]run-<time>-<id>``)."""
    found = sorted(
        m.groups()
        for p in (run_dir / "wandb").glob("*run-*")
        if p.is_dir() and (m := _WANDB_RUN_DIR.match(p.name))
    )
    return found[-1][1] if found else None


def _scalars(conv: Convergence, series: dict[str, float]) -> dict[str, float]:
    """The report's numbers for the W&B run summary (absent ones left out)."""
    numbers = {
        "report/ppl_converged_tokens": conv.ppl.converged_at,
        "report/validity_converged_tokens": conv.validity_tokens,
        "report/validity_ppl_ratio": conv.ratio,
        **series,
    }
    return {k: v for k, v in numbers.items() if v is not None and not math.isnan(v)}


def log_to_wandb(
    data: RunData, report_dir: Path, tables: list[Table], scalars: dict[str, float]
) -> str | None:
    """Add the figures, tables and numbers to the run's own W&B run (resumed by id); returns
    the ``wandb sync`` command when it is offline. The report's offline folder shares the
    training run's id, and ``wandb sync`` uploads folders of one run in start-time order."""
    import wandb

    run_id = wandb_run_id(data.run_dir)
    if run_id is None:
        raise BytecanaryError(f"{data.run_dir / 'wandb'}: no W&B run to add the report to (use --no-wandb)")
    run = wandb.init(
        project=(data.config.get("run") or {}).get("wandb_project") or DEFAULT_PROJECT,
        id=run_id,
        resume="allow",
        dir=str(data.run_dir),
        mode=wandb_mode(),
        settings={"silent": True},
    )
    try:
        media = {f"report/{name}": wandb.Image(str(report_dir / f"{name}.png")) for name in FIGURES}
        media |= {f"report/table/{t.name}": wandb.Table(columns=t.labels, data=t.rows) for t in tables}
        run.log(media)
        run.summary.update(scalars)
    finally:
        offline = is_offline(run)
        run.finish()  # this run, not wandb.run: a trainer earlier in the process may have left its own
    return f"wandb sync {data.run_dir / 'wandb'}/offline-run-*-{run_id}" if offline else None


def write_report(run_dir: str | Path, wandb: bool | None = None) -> Path:
    """Write ``run_dir/report/`` whole (figures and ``report.md``) and return it. ``wandb``:
    also log to the run's W&B run (default: when ``run_dir/wandb`` holds one)."""
    data = load_run(run_dir)
    conv = analysis.convergence(data.metrics, data.probes)
    cps = analysis.checkpoints(data.probes)
    notes: list[str] = []
    series = analysis.mcqa_series(data.probes, notes) if analysis.mcqa_tasks(cps) else {}
    tables = build_tables(data.metrics, cps, conv, series)
    out = data.run_dir / REPORT_DIR
    with atomic_dir(out) as tmp:
        figures.plot_convergence(conv, tmp / "convergence.png")
        figures.plot_tiers(cps, tmp / "tiers.png")
        figures.plot_mcqa(cps, tmp / "mcqa.png")
        (tmp / "report.md").write_text(render_markdown(data, conv, tables, notes), encoding="utf-8")
    use_wandb = wandb_run_id(data.run_dir) is not None if wandb is None else wandb
    if use_wandb:
        sync = log_to_wandb(data, out, tables, _scalars(conv, series))
        if sync:
            print(f"W&B offline run saved; upload it with: {sync}")
    return out


def report_summary(run_dir: str | Path) -> str:
    """A few lines for the terminal: both convergence points, their ratio, the report's path."""
    data = load_run(run_dir)
    conv = analysis.convergence(data.metrics, data.probes)
    ratio = f"{conv.ratio:.2f}x (the paper reports about 2x)" if conv.ratio is not None else "n/a"
    headline = conv.validity.get(analysis.HEADLINE_KEY)
    return "\n".join(
        [
            f"validation perplexity {conv.ppl.describe}",
            f"Level 0 validity (all, partial) {headline.describe if headline else 'has no records'}",
            f"validity/perplexity tokens: {ratio}",
            f"report: {data.run_dir / REPORT_DIR / 'report.md'} (+ {', '.join(f'{n}.png' for n in FIGURES)})",
        ]
    )
