"""``bytecanary report PATH``: convergence analysis, figures and tables ("Beyond
Perplexity: UTF-8 Validity in Byte-aware LMs", arXiv:2606.14122), built aside and swapped in
whole so a crash never leaves half a report (docs/report-and-wandb.md).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from bytecanary import keys, settling, stats
from bytecanary.errors import BytecanaryError
from bytecanary.io import atomic_dir, check_output, read_jsonl
from bytecanary.records import Record, merge, read
from bytecanary.report import analysis, figures, sections
from bytecanary.report.analysis import Convergence
from bytecanary.report.axis import STEP_NOTE, TOKENS_AXIS, Axis
from bytecanary.report.sources import RunData, commands, load_run, locate
from bytecanary.report.tables import Table, build_tables
from bytecanary.tracking import (
    SIDECAR,
    RunWandb,
    is_offline,
    log_records,
    mark_merged,
    offline_sync,
    records_to_merge,
    wandb_mode,
)

REPORT_DIR = "report"
CONVERGENCE_FIGURE = "`convergence.png` (perplexity, greedy validity, expected validity p_valid)"
_WANDB_RUN_DIR = re.compile(r"^(?:offline-)?run-(\d{8}_\d{6})-([A-Za-z0-9]+)$")


def render_markdown(data: RunData, conv: Convergence, tables: list[Table], notes: dict[str, str]) -> str:
    """``report.md``: the headline, every table, why any statistic is missing, and the commands."""
    rule = (
        f"One detector judges every curve (`stats.detect_convergence`; {conv.ppl.key} on its log): a "
        f"curve converged at the first checkpoint from which the rest is flat (at least "
        f"{stats.MIN_TAIL} points, slope per decade of {conv.axis.noun} within {stats.SLOPE_Z:g} SE of 0, "
        f"every point within {stats.BAND_Z:g}x noise of the tail's mean, the slope's upper bound under "
        f"{stats.RATE_FRACTION:g}x the rate the curve came at), after departing from that tail by "
        f"more than {stats.MOVE_Z:g}x noise; flat from the start is 'no change beyond noise', no "
        f"flat tail is 'still moving'. Noise: for greedy validity (V partial, strict) the larger "
        f"of the probe's binomial SE from its n and the scatter of the checkpoints around each "
        f"point ({2 * stats.LOCAL_HALF + 1} nearest, about the line through each one's neighbours): "
        f"prompts flip together, so the scatter between checkpoints can dwarf the binomial SE; "
        f"for expected validity (p_valid) the SE over the samples its probe recorded "
        f"(p_valid_se); for {conv.ppl.key} the scatter between neighbouring checkpoints. The ratio's CI "
        f"is a parametric bootstrap (both curves perturbed by their noise, the detector rerun); "
        f"there is a ratio only when both curves converged."
    )
    named = list(conv.named.items())
    shown = [f"`{s.figure}.png` ({s.figure_note})" for s in sections.every() if s.figure]
    parts = [
        f"# bytecanary report: {data.source}\n",
        *([f"**{data.unfinished.removeprefix('note: ')}.**\n"] if data.unfinished else []),
        *([f"Perplexity: {conv.ppl_name}, `{conv.ppl.key}`.\n"] if conv.ppl.key != keys.val_ppl() else []),
        *([f"{STEP_NOTE}.\n"] if data.axis != TOKENS_AXIS else []),
        *(f"{conv.explain(k)}{f' ({r.note}).' if r.note and conv.ratios[k] else '.'}\n" for k, r in named),
        *(f"{conv.explain_tolerance(k)}.\n" for k, _ in named),
        rule + "\n",
        tolerance_rule(conv.tolerance) + "\n",
        f"Figures: {', '.join([CONVERGENCE_FIGURE, *shown])}. Absent data is `-`; a statistic the data "
        "cannot support is `n/a`.\n",
        *(t.markdown() for t in tables),
    ]
    if notes:
        parts.append(
            "Statistics left out:\n\n" + "".join(f"- `{k}`: n/a: {why}\n" for k, why in notes.items())
        )
    if data.left_out:
        parts.append(
            "Records left out (one curve per parameterisation):\n\n"
            + "".join(f"- {n}\n" for n in data.left_out)
        )
    parts.append("## Reproduce\n\n```bash\n" + "\n".join(commands(data)) + "\n```\n")
    return "\n".join(parts)


def tolerance_rule(tolerance: settling.Tolerance) -> str:
    """How the time-to-tolerance lines and grids are made, for ``report.md``."""
    return (
        f"Time to tolerance (`settling.time_to_tolerance`): T(eps) is the first checkpoint from which a "
        f"curve stays within eps of its final level for the rest of the run (at least "
        f"{settling.MIN_STAY} checkpoints); eps is relative for perplexity (a factor 1 + eps, on its log; "
        f"default {settling.eps_text(tolerance.ppl_tolerance, True)}) and absolute for validity (default "
        f"{settling.eps_text(tolerance.validity_tolerance, False)}). The final level is the mean of the "
        f"last checkpoints within the noise (the last {settling.MIN_STAY}, and each one before them while it "
        f"lies within {settling.FINAL_Z:g}x noise of that mean and the tail shows no slope beyond "
        f"{settling.FINAL_SLOPE_Z:g} SE). A point is within eps when the median of the narrowest window of "
        f"3 to {2 * settling.MAX_HALF + 1} checkpoints around it that knows the level to eps/"
        f"{settling.RESOLVE_Z:g} is, so one noisy point neither ends nor extends the stay. Noise: the larger "
        f"of the probe's sampling SE and the scatter of the checkpoints around the point (a median); "
        f"where more than half of the stay cannot tell eps, the curve is 'too noisy'. The ratio's CI is "
        f"a parametric bootstrap of checkpoint noise ({tolerance.ci_resamples} resamples: each curve's "
        f"running median plus normal noise of each point's size, the whole rule rerun); the records "
        f"hold no per-prompt scores, so prompts are not resampled. It holds within this run: a longer "
        f"run has a later final level."
    )


def wandb_run_id(run_dir: Path) -> str | None:
    """The id of the run's training W&B run: ``run_dir/wandb_id``, which its logger keeps;
    without one (a run from before it), the newest W&B run under ``run_dir/wandb``
    (``[offline-]run-<time>-<id>``) that no sidecar wrote (their ids end in ``-probes``)."""
    training = RunWandb.of(run_dir).run_id
    if training is not None:
        return training
    found = sorted(
        m.groups()
        for p in (run_dir / "wandb").glob("*run-*")
        if p.is_dir() and (m := _WANDB_RUN_DIR.match(p.name)) and not m[2].endswith(SIDECAR)
    )
    return found[-1][1] if found else None


def _scalars(conv: Convergence, inputs: sections.Inputs) -> dict[str, float]:
    """The report's numbers for the W&B run summary (absent ones left out)."""
    numbers: dict[str, float | None] = {"report/ppl_converged_tokens": conv.ppl.converged_at}
    for key, named in conv.named.items():
        curve, r = conv.curve(key), conv.ratios[key]
        numbers[f"report/{named.name}_converged_tokens"] = curve.converged_at if curve else None
        for end, value in (("", "value"), ("_lo", "lo"), ("_hi", "hi")):
            numbers[f"report/{named.name}_ppl_ratio{end}"] = getattr(r, value) if r else None
    numbers["report/ppl_tolerance_tokens"] = conv.settling(conv.ppl).at
    numbers |= _tolerance_scalars(conv)
    for section in sections.every():
        numbers |= section.scalars(inputs) if section.scalars is not None else {}
    numbers |= inputs.series
    return {k: v for k, v in numbers.items() if v is not None and not math.isnan(v)}


