"""``bytecanary report`` and the analyses behind it, on fabricated run directories whose
answers are known (perplexity converges at 1e5 tokens, validity at 2e5)."""

import contextlib
import io
import itertools
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from bytecanary import analysis, figures
from bytecanary.cli import main
from bytecanary.data.evalsets import TIERS
from bytecanary.data.languages import LANGUAGES
from bytecanary.errors import BytecanaryError
from bytecanary.io import read_jsonl
from bytecanary.report import report_summary, write_report

TOKENS = [20_000 * k for k in range(1, 21)]  # 2e4 .. 4e5
PPL_AT, VALIDITY_AT = 100_000, 200_000
TASKS = [f"{kind}_{lang}" for kind in ("wordcomp", "nonsenseqa") for lang in LANGUAGES]
FAMILIES = ("plain", "json", "structured", "structured_delim", "deliberate")


def _ppl(t: int) -> float:
    return 20.0 if t >= PPL_AT else 20.0 + 3000.0 / (t / 20_000)


def _validity(t: int, top: float) -> float:
    return top if t >= VALIDITY_AT else top * t / (VALIDITY_AT + 20_000)


def _level0(t: int) -> dict[str, float]:
    m = {}
    for lang in ("all", *LANGUAGES):
        m[f"probe/level0/{lang}/all/partial"] = _validity(t, 0.9)
        m[f"probe/level0/{lang}/all/strict"] = _validity(t, 0.6)
        for i, tier in enumerate(TIERS):
            m[f"probe/level0/{lang}/{tier}/partial"] = _validity(t, 0.95 - 0.1 * i) if lang != "all" else 0.0
    return m


def _mcqa(t: int, rng: np.random.Generator) -> dict[str, float]:
    m = {}
    for task in TASKS:
        p = f"probe/mcqa/{task}"
        for protocol in ("letter_separate", "letter_merged", "cloze", "dashed"):
            m[f"{p}/{protocol}/acc"] = float(rng.choice([0.25, 0.5, 0.75]))  # ties on purpose
        for family in FAMILIES:
            parsable = float(rng.uniform())
            m[f"{p}/wrapper_{family}/parsable"] = parsable
            m[f"{p}/wrapper_{family}/acc"] = float(0.5 * parsable + rng.normal(scale=0.05))
        m |= {f"{p}/fsi": 0.1 + t / 4e6, f"{p}/psi": 0.2, f"{p}/n": 32}
    m["probe/mcqa/all/fsi"] = 0.5  # the probe's own average: not a task
    return m


