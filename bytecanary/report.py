"""``bytecanary report RUN_DIR``: convergence analysis, figures and tables (seeds/003 abstract).

Reads ``RUN_DIR/metrics.jsonl`` and ``RUN_DIR/probes.jsonl`` (``../shared/CONVENTIONS.md``)
and writes ``RUN_DIR/report/``: ``convergence.png``, ``tiers.png``, ``mcqa.png`` and
``report.md`` with the numbers behind every figure and the commands that reproduce them.
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

from bytecanary import analysis, figures
from bytecanary.analysis import Checkpoint, Convergence, Curve
from bytecanary.config import read_yaml
from bytecanary.data.evalsets import TIERS
from bytecanary.data.languages import LANGUAGES
from bytecanary.errors import BytecanaryError
from bytecanary.io import atomic_dir, read_jsonl

REPORT_DIR = "report"
FIGURES = ("convergence", "tiers", "mcqa")
_WANDB_RUN_DIR = re.compile(r"^(?:offline-)?run-(\d{8}_\d{6})-([A-Za-z0-9]+)$")
_VALIDITY_COLUMNS = [
    (f"V {m} {lang}", analysis.level0_key(lang, "all", m))
    for m in ("partial", "strict")
    for lang in ("all", *LANGUAGES)
]
_TASK_COLUMNS = [  # (column, key under probe/mcqa/<task>/, format)
    ("letter sep acc", "letter_separate/acc", ".3f"),
    ("letter merged acc", "letter_merged/acc", ".3f"),
    ("cloze acc", "cloze/acc", ".3f"),
    ("cloze acc_norm", "cloze/acc_norm", ".3f"),
    ("M&D acc", "dashed/acc", ".3f"),
    ("McNemar p", "mcnemar_p", ".3g"),
    *((name, name, ".3f") for name in ("fsi", "fsi_lo", "fsi_hi", "psi", "psi_lo", "psi_hi", "nfsi")),
    ("n", "n", ",.0f"),
]


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


@dataclass(frozen=True)
class Table:
    """One table of the report: markdown in ``report.md``, a ``wandb.Table`` in W&B."""

    name: str
    title: str
    columns: list[str]
    formats: list[str]  # a format spec per column
    rows: list[list[Any]]

    def markdown(self) -> str:
        head = f"| {' | '.join(self.columns)} |\n|{'---|' * len(self.columns)}\n"
        body = "".join(
            f"| {' | '.join(_cell(v, f) for v, f in zip(row, self.formats, strict=True))} |\n"
            for row in self.rows
        )
        return f"## {self.title}\n\n{head}{body}"

    def without_empty_columns(self, keep: int) -> Table:
        """Drop the columns after the first ``keep`` that hold no value at all."""
        cols = [i for i in range(len(self.columns)) if i < keep or any(r[i] is not None for r in self.rows)]
        return Table(
            self.name,
            self.title,
            [self.columns[i] for i in cols],
            [self.formats[i] for i in cols],
            [[r[i] for i in cols] for r in self.rows],
        )


def _cell(value: Any, spec: str) -> str:
    """``-`` for absent data, ``n/a`` for a statistic the data cannot support."""
    if value is None:
        return "-"
    if isinstance(value, float) and math.isnan(value):
        return "n/a"
    return format(value, spec)


def _rows_by_checkpoint(
    data: RunData, cps: list[Checkpoint], columns: list[tuple[str, str]], with_ppl: bool
) -> list[list[Any]]:
    """tokens_seen, step, [val ppl], then ``columns`` per checkpoint; with ``with_ppl`` every
    validation row too, merged on tokens_seen."""
    rows: dict[Any, dict[str, Any]] = {}
    for c in cps:
        key = c.tokens_seen if c.tokens_seen is not None else f"checkpoint {c.key}"
        rows[key] = {"tokens": c.tokens_seen, "step": c.step, **{k: c.value(k) for _, k in columns}}
    for r in data.metrics if with_ppl else ():
        ppl = analysis.finite(r.get(analysis.PPL_KEY))
        if ppl is not None and r.get("tokens_seen") is not None:
            row = rows.setdefault(r["tokens_seen"], {"tokens": r["tokens_seen"], "step": r.get("step")})
            row[analysis.PPL_KEY] = ppl
    ordered = sorted(rows.values(), key=lambda r: (r["tokens"] is None, r["tokens"] or 0, r["step"] or 0))
    keys = ([analysis.PPL_KEY] if with_ppl else []) + [k for _, k in columns]
    return [[r["tokens"], r["step"], *(r.get(k) for k in keys)] for r in ordered]


def _checkpoint_table(
    name: str,
    title: str,
    data: RunData,
    cps: list[Checkpoint],
    columns: list[tuple[str, str]],
    with_ppl: bool = False,
) -> Table:
    head = ["tokens seen", "step"] + (["val ppl"] if with_ppl else [])
    formats = [",", ""] + ([",.1f"] if with_ppl else [])
    rows = _rows_by_checkpoint(data, cps, columns, with_ppl)
    return Table(name, title, head + [c for c, _ in columns], formats + [".3f"] * len(columns), rows)


def _convergence_table(conv: Convergence) -> Table:
    rows = []
    for curve in (conv.ppl, *conv.validity.values()):
        note = "" if curve.converged_at is not None else curve.describe
        rows.append(
            [curve.key, len(curve.tokens), curve.converged_at, conv.ratio_to_ppl(curve.converged_at), note]
        )
    columns = ["curve", "points", "converges at (tokens seen)", "x val/ppl tokens", "note"]
    return Table(
        "convergence",
        "Convergence points (same rule for every curve)",
        columns,
        ["", "", ",.0f", ".2f", ""],
        rows,
    )


def _tier_tables(data: RunData, cps: list[Checkpoint]) -> list[Table]:
    tables = []
    for lang in LANGUAGES:
        columns = [(tier, analysis.level0_key(lang, tier, "partial")) for tier in TIERS]
        if any(c.value(k) is not None for c in cps for _, k in columns):
            title = f"Level 0 V partial by tier, {lang}"
            tables.append(_checkpoint_table(f"tiers_{lang}", title, data, cps, columns))
    return tables


def _group_columns(
    groups: dict[str, list[str]], metrics: list[tuple[str, str]]
) -> list[tuple[str, list[str], str]]:
    return [
        (f"{group} {label}", tasks, suffix) for group, tasks in groups.items() for label, suffix in metrics
    ]


def _group_table(
    name: str, title: str, cps: list[Checkpoint], columns: list[tuple[str, list[str], str]]
) -> Table:
    """Per checkpoint, the mean over a task group of one metric per column (as plotted)."""
    curves = [analysis.group_mean_curve(cps, tasks, suffix) for _, tasks, suffix in columns]
    tokens = sorted({x for c in curves for x in c.tokens})
    steps = {c.tokens_seen: c.step for c in cps}
    rows = [[int(x), steps.get(int(x)), *(_value_at(c, x) for c in curves)] for x in tokens]
    table = Table(
        name,
        title,
        ["tokens seen", "step", *(c for c, _, _ in columns)],
        [",", ""] + [".3f"] * len(columns),
        rows,
    )
    return table.without_empty_columns(keep=2)


def _value_at(curve: Curve, x: float) -> float | None:
    return curve.values[curve.tokens.index(x)] if x in curve.tokens else None


def _mcqa_tables(cps: list[Checkpoint], series: dict[str, float]) -> list[Table]:
    groups = analysis.task_groups(cps)
    if not groups:
        return []
    accuracy = [(label, f"{protocol}/acc") for protocol, (label, _, _) in figures.PROTOCOLS.items()]
    sensitivity = [("FSI", "fsi"), ("PSI", "psi")]
    last = next(c for c in reversed(cps) if any(k.startswith("probe/mcqa/") for k in c.metrics))
    task_rows = [
        [t, *(last.value(f"probe/mcqa/{t}/{k}") for _, k, _ in _TASK_COLUMNS)]
        for t in analysis.mcqa_tasks([last])
    ]
    at = f"{last.tokens_seen:,} tokens seen" if last.tokens_seen is not None else last.key
    by_group = [
        _group_table(
            "mcqa_accuracy", "MCQA accuracy, mean over each task group", cps, _group_columns(groups, accuracy)
        ),
        _group_table(
            "mcqa_sensitivity",
            "FSI and PSI, mean over each task group",
            cps,
            _group_columns(groups, sensitivity),
        ),
    ]
    return [
        *(t for t in by_group if len(t.columns) > 2),
        Table(
            "mcqa_tasks",
            f"MCQA by task at the last probed checkpoint ({at})",
            ["task", *(c for c, _, _ in _TASK_COLUMNS)],
            ["", *(f for _, _, f in _TASK_COLUMNS)],
            task_rows,
        ).without_empty_columns(keep=1),
        Table(
            "mcqa_series",
            "MCQA across checkpoints",
            ["statistic", "value"],
            ["", ".4g"],
            [[k, v] for k, v in series.items()],
        ),
    ]


def build_tables(data: RunData, conv: Convergence, series: dict[str, float]) -> list[Table]:
    """Every table of the report, in the order of the figures they stand behind."""
    cps = analysis.checkpoints(data.probes)
    per_checkpoint = _checkpoint_table(
        "per_checkpoint",
        "Validation perplexity and Level 0 validity per checkpoint",
        data,
        cps,
        [(c, k) for c, k in _VALIDITY_COLUMNS if k in conv.validity],
        with_ppl=True,
    )
    return [per_checkpoint, _convergence_table(conv), *_tier_tables(data, cps), *_mcqa_tables(cps, series)]


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
        f"5% of its plateau (the mean of its last 10% of points); curves with fewer than "
        f"{analysis.MIN_POINTS} points have none."
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

    from bytecanary.tracking import is_offline, wandb_mode

    run_id = wandb_run_id(data.run_dir)
    if run_id is None:
        raise BytecanaryError(f"{data.run_dir / 'wandb'}: no W&B run to add the report to (use --no-wandb)")
    run = wandb.init(
        project=(data.config.get("run") or {}).get("wandb_project") or "bytecanary",
        id=run_id,
        resume="allow",
        dir=str(data.run_dir),
        mode=wandb_mode(),
        settings={"silent": True},
    )
    try:
        media = {f"report/{name}": wandb.Image(str(report_dir / f"{name}.png")) for name in FIGURES}
        media |= {f"report/table/{t.name}": wandb.Table(columns=t.columns, data=t.rows) for t in tables}
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
    tables = build_tables(data, conv, series)
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