def _tolerance_scalars(conv: Convergence) -> dict[str, float | None]:
    """Per ratio curve, its T(eps) and its time-to-tolerance ratio to perplexity with the CI
    (at the default tolerances)."""
    out: dict[str, float | None] = {}
    for key, named in conv.named.items():
        curve, r = conv.curve(key), conv.tolerance_ratio(key)
        out[f"report/{named.name}_tolerance_tokens"] = conv.settling(curve).at if curve else None
        for end, value in (("", "value"), ("_lo", "lo"), ("_hi", "hi")):
            out[f"report/{named.name}_ppl_tolerance_ratio{end}"] = getattr(r, value) if r else None
    return out


def curve_charts(conv: analysis.Convergence) -> dict[str, Any]:
    """The paper's finding as W&B line charts against tokens seen: greedy validity (V partial
    and strict per language), expected validity (p_valid per language) and validation
    perplexity, one chart each (their scales and their noise differ)."""
    import wandb

    def chart(curves: list[analysis.Curve], title: str) -> Any:
        xs = sorted({x for c in curves for x in c.tokens})
        ys = [[dict(zip(c.tokens, c.values, strict=True)).get(x, math.nan) for x in xs] for c in curves]
        keys = [c.key for c in curves]
        return wandb.plot.line_series(xs=xs, ys=ys, keys=keys, title=title, xname="tokens_seen")

    groups = {
        "report/chart/ppl_vs_tokens": ([conv.ppl], f"{conv.ppl_name} vs tokens seen"),
        "report/chart/validity_vs_tokens": (list(conv.validity.values()), "Level 0 validity vs tokens seen"),
        "report/chart/p_valid_vs_tokens": (
            list(conv.p_valid.values()),
            "Level 0 expected validity (p_valid) vs tokens seen",
        ),
    }
    # a chart without a point (a run killed before its first validation) is left out
    return {
        name: chart(curves, title)
        for name, (curves, title) in groups.items()
        if any(c.tokens for c in curves)
    }


