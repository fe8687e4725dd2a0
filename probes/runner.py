"""``bytecanary probe``: attach the probes to existing checkpoints.

PATH is a Lightning ``.ckpt``, an HF model folder, a folder of checkpoints (probed in step
order), or, with ``--revision``, a model id whose revisions form a series (Pythia's
``step1000``...). Records go to a ``probes.jsonl`` of the training callback's shape, and
(checkpoint, probe) pairs already there are skipped, so a rerun after a crash does only
what is missing. ``--watch DIR`` follows a running training and probes each new
checkpoint until interrupted.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from bytecanary.analysis import mcqa_series
from bytecanary.checkpoints import checkpoint_meta, gpt2_from_checkpoint, load_checkpoint, tokenizer_dir
from bytecanary.config import read_yaml
from bytecanary.data.evalsets import TIERS
from bytecanary.errors import BytecanaryError
from probes.records import append_record, done, make_record, read_records
from probes.registry import get_probe

_STEP = re.compile(r"step[_-]?(\d+)")


@dataclass(frozen=True)
class Target:
    """One checkpoint to probe; ``key`` is its ``checkpoint`` field in the records."""

    key: str
    path: str
    kind: str  # "lightning" or "hf"
    revision: str | None = None

    @property
    def step_hint(self) -> int:
        m = _STEP.search(self.revision or Path(self.path).name)
        return int(m.group(1)) if m else -1


def _ckpts_in(folder: Path) -> list[Target]:
    files = sorted(folder.glob("*.ckpt")) or sorted((folder / "checkpoints").glob("*.ckpt"))
    steps = [f for f in files if f.name != "last.ckpt"]  # last.ckpt repeats the newest step
    chosen = steps or files
    return sorted((Target(str(f.resolve()), str(f), "lightning") for f in chosen), key=lambda t: t.step_hint)


def resolve(paths: list[str], revisions: list[str] | None = None) -> list[Target]:
    """Every checkpoint the PATH arguments name, in step order within each PATH."""
    targets: list[Target] = []
    for raw in paths:
        path = Path(raw)
        if revisions:
            targets += [Target(f"{raw}@{rev}", raw, "hf", rev) for rev in revisions]
        elif path.is_file() and path.suffix == ".ckpt":
            targets.append(Target(str(path.resolve()), raw, "lightning"))
        elif path.is_dir() and (path / "config.json").is_file():
            targets.append(Target(str(path.resolve()), raw, "hf"))
        elif path.is_dir() and _ckpts_in(path):
            targets += _ckpts_in(path)
        else:
            raise BytecanaryError(
                f"{raw}: not a checkpoint (.ckpt), an HF model folder, a folder of checkpoints, "
                "or (with --revision) a model id"
            )
    return targets


@dataclass
class Loaded:
    model: Any
    tokenizer: Any
    data_dir: Path | None
    step: int | None
    tokens_seen: int | None


def load(target: Target, device: str) -> Loaded:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if target.kind == "lightning":
        ckpt = load_checkpoint(target.path)
        meta = checkpoint_meta(ckpt, target.path)
        tok_dir = tokenizer_dir(meta, target.path)
        model = gpt2_from_checkpoint(ckpt, target.path)
        tokenizer = AutoTokenizer.from_pretrained(str(tok_dir))
        return Loaded(model.to(device), tokenizer, tok_dir.parent, meta.get("step"), meta.get("tokens_seen"))
    try:
        model = AutoModelForCausalLM.from_pretrained(
            target.path, revision=target.revision, trust_remote_code=False
        )
        tokenizer = AutoTokenizer.from_pretrained(
            target.path, revision=target.revision, trust_remote_code=False
        )
    except (OSError, ValueError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise BytecanaryError(f"{target.key}: cannot load the model: {first}") from None
    info_path = Path(target.path) / "bytecanary.json"
    info = json.loads(info_path.read_text()) if info_path.is_file() else {}
    step = info.get("step", target.step_hint if target.step_hint >= 0 else None)
    data_dir = Path(info["data_dir"]) if info.get("data_dir") else None
    return Loaded(model.eval().to(device), tokenizer, data_dir, step, info.get("tokens_seen"))


def _probe_params(name: str, trial: bool, eval_sets: dict[str, str | None]) -> dict[str, Any]:
    params: dict[str, Any] = {"trial": trial}
    if eval_sets.get(name):
        params["eval_sets"] = [eval_sets[name]]
    return params


def probe_specs(config: str | None, names: list[str] | None) -> list[dict[str, Any]]:
    """``{name, **params}`` per probe: the ``probes:`` list of a YAML config (a training
    config's, so a checkpoint is probed as its training probed it), kept to ``names`` when
    given; without a config, ``names`` with default parameters."""
    if config is None:
        return [{"name": n} for n in names or ["level0", "level1"]]
    doc = read_yaml(config)
    specs = doc.get("probes") if isinstance(doc, dict) else None
    if not isinstance(specs, list) or not all(isinstance(s, dict) and "name" in s for s in specs):
        raise BytecanaryError(f"{config}: probes: expected a list of {{name: ..., <parameters>}} mappings")
    chosen = [dict(s) for s in specs if names is None or s["name"] in names]
    missing = sorted(set(names or []) - {s["name"] for s in chosen})
    if missing:
        raise BytecanaryError(f"{config}: probes: no entry for {', '.join(missing)}")
    return chosen


def probe_targets(
    targets: list[Target],
    specs: list[dict[str, Any]],
    out: Path,
    trial: bool = False,
    eval_sets: dict[str, str | None] | None = None,
    device: str | None = None,
    wandb_run: Any = None,
) -> list[dict[str, Any]]:
    """Probe every target not yet in ``out``; returns the new records."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    probes = []
    for spec in specs:
        params = {k: v for k, v in spec.items() if k != "name"}  # the config's own values win
        probes.append(
            get_probe(spec["name"], **(_probe_params(spec["name"], trial, eval_sets or {}) | params))
        )
    finished = done(out)
    todo = [(t, p) for t in targets for p in probes if (t.key, p.name) not in finished]
    if not todo:
        print(f"nothing to do: every checkpoint and probe is already in {out}")
        return []
    new = []
    bar = tqdm(total=len(todo), desc="probing", unit="probe")
    for target in dict.fromkeys(t for t, _ in todo):
        loaded = load(target, device)
        for probe in (p for t, p in todo if t == target):
            bar.set_postfix_str(f"{Path(target.path).name} {probe.name}")
            start = time.perf_counter()
            try:
                with torch.no_grad():
                    metrics, error = probe.run(loaded.model, loaded.tokenizer, loaded.data_dir), None
            except BytecanaryError:
                raise  # bad input (eval set, tokenizer): the user must fix it
            except Exception as err:  # a probe bug must not lose the other probes' results
                metrics, error = None, f"{type(err).__name__}: {err}"
            record = make_record(
                target.key,
                loaded.step,
                loaded.tokens_seen,
                probe.name,
                metrics,
                time.perf_counter() - start,
                error,
            )
            append_record(out, record)
            new.append(record)
            if wandb_run is not None and metrics:
                extra = {
                    k: v
                    for k, v in (("tokens_seen", loaded.tokens_seen), ("step", loaded.step))
                    if v is not None
                }
                wandb_run.log({**metrics, **extra})
            bar.update(1)
        del loaded
    bar.close()
    return new


def watch(folder: Path, interval: float) -> Iterator[list[Target]]:
    """Yield the checkpoints that appeared in ``folder`` since the last look, forever."""
    seen: set[str] = set()
    while True:
        fresh = [t for t in (_ckpts_in(folder) if folder.exists() else []) if t.key not in seen]
        fresh = [t for t in fresh if Path(t.path).name != "last.ckpt"]
        seen.update(t.key for t in fresh)
        yield fresh
        time.sleep(interval)


TABLES = {
    "level0": (
        "Level 0 (context-free validity)",
        [
            ("partial", "all/all/partial"),
            ("strict", "all/all/strict"),
            ("gold win", "all/all/gold_win_rate"),
            ("ppl", "all/all/ppl"),
        ],
        "{lang}/all/partial",
    ),
    "level1": (
        "Level 1 (context-guided retrieval)",
        [("term match", "all/term_match"), ("partial", "all/partial"), ("gold win", "all/gold_win_rate")],
        "{lang}/term_match",
    ),
}
# MCQA headline: accuracy averaged over the embedded (word) and NonsenseQA (nonsense) tasks
MCQA_COLUMNS = [
    ("word sep", "wordcomp", "letter_separate/acc"),
    ("word mrg", "wordcomp", "letter_merged/acc"),
    ("word cloze", "wordcomp", "cloze/acc"),
    ("word M&D", "wordcomp", "dashed/acc"),
    ("nons sep", "nonsenseqa", "letter_separate/acc"),
    ("nons M&D", "nonsenseqa", "dashed/acc"),
    ("FSI", "all", "fsi"),
    ("PSI", "all", "psi"),
]


def _mcqa_cells(metrics: dict[str, float]) -> list[float | None]:
    cells = []
    for _, group, suffix in MCQA_COLUMNS:
        if group == "all":
            cells.append(metrics.get(f"probe/mcqa/all/{suffix}"))
            continue
        values = [
            v for k, v in metrics.items() if k.startswith(f"probe/mcqa/{group}_") and k.endswith(suffix)
        ]
        cells.append(sum(values) / len(values) if values else None)
    return cells


def summary(out: Path) -> str:
    """Per probe, one row per checkpoint: step, tokens, headline metrics, then by language;
    for MCQA, the cross-checkpoint statistics under the table."""
    by_probe: dict[str, dict[str, dict[str, Any]]] = {}
    for r in read_records(out):
        if r["status"] == "ok" and (r["probe"] in TABLES or r["probe"] == "mcqa"):
            by_probe.setdefault(r["probe"], {})[r["checkpoint"]] = r
    blocks = []
    for probe, records in by_probe.items():
        if probe == "mcqa":
            title, names = "MCQA (accuracy, mean over tasks)", [n for n, _, _ in MCQA_COLUMNS]
        else:
            title, headline, per_lang = TABLES[probe]
            keys = {k for r in records.values() for k in r["metrics"]}
            langs = sorted({k.split("/")[2] for k in keys} - {"all"})
            cols = [f"probe/{probe}/{key}" for _, key in headline]
            cols += [f"probe/{probe}/{per_lang.format(lang=lang)}" for lang in langs]
            names = [n for n, _ in headline] + langs
        lines = [title, f"{'checkpoint':<28}{'step':>8}{'tokens':>12}" + "".join(f"{n:>11}" for n in names)]
        for key, r in sorted(records.items(), key=lambda kv: (kv[1]["step"] is None, kv[1]["step"] or 0)):
            m = r["metrics"]
            values = _mcqa_cells(m) if probe == "mcqa" else [m.get(k) for k in cols]
            cells = _cells(values)
            tokens = f"{r['tokens_seen']:,}" if r["tokens_seen"] is not None else "-"
            step = r["step"] if r["step"] is not None else "-"
            lines.append(f"{Path(key.split('@')[0]).name[-28:]:<28}{step:>8}{tokens:>12}{cells}")
        if probe == "mcqa" and len(records) > 1:
            lines.append(_mcqa_series_line(list(records.values())))
        if probe == "level0":
            lines += _tier_lines(max(records.values(), key=lambda r: r["step"] or 0))
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _cells(values: list[float | None]) -> str:
    return "".join(f"{v:>11.3f}" if v is not None else f"{'-':>11}" for v in values)


def _tier_lines(record: dict[str, Any]) -> list[str]:
    """V_partial by language and frequency tier at one checkpoint (the last probed)."""
    m = record["metrics"]
    langs = sorted({k.split("/")[2] for k in m} - {"all"})
    lines = [f"{'partial by tier, step ' + str(record['step']):<28}" + "".join(f"{t:>11}" for t in TIERS)]
    lines += [
        f"{lang:<28}" + _cells([m.get(f"probe/level0/{lang}/{t}/partial") for t in TIERS]) for lang in langs
    ]
    return lines


def _mcqa_series_line(records: list[dict[str, Any]]) -> str:
    """Kendall tau of the checkpoints' rankings under the two space strategies, and how
    much of wrapper accuracy parsability explains (Pearson r, fixed-effects beta)."""
    s = mcqa_series(records)
    taus = {k.split("/")[2]: v for k, v in s.items() if k.endswith("kendall_tau_sep_merged")}
    tau = "  ".join(f"{t} {v:+.2f}" for t, v in taus.items() if v == v)
    nan = float("nan")
    beta, se = s.get("probe/mcqa/all/parsability_beta", nan), s.get("probe/mcqa/all/parsability_beta_se", nan)
    r = s.get("probe/mcqa/all/acc_parsable_r", nan)
    return (
        f"across checkpoints: Kendall tau (separate vs merged ranking) {tau or 'n/a'}\n"
        f"accuracy vs parsability over wrapper cells: Pearson r {r:.3f}, beta {beta:.3f} +- {se:.3f}"
    )


def run(
    paths: list[str],
    probes: list[dict[str, Any]],
    out: str = "probes.jsonl",
    trial: bool = False,
    eval_sets: dict[str, str | None] | None = None,
    wandb_project: str | None = "bytecanary",
    watch_dir: str | None = None,
    interval: float = 30.0,
    revisions: list[str] | None = None,
    device: str | None = None,
) -> int:
    """The ``bytecanary probe`` command."""
    out_path = Path(out)
    targets = resolve(paths, revisions) if paths else []
    wandb_run = None
    if wandb_project:
        import wandb

        from bytecanary.tracking import define_tokens_seen_axis, wandb_mode

        out_path.parent.mkdir(parents=True, exist_ok=True)
        wandb_run = wandb.init(
            project=wandb_project,
            dir=str(out_path.parent),
            job_type="probe",
            mode=wandb_mode(),
            config={"paths": paths, "probes": probes, "trial": trial},
            settings={"silent": True},
        )
        define_tokens_seen_axis(wandb_run)
    try:
        probe_targets(targets, probes, out_path, trial, eval_sets, device, wandb_run)
        if watch_dir:
            print(f"watching {watch_dir} for new checkpoints (Ctrl-C to stop)")
            try:
                for fresh in watch(Path(watch_dir), interval):
                    if fresh:
                        probe_targets(fresh, probes, out_path, trial, eval_sets, device, wandb_run)
            except KeyboardInterrupt:
                print("stopped watching")
        if wandb_run is not None:  # cross-checkpoint statistics beside the per-checkpoint curves
            mcqa = [r for r in read_records(out_path) if r["probe"] == "mcqa" and r["status"] == "ok"]
            if len(mcqa) > 1:
                wandb_run.summary.update(mcqa_series(mcqa))
    finally:
        if wandb_run is not None:
            from bytecanary.tracking import finish_wandb

            sync = finish_wandb()
            if sync:
                print(f"W&B offline run saved; upload it with: {sync}")
    print(summary(out_path))
    print(f"records: {out_path}")
    return 0
