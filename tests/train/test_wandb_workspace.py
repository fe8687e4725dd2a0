"""The W&B workspace: headline curves as scalars against tokens_seen, the fine grid as tables.

Read back from the offline run's own records, as W&B wrote them."""

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from bytecanary.io import read_jsonl
from bytecanary.tracking import HEADLINE_LIMIT, WandbView

from ..conftest import wandb_records

PROBES = [
    {"name": "level0", "trial": True, "per_language": 6},
    {"name": "level1", "trial": True, "per_language": 3},
    {
        "name": "mcqa",
        "trial": True,
        "embedded_per_language": 4,
        "nonsense_per_language": 4,
        "generative_per_task": 2,
        "max_new_tokens": 4,
    },
]
AXES = {"tokens_seen", "step", "trainer/global_step", "epoch"}


def headline_by_hand(key: str) -> bool:
    """The issue's headline list, written out independently of ``tracking.is_headline``."""
    p = key.split("/")
    if key.startswith(("train/", "perf/")) or key in ("val/ppl", "val/loss"):
        return True
    if p[0] == "val":
        return len(p) == 3 and p[2] in ("ppl", "loss")
    if p[1] == "level0":
        headline = ("partial", "strict", "gold_win_rate", "p_valid")  # p_valid: all and per language
        return (len(p) == 5 and p[3] == "all" and p[4] in headline) or (
            len(p) == 5 and p[2] != "all" and p[4] == "partial"
        )
    if p[1] == "level1":
        return len(p) == 4 and p[3] == "term_match"
    return len(p) == 5 and p[3] == "cloze" and p[4] == "acc"  # mcqa: per task for cloze


def key_of(probe: str, fields_and_metric: list) -> str:
    """The probes.jsonl key a detail-table row stands for; "all" in the last field means
    the key has no such part (no prefix length, or across protocols)."""
    *fields, metric = fields_and_metric
    if fields[-1] == "all":
        fields = fields[:-1]
    return "/".join(["probe", probe, *fields, metric])


class FakeRun:
    def __init__(self) -> None:
        self.defined: dict[str, dict] = {}

    def define_metric(self, name: str, **kwargs) -> None:
        self.defined[name] = kwargs


def test_view_splits_headline_from_detail_and_sets_summaries():
    metrics = {
        "tokens_seen": 4096,
        "probe/level0/all/all/partial": 0.9,
        "probe/level0/ja/rare/k1/strict": 0.1,
        "probe/level0/ja/rare/partial": 0.8,
        "probe/level1/all/term_match": 0.0,
        "probe/level1/ko/k2/soft": 0.5,
        "probe/mcqa/wordcomp_en/cloze/acc": 0.5,
        "probe/mcqa/wordcomp_ja/cloze/acc": 0.7,
        "probe/mcqa/wordcomp_ja/letter_merged/ece": 0.2,
        "probe/mcqa/nonsenseqa_ko/dashed/chance_gap": 0.1,
        "probe/mcqa/all/fsi_lo": 0.0,
        "val/ppl": 30.0,
    }
    run = FakeRun()
    out = WandbView("tables").payload(run, metrics, step=7)
    scalars = {k for k, v in out.items() if isinstance(v, float | int)}
    assert scalars == {
        "tokens_seen",
        "probe/level0/all/all/partial",
        "probe/level0/ja/rare/partial",
        "probe/level1/all/term_match",
        "probe/mcqa/wordcomp_en/cloze/acc",
        "probe/mcqa/wordcomp_ja/cloze/acc",
        "probe/mcqa/wordcomp/cloze/acc",  # the mean over the group's tasks
        "probe/mcqa/nonsenseqa/dashed/chance_gap",
        "probe/mcqa/all/fsi_lo",
        "val/ppl",
    }
    assert out["probe/mcqa/wordcomp/cloze/acc"] == pytest.approx(0.6)
    assert run.defined["probe/level0/all/all/partial"] == {"step_metric": "tokens_seen", "summary": "max"}
    assert run.defined["val/ppl"] == {"step_metric": "tokens_seen", "summary": "min"}
    assert run.defined["probe/mcqa/all/fsi_lo"] == {"step_metric": "tokens_seen"}  # a CI bound: no best
    level0 = out["detail/level0"]
    assert level0.columns == ["checkpoint", "step", "tokens_seen", "language", "tier", "k", "metric", "value"]
    rows = {tuple(r[3:7]): r[7] for r in level0.data}
    assert rows[("ja", "rare", "k1", "strict")] == 0.1 and rows[("all", "all", "all", "partial")] == 0.9
    assert all(r[:3] == ["step0000007", 7, 4096] for r in level0.data)
    mcqa = {tuple(r[3:6]) for r in out["detail/mcqa"].data}
    assert ("all", "all", "fsi_lo") in mcqa and ("wordcomp_ja", "letter_merged", "ece") in mcqa
    everything = WandbView("scalars").payload(FakeRun(), metrics, step=7)
    assert set(everything) == set(metrics)  # the old behaviour: every key a scalar, no tables