def log_to_wandb(
    data: RunData,
    run_id: str,
    report_dir: Path,
    tables: list[Table],
    scalars: dict[str, float],
    charts: dict[str, Any] | None = None,
) -> Path | None:
    """Add the figures, tables and numbers to the run's own W&B run (resumed by id), first the probe
    records its history lacks (``tracking.records_to_merge``), each once; returns the folder it
    wrote when offline (one more ``offline-run-*-<id>`` beside the training run's).
    """
    import wandb

    home = RunWandb.of(data.run_dir)
    rows, merged = records_to_merge(data.run_dir, run_id)
    run = wandb.init(
        project=home.project,
        id=run_id,
        resume="allow",
        dir=str(data.run_dir),
        mode=wandb_mode(),
        settings={"silent": True},
    )
    logged = False
    try:
        log_records(run, rows, home.detail)
        logged = True
        media = {
            f"report/{name}": wandb.Image(str(report_dir / f"{name}.png")) for name in sections.figures()
        }
        media |= {f"report/table/{t.name}": wandb.Table(columns=t.labels, data=t.rows) for t in tables}
        run.log(media | (charts or {}))
        run.summary.update(scalars)
    finally:
        offline_dir = Path(run.dir).parent if is_offline(run) else None  # run.dir is <folder>/files
        run.finish()  # this run, not wandb.run: a trainer earlier in the process may have left its own
        if logged:  # in the run's files now: a later report must not log them again
            mark_merged(data.run_dir, run_id, merged)
    return offline_dir


def write_report(
    path: str | Path,
    wandb: bool | None = None,
    tolerance: settling.Tolerance | None = None,
    tokens_per_step: int | None = None,
) -> Path:
    """Write ``report/`` whole beside a run's or a records file's records (``sources.locate``) and return
    it; ``wandb`` also logs to the training run's W&B run (default: when it has one), offline
    printing one ``wandb sync`` of the run's whole ``wandb/`` (docs/report-and-wandb.md).
    """
    check_output(locate(path)[0] / REPORT_DIR, folder=True)  # before the work: report/ may be a file
    data = load_run(path, tokens_per_step=tokens_per_step)
    run_id = wandb_run_id(data.run_dir) if data.training else None
    if wandb and data.training and run_id is None:  # before the work
        raise BytecanaryError(
            f"{data.run_dir / 'wandb'}: no W&B run to add the report to (use --wandb=false)"
        )
    conv = analysis.convergence(data.metrics, data.probes, tolerance, data.axis)
    cps = analysis.checkpoints(data.probes)
    notes: dict[str, str] = {}
    inputs = sections.Inputs(data.metrics, cps, data.axis, sections.series(data.probes, notes))
    tables = build_tables(inputs, conv)
    out = data.run_dir / REPORT_DIR
    with atomic_dir(out) as tmp:
        figures.plot_convergence(conv, tmp / "convergence.png")
        for section in sections.every():
            if section.figure and section.draw is not None:
                section.draw(inputs, tmp / f"{section.figure}.png")
        (tmp / "report.md").write_text(render_markdown(data, conv, tables, notes), encoding="utf-8")
    if not data.training:
        if wandb:
            print(f"W&B: nothing logged: {data.source} is no training run, so it has no W&B run to add to")
        return out
    if run_id is not None and wandb is not False:
        offline = log_to_wandb(data, run_id, out, tables, _scalars(conv, inputs), curve_charts(conv))
        sync = offline_sync(offline, data.run_dir / "wandb")
        if sync:
            print(
                f"W&B offline run saved; upload it with the run's others (training, probes, reports): {sync}"
            )
    return out