def _record(t: int, probe: str, metrics: dict, status: str = "ok") -> dict:
    return {
        "checkpoint": f"/runs/x/checkpoints/step{t // 4096:07d}.ckpt",
        "step": t // 4096,
        "tokens_seen": t,
        "probe": probe,
        "status": status,
        "error": None if status == "ok" else "RuntimeError: boom",
        "seconds": 1.0,
        "metrics": metrics,
    }


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def make_run(root: Path, probes: bool = True) -> Path:
    run = root / "run"
    run.mkdir()
    metrics = []
    for t in TOKENS:
        metrics.append({"step": t // 4096, "train/loss": 3.0, "tokens_seen": t})
        metrics.append(
            {"step": t // 4096, "val/loss": math.log(_ppl(t)), "val/ppl": _ppl(t), "tokens_seen": t}
        )
    _write_jsonl(run / "metrics.jsonl", metrics)
    if probes:
        rng = np.random.default_rng(0)
        rows = [_record(t, "level0", _level0(t)) for t in TOKENS] + [
            _record(t, "mcqa", _mcqa(t, rng)) for t in TOKENS
        ]
        rows.append(_record(TOKENS[-1], "level0", {"probe/level0/all/all/partial": 0.0}, status="failed"))
        _write_jsonl(run / "probes.jsonl", rows)
    (run / "config.yaml").write_text(
        "data: {data_dir: data/default}\nrun: {name: run, wandb_project: bytecanary}\n"
        "probes:\n- {name: level0, trial: true}\n- {name: mcqa, trial: true}\n",
        encoding="utf-8",
    )
    return run


def _converges_at(xs: list[float], ys: list[float], rtol: float = 0.05, tail: float = 0.1) -> float | None:
    """The convergence rule written out: walk back from the end while points stay in the band."""
    plateau = sum(ys[-math.ceil(tail * len(ys)) :]) / math.ceil(tail * len(ys))
    first = None
    for x, y in reversed(list(zip(xs, ys, strict=True))):
        if abs(y - plateau) > rtol * abs(plateau):
            break
        first = x
    return first


def test_convergence_ratio_equals_a_recomputation(tmp_path):
    run = make_run(tmp_path)
    conv = analysis.convergence(read_jsonl(run / "metrics.jsonl"), read_jsonl(run / "probes.jsonl"))
    want_ppl = _converges_at(TOKENS, [_ppl(t) for t in TOKENS])
    want_validity = _converges_at(TOKENS, [_validity(t, 0.9) for t in TOKENS])
    assert (want_ppl, want_validity) == (PPL_AT, VALIDITY_AT)
    assert conv.ppl.converged_at == want_ppl
    assert conv.validity_tokens == want_validity
    assert conv.ratio == pytest.approx(want_validity / want_ppl) == pytest.approx(2.0)
    assert set(conv.validity) == set(analysis.VALIDITY_KEYS)
    assert conv.validity[analysis.HEADLINE_KEY].values[-1] == 0.9  # the failed record is ignored


def test_too_few_points_have_no_convergence_point():
    conv = analysis.convergence([{"tokens_seen": 1, "val/ppl": 5.0}, {"tokens_seen": 2, "val/ppl": 4.0}], [])
    assert conv.ppl.converged_at is None and conv.ratio is None
    assert "too few points" in conv.ppl.describe
    assert conv.validity == {}


def _is_png(path: Path) -> bool:
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


@pytest.fixture(scope="module")
def reported(tmp_path_factory) -> tuple[Path, str]:
    """A fabricated run reported once through the command line; (run dir, stdout)."""
    run = make_run(tmp_path_factory.mktemp("reported"))
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        assert main(["report", str(run), "--no-wandb"]) == 0
    return run, stdout.getvalue()


def test_report_writes_valid_pngs(reported):
    out = reported[0] / "report"
    assert sorted(p.name for p in out.iterdir()) == ["convergence.png", "mcqa.png", "report.md", "tiers.png"]
    assert all(_is_png(out / f"{name}.png") for name in ("convergence", "tiers", "mcqa"))


def test_report_md_holds_the_tables_and_commands(reported):
    run = reported[0]
    md = (run / "report" / "report.md").read_text(encoding="utf-8")
    assert "converges after 2.00x the tokens of perplexity (200,000 vs 100,000 tokens seen)" in md
    for title in (
        "per checkpoint",
        "Convergence points",
        "by tier, zh",
        "MCQA accuracy",
        "FSI and PSI",
        "MCQA by task",
    ):
        assert title in md
    assert "| 100,000 | 24 | 20.0 |" in md  # the per-checkpoint table, perplexity merged in
    assert "| val/ppl | 20 | 100,000 | 1.00 |" in md
    assert "| probe/level0/all/all/partial | 20 | 200,000 | 2.00 |" in md
    assert f"bytecanary train --config {run}/config.yaml --run.name=run-rerun" in md
    assert f"bytecanary probe {run}/checkpoints --config {run}/config.yaml --out {run}/probes.jsonl" in md
    assert f"bytecanary report {run}" in md
    assert "| probe/mcqa/wordcomp_en/kendall_tau_sep_merged |" in md


def test_cli_prints_the_summary_and_path(reported):
    run, stdout = reported
    assert stdout == report_summary(run) + "\n"
    assert "100,000" in stdout and "200,000" in stdout and "2.00x" in stdout
    assert str(run / "report" / "report.md") in stdout


def test_perplexity_only_run(tmp_path):
    run = make_run(tmp_path, probes=False)
    out = write_report(run, wandb=False)
    assert all(_is_png(out / f"{name}.png") for name in ("convergence",))
    assert (out / "tiers.png").stat().st_size > 0 and (out / "mcqa.png").stat().st_size > 0
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "No validity/perplexity ratio" in md and "## MCQA" not in md
    assert "validity/perplexity tokens: n/a" in report_summary(run)


def test_malformed_line_names_file_and_line(tmp_path, capsys):
    run = make_run(tmp_path)
    lines = (run / "metrics.jsonl").read_text().splitlines()
    lines[2] = lines[2][:-5]
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(BytecanaryError, match=r"metrics\.jsonl:3: not valid JSON"):
        write_report(run, wandb=False)
    assert main(["report", str(run), "--no-wandb"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "metrics.jsonl:3" in err and len(err.strip().splitlines()) == 1
    assert not (run / "report").exists()


def test_unterminated_last_line_is_a_write_in_flight(tmp_path):
    path = tmp_path / "probes.jsonl"
    path.write_text('{"a": 1}\n{"a": 2}\n{"a": ', encoding="utf-8")
    assert read_jsonl(path) == [{"a": 1}, {"a": 2}]
    path.write_text('{"a": 1}\n[1]\n', encoding="utf-8")
    with pytest.raises(BytecanaryError, match=r"probes\.jsonl:2: expected a JSON object"):
        read_jsonl(path)


def test_missing_metrics_is_one_error_naming_the_path(tmp_path):
    with pytest.raises(BytecanaryError, match=r"metrics\.jsonl: no such file"):
        write_report(tmp_path, wandb=False)


def test_failed_write_keeps_the_previous_report_whole(reported, tmp_path, monkeypatch):
    run = Path(shutil.copytree(reported[0], tmp_path / "run"))
    before = {p.name: p.read_bytes() for p in (run / "report").iterdir()}

    def boom(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(figures, "plot_tiers", boom)  # after convergence.png is written
    with pytest.raises(RuntimeError, match="disk full"):
        write_report(run, wandb=False)
    assert {p.name: p.read_bytes() for p in (run / "report").iterdir()} == before
    assert [p.name for p in run.iterdir() if p.name.startswith(".report")] == []
    shutil.rmtree(run / "report")
    with pytest.raises(RuntimeError):
        write_report(run, wandb=False)
    assert not (run / "report").exists()


def _tau_by_pair_count(x: list[float], y: list[float]) -> float:
    concordant = discordant = tied_x = tied_y = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
        tied_x += dx == 0
        tied_y += dy == 0
        concordant += dx * dy > 0
        discordant += dx * dy < 0
    pairs = len(x) * (len(x) - 1) // 2
    return (concordant - discordant) / math.sqrt((pairs - tied_x) * (pairs - tied_y))


def test_mcqa_series_equals_direct_recomputation(tmp_path):
    rows = [json.loads(line) for line in (make_run(tmp_path) / "probes.jsonl").read_text().splitlines()]
    ok = [r for r in rows if r["status"] == "ok" and r["probe"] == "mcqa"]
    notes: list[str] = []
    got = analysis.mcqa_series(rows, notes)
    assert notes == []
    for task in TASKS:
        sep = [r["metrics"][f"probe/mcqa/{task}/letter_separate/acc"] for r in ok]
        merged = [r["metrics"][f"probe/mcqa/{task}/letter_merged/acc"] for r in ok]
        assert got[f"probe/mcqa/{task}/kendall_tau_sep_merged"] == pytest.approx(
            _tau_by_pair_count(sep, merged)
        )
    cells = [
        (
            i,
            task,
            family,
            r["metrics"][f"{p}/wrapper_{family}/acc"],
            r["metrics"][f"{p}/wrapper_{family}/parsable"],
        )
        for i, r in enumerate(ok)
        for task in TASKS
        for family in FAMILIES
        for p in [f"probe/mcqa/{task}"]
    ]
    ckpt, task, family, acc, parsable = (np.array(v) for v in zip(*cells, strict=True))
    assert got["probe/mcqa/all/cells"] == len(cells) == 20 * 8 * 5
    assert got["probe/mcqa/all/acc_parsable_r"] == pytest.approx(np.corrcoef(acc, parsable)[0, 1])
    dummies = np.column_stack([np.equal.outer(f, np.unique(f)) for f in (ckpt, task, family)]).astype(float)
    coef, *_ = np.linalg.lstsq(np.column_stack([parsable, dummies]), acc, rcond=None)
    resid_x = parsable - dummies @ np.linalg.lstsq(dummies, parsable, rcond=None)[0]
    rss = np.sum((acc - np.column_stack([parsable, dummies]) @ coef) ** 2)
    dof = len(acc) - np.linalg.matrix_rank(dummies) - 1
    assert got["probe/mcqa/all/parsability_beta"] == pytest.approx(coef[0], rel=1e-9)
    assert got["probe/mcqa/all/parsability_beta"] == pytest.approx(0.5, abs=0.05)
    assert got["probe/mcqa/all/parsability_beta_se"] == pytest.approx(
        math.sqrt(rss / dof / (resid_x @ resid_x))
    )
    assert "probe/mcqa/all/kendall_tau_sep_merged" not in got  # "all" is the probe's average, not a task


def test_mcqa_series_skips_what_the_data_cannot_support():
    rows = [
        _record(
            t,
            "mcqa",
            {
                "probe/mcqa/wordcomp_en/letter_separate/acc": 0.5,
                "probe/mcqa/wordcomp_en/letter_merged/acc": 0.25,
                "probe/mcqa/wordcomp_en/wrapper_json/acc": 0.5,
                "probe/mcqa/wordcomp_en/wrapper_json/parsable": 1.0,
            },
        )
        for t in TOKENS[:2]
    ]
    notes: list[str] = []
    got = analysis.mcqa_series(rows, notes)
    assert math.isnan(got["probe/mcqa/wordcomp_en/kendall_tau_sep_merged"])
    assert got["probe/mcqa/all/cells"] == 2
    assert all(math.isnan(got[f"probe/mcqa/all/{k}"]) for k in ("acc_parsable_r", "parsability_beta"))
    assert len(notes) == 2 and "Kendall tau needs 3 checkpoints" in notes[0]
    empty = analysis.mcqa_series([])
    assert empty["probe/mcqa/all/cells"] == 0 and math.isnan(empty["probe/mcqa/all/parsability_beta_se"])


def test_report_logs_figures_to_the_runs_offline_wandb_run(tmp_path, monkeypatch):
    import wandb

    monkeypatch.setenv("WANDB_MODE", "offline")
    run = make_run(tmp_path)
    wandb.init(project="bytecanary", id="feedbeef", dir=str(run), mode="offline", settings={"silent": True})
    wandb.finish()
    wandb.teardown()
    write_report(run)  # default: W&B on, since run/wandb holds a run
    newest = max((run / "wandb").glob("offline-run-*-feedbeef"))
    images = {p.name.split("_")[0] for p in (newest / "files" / "media" / "images" / "report").glob("*.png")}
    assert images == {"convergence", "tiers", "mcqa"}
    tables = {
        p.name.split("_")[0]
        for p in (newest / "files" / "media" / "table" / "report" / "table").glob("*.json")
    }
    assert {"convergence", "mcqa"} <= tables