@pytest.mark.slow
def test_offline_run_has_headline_scalars_detail_tables_and_the_tokens_seen_axis(
    micro, tmp_path, monkeypatch
):
    from bytecanary.train.cli import main

    config = tmp_path / "probes.yaml"
    config.write_text(yaml.safe_dump({"probes": PROBES, "run": {"wandb": True, "checkpoint_every": 4}}))
    for variable in ("WANDB_API_KEY", "WANDB_MODE"):  # offline by the run's own setting
        monkeypatch.delenv(variable, raising=False)
    args = ["--config", str(config), "--run.name", "w", "--trainer.max_steps", "8"]
    assert main(["--config", str(micro), *args]) == 0
    run_dir = tmp_path / "runs" / "w"
    (wandb_dir,) = (run_dir / "wandb").glob("offline-run-*")
    history = [h["item"] for h in wandb_records(wandb_dir, "history")]
    tables = {k.removesuffix("._type") for h in history for k in h if k.endswith("._type")}
    scalars = {
        k
        for h in history
        for k, v in h.items()
        if not k.startswith("_") and isinstance(v, int | float) and k.split(".")[0] not in tables
    }
    records = [r for r in read_jsonl(run_dir / "probes.jsonl") if r["status"] == "ok"]
    probe_keys = {k for r in records for k in r["metrics"]}

    # 1. few scalars: at most the declared headline count, far fewer than the probes write
    assert len(scalars) <= HEADLINE_LIMIT < len(probe_keys)
    # 2. every headline key the probes wrote is a scalar, and the derived group means too
    assert {k for k in probe_keys if headline_by_hand(k)} <= scalars
    last = max(records, key=lambda r: (r["step"], r["probe"] == "mcqa"))["metrics"]
    mean_key = "probe/mcqa/wordcomp/cloze/acc"
    wordcomp = [
        v for k, v in last.items() if k.startswith("probe/mcqa/wordcomp_") and k.endswith("cloze/acc")
    ]
    logged = [h[mean_key] for h in history if mean_key in h]
    assert len(wordcomp) == 4 and logged[-1] == pytest.approx(np.mean(wordcomp))
    print(f"W&B scalar keys: {len(scalars)}; keys in probes.jsonl: {len(probe_keys)}")
    assert {
        "val/ppl",
        "probe/level0/all/all/strict",
        "probe/mcqa/all/fsi",
        "probe/mcqa/all/psi_hi",
    } <= scalars
    # 3. the detail tables hold every probe key of every checkpoint as a row
    assert tables == {"detail/level0", "detail/level1", "detail/mcqa"}
    for probe in ("level0", "level1", "mcqa"):
        files = (wandb_dir / "files" / "media" / "table" / "detail").glob(f"{probe}_*.table.json")
        rows = [row for f in files for row in json.loads(Path(f).read_text())["data"]]
        written = sorted((r["step"], k) for r in records if r["probe"] == probe for k in r["metrics"])
        assert sorted((row[1], key_of(probe, row[3:-1])) for row in rows) == written
    # 4. every scalar is bound to tokens_seen, by its own name or a prefix glob
    defined = wandb_records(wandb_dir, "metric")
    by_name = {m["name"]: m for m in defined if "name" in m}
    globs = {m["glob_name"].removesuffix("*"): m for m in defined if "glob_name" in m}
    for key in scalars - AXES:
        bound = by_name.get(key) or next((m for g, m in globs.items() if key.startswith(g)), {})
        assert bound.get("step_metric") == "tokens_seen", key
    assert by_name["probe/level0/all/all/partial"]["summary"] == {"max": True}
    assert by_name["val/ppl"]["summary"] == {"min": True}