def report_summary(
    path: str | Path, tolerance: settling.Tolerance | None = None, tokens_per_step: int | None = None
) -> str:
    """A few lines for the terminal, after ``write_report`` (which already warned of bad lines): what
    perplexity, V_partial and p_valid did, their ratios to perplexity, the tier gap, the share of
    the run spent in probes, the report's path, and whether the run is unfinished or on steps.
    """
    data = load_run(path, on_bad=lambda message: None, tokens_per_step=tokens_per_step)
    cost = analysis.probe_cost(data.metrics)
    drawn = ", ".join(f"{name}.png" for name in sections.figures())
    return "\n".join(
        [
            *([data.unfinished] if data.unfinished else []),
            *([STEP_NOTE] if data.axis != TOKENS_AXIS else []),
            *ratio_lines(data.metrics, data.probes, tolerance, data.axis),
            *([f"probes: {cost.describe()}"] if cost else []),
            f"report: {data.run_dir / REPORT_DIR / 'report.md'} (+ {drawn})",
        ]
    )


def probe_ratio_lines(run_dir: Path, out: Path) -> list[str]:
    """``bytecanary probe``'s lines under its tables when it probed a training run: the ratios
    of the records in ``out`` to the run's perplexity, as ``bytecanary report`` states them."""
    metrics_path = run_dir / "metrics.jsonl"
    if not metrics_path.is_file() or not out.is_file():
        return []
    metrics = read_jsonl(metrics_path, on_bad=lambda message: None)  # the run's own: report warns of it
    return ratio_lines(metrics, merge(read(out, lambda message: None)))  # the tables above warned


def ratio_text(r: stats.RatioEstimate, note: str = "") -> str:
    """A convergence ratio with its 95% CI, as every report states it."""
    return f"{r.value:.2f}x (95% CI {r.lo:.2f}-{r.hi:.2f}{note})"


def ratio_lines(
    metrics: list[dict[str, Any]],
    probes: list[Record],
    tolerance: settling.Tolerance | None = None,
    axis: Axis = TOKENS_AXIS,
) -> list[str]:
    """What perplexity, V_partial and p_valid did and the two ratios to perplexity (flat tail,
    and time to ``tolerance`` within this run), then the tier gap at the last checkpoint."""
    conv = analysis.convergence(metrics, probes, tolerance, axis)
    eps = conv.tolerance
    within = (
        f"{settling.eps_text(eps.validity_tolerance, False)} vs {settling.eps_text(eps.ppl_tolerance, True)}"
    )
    lines = [f"{conv.ppl_name} {conv.describe(conv.ppl)}"]
    for key, named in conv.named.items():
        name, curve, r = named.name, conv.curve(key), conv.ratios[key]
        lines.append(f"{named.what} {conv.describe(curve) if curve else 'has no records'}")
        note = f"; {named.note}" if named.note else ""
        ratio = ratio_text(r, note) if r else f"n/a ({conv.why_no_ratio(key)})"
        lines.append(f"{name}/perplexity {axis.noun}: {ratio}")
        t = conv.tolerance_ratio(key)
        settled = (
            f"{t.value:.2f}x (95% CI {settling.ci_text(t)})"
            if t
            else f"n/a ({conv.why_no_tolerance_ratio(key)})"
        )
        lines.append(f"{name}/perplexity {axis.noun} to tolerance ({within}, within this run): {settled}")
    cps = analysis.checkpoints(probes)
    return [*lines, *(line for s in sections.every() if s.lines is not None for line in s.lines(cps, axis))]
