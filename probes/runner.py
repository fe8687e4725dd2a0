"""``bytecanary probe``: attach the probes to existing checkpoints (files, folders, run folders,
hub revisions) through the same ``Pipeline`` as training's callback, so records match; done
pairs are skipped and several workers may share one ``--out`` (docs/utf8-probes.md).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from bytecanary import records
from bytecanary.checkpoints import finished_step, read_heartbeat, reported, run_folder
from bytecanary.errors import BytecanaryError
from bytecanary.io import check_output, warn_once
from bytecanary.probe_options import ProbeOptions
from bytecanary.probes.claims import Claims, clock
from bytecanary.probes.dist import default_worker, is_lead, worker_device
from bytecanary.probes.liveness import NOTE_EVERY, RESTART_GRACE, Rate, stopped, waiting_line
from bytecanary.probes.numerics import check_device, probe_dtype
from bytecanary.probes.pipeline import Pipeline
from bytecanary.probes.registry import probe_class
from bytecanary.probes.specs import build_probes, probes_where
from bytecanary.probes.targets import (
    Loader,
    Target,
    appeared,
    data_dir_of,
    in_folder,
    resolve,
    watch,
    watch_target,
)
from bytecanary.records import Record

# seconds between looks at the pairs other workers hold: a launch ends soon after its last pair
CLAIM_POLL = 0.2


def _accepts(name: str, source: str | None) -> set[str]:
    """The parameters probe ``name`` takes; an unknown name is an error of ``source``'s list."""
    try:
        config = probe_class(name).Config
    except BytecanaryError as err:
        raise BytecanaryError(f"{probes_where(source)}: {err}") from None
    return {f.name for f in dataclasses.fields(config)} if config is not None else set()


def with_cli_params(
    specs: list[dict[str, Any]], trial: bool, eval_sets: dict[str, str], source: str | None = None
) -> list[dict[str, Any]]:
    """``specs`` with the command line's ``--trial`` and eval-set files, where a probe takes
    them (the spec's own values win); an eval-set file for a probe that is not run, or that
    reads none, is an error."""
    names = [s["name"] for s in specs]
    for name, path in eval_sets.items():
        if name not in names:
            raise BytecanaryError(f"probe: --eval_sets.{name}={path}: no probe {name!r} runs here")
        if "eval_sets" not in _accepts(name, source):
            raise BytecanaryError(f"probe: --eval_sets.{name}={path}: probe {name!r} reads no eval-set files")
    out = []
    for spec in specs:
        params: dict[str, Any] = {"trial": trial}
        if spec["name"] in eval_sets:
            params["eval_sets"] = [eval_sets[spec["name"]]]
        accepted = _accepts(spec["name"], source)
        out.append({**{k: v for k, v in params.items() if k in accepted}, **spec})
    return out


def probe_targets(
    pipeline: Pipeline, loader: Loader, targets: list[Target], retry: bool = False
) -> list[Record]:
    """Probe every (target, probe) pair not yet in the records; returns the new records. A
    checkpoint of a series that does not load gets failed records and the series goes on;
    with ``retry`` (watching) it is skipped with a warning instead; named alone, it raises."""
    todo = pipeline.todo(targets)
    if not todo:
        done = f"every checkpoint and probe is already in {pipeline.out}" if pipeline.probes else "no probes"
        print(f"nothing to do: {done}")
        return []

    # watching, a file may still be in flight; in a series, one bad file must not stop the rest;
    # a checkpoint named alone is a bad input, one error line
    unloadable = "skip" if retry else "fail" if len(targets) > 1 else "raise"
    made: list[Record] = []
    with tqdm(total=sum(len(indices) for _, indices in todo), desc="probing", unit="probe") as bar:
        for target, indices in todo:
            bar.set_postfix_str(f"{Path(target.path).name} ({len(indices)} probes)")
            made += pipeline.probe(loader, target, indices, unloadable)
            bar.update(len(indices))
    return made


def _left(pipeline: Pipeline, targets: list[Target]) -> list[tuple[Target, list[int]]]:
    """The pairs of ``targets`` not done and not tried by this process."""
    left = [
        (target, [i for i in indices if (target.key, i) not in pipeline.attempted])
        for target, indices in pipeline.todo(targets)
    ]
    return [(target, indices) for target, indices in left if indices]


def complete(pipeline: Pipeline, loader: Loader, targets: list[Target], wait: float) -> list[Record]:
    """After this worker's pass over ``targets``: wait for the pairs other workers hold, taking over
    those whose claims ran out (a killed worker's), until every pair is done or was tried here;
    returns the records appended meanwhile, saying whom it waits for once per lease.
    """
    made: list[Record] = []
    claims = pipeline.claims
    notes = Rate(claims.lease if claims is not None else NOTE_EVERY)
    while left := _left(pipeline, targets):
        tried = len(pipeline.attempted)
        for target, indices in left:
            made += pipeline.probe(loader, target, indices, "fail")
        waiting = claims.waiting_for() if claims is not None else None  # this pass's refusals
        if len(pipeline.attempted) == tried:
            if waiting is not None:
                notes.say(waiting, topic="claims")
            time.sleep(wait)
    return made


def follow(
    pipeline: Pipeline, loader: Loader, folder: Path, interval: float, idle_limit: float, wait: float
) -> list[Record]:
    """``--watch``: probe each checkpoint of ``folder`` as it lands, in step order, until the run has
    finished and every checkpoint is probed or tried, or Ctrl-C; a training that stopped without
    finishing ends the watch with one error, so a sidecar job always ends (docs/faults.md).
    """
    began = time.time()
    appeared(folder, idle_limit, interval)
    print(
        f"watching {folder} for new checkpoints (until its run finishes or its training stops, or Ctrl-C)",
        flush=True,
    )
    since, made = time.time(), []
    until: float | None = None  # when a marker found at the start counts (None: none found)
    seen_unfinished = False
    notes, once = Rate(NOTE_EVERY), warn_once()
    try:
        for fresh in watch(folder, interval):
            if fresh:
                made += probe_targets(pipeline, loader, fresh, retry=True)
                continue
            step = finished_step(folder, on_bad=once)
            beat = reported(read_heartbeat, folder, once)
            targets = in_folder(folder)
            if step is not None and any(target.step_hint == step for target in targets):
                if not seen_unfinished and (beat is None or beat.started < began):  # maybe a resume starts
                    until = until or time.time() + min(idle_limit, RESTART_GRACE)
                    if time.time() < until:
                        notes.say(
                            f"waiting: the run finished at step {step} before this watch began; "
                            f"ending at {clock(until)} unless a resumed training takes it on"
                        )
                        continue
                made += complete(pipeline, loader, targets, wait)
                print(f"the run finished at step {step}: every checkpoint is probed")
                break
            seen_unfinished = seen_unfinished or step is None
            why = stopped(folder, beat, since, idle_limit)
            if why is not None:
                early = (
                    "" if step is None else f" (finished.json names step {step}, whose weights are not there)"
                )
                raise BytecanaryError(f"{folder}: its training stopped without finishing{early}: {why}")
            notes.say(waiting_line(folder, step, beat, targets))
    except KeyboardInterrupt:
        print("stopped watching")
    return made


def _by_others(pipeline: Pipeline, targets: list[Target]) -> list[Record]:
    """The records of ``targets`` that other workers appended to the records file."""
    wanted = {target.key for target in targets}
    mine = pipeline.worker
    return [
        r
        for r in records.read(pipeline.out)
        if r.ok and r.worker not in (None, mine) and r.checkpoint in wanted
    ]


def training_run(paths: list[str], watch_dir: str | None, revisions: list[str] | None) -> Path | None:
    """The training run this launch probes: the one run folder (or its ``checkpoints/``) that
    every PATH (a folder beside a ``config.yaml``) and ``--watch`` (its ``config.yaml`` may not
    be written yet) name; None for anything else (files, HF models, model ids, several runs)."""
    if revisions or not all(Path(p).is_dir() and (run_folder(p) / "config.yaml").is_file() for p in paths):
        return None
    runs = {run_folder(p).resolve(): run_folder(p) for p in [*paths, *([watch_dir] if watch_dir else [])]}
    return next(iter(runs.values())) if len(runs) == 1 else None


def _start_wandb(options: ProbeOptions, out: Path, config: dict[str, Any], training: Path | None) -> Any:
    """The launch's W&B run, started at its first use: beside a training run, its sidecar run
    (``tracking.RunWandb.sidecar``); else one in the options' project and group, beside ``out``.
    """
    from bytecanary.tracking import LaterRun, RunWandb, ViewedRun, wandb_mode

    def start() -> ViewedRun:
        import wandb

        where: dict[str, Any] = {
            "project": options.wandb_project,
            "dir": str(out.parent),
            "job_type": "probe",
        }
        where |= {"group": options.wandb_group} if options.wandb_group else {}
        detail = "tables"
        if training is not None:
            home = RunWandb.of(training)
            where, detail = home.sidecar(), home.detail
            config.update(training_run=str(training), training_run_id=home.run_id)
        Path(where["dir"]).mkdir(parents=True, exist_ok=True)
        wandb_run = wandb.init(**where, mode=wandb_mode(), config=config, settings={"silent": True})
        return ViewedRun(wandb_run, detail)

    return LaterRun(start)


def _first_data_dir(targets: list[Target]) -> Path | None:
    """The data folder of the first checkpoint whose metadata reads (a corrupt one in a series
    is recorded as failed later); when none reads, the first one's error."""
    first = None
    for target in targets:
        try:
            return data_dir_of(target)
        except BytecanaryError as err:
            first = first or err
    raise first


def _to_wandb(wandb_run: Any) -> Callable[[Record], None] | None:
    """The pipeline's ``publish``: each successful record's metrics to the W&B run."""
    if wandb_run is None:
        return None

    def publish(record: Record) -> None:
        if record.ok:
            wandb_run.log_record(record)

    return publish


def _launch_wandb(
    options: ProbeOptions,
    paths: list[str],
    probes: list[dict[str, Any]],
    dtype: str,
    out_path: Path,
    training: Path | None,
) -> Any:
    """The launch's one W&B run, the lead worker's (None without W&B), with a note when its
    records go where ``bytecanary report`` of the training run will not read them."""
    if not (options.project and is_lead()):
        return None
    config = {"paths": paths, "probes": probes, "trial": options.trial, "dtype": dtype}
    config |= {"tokens_per_step": options.tokens_per_step} if options.tokens_per_step else {}
    wandb_run = _start_wandb(options, out_path, config, training)
    home = training / "probes.jsonl" if training is not None else out_path  # what the report reads
    if out_path.resolve() != home.resolve():
        print(f"note: records go to {out_path}, not {home}: bytecanary report adds none to the training run")
    return wandb_run


def run(
    paths: list[str],
    probes: list[dict[str, Any]],
    options: ProbeOptions | None = None,
    finish: Callable[[Path, Any], None] | None = None,
) -> int:
    """The ``bytecanary probe`` command: probe ``paths`` (then ``options.watch``) into ``options.out``;
    1 when a record it appended failed, else 0. ``finish(records path, W&B run)`` runs before that
    run closes (e.g. cross-checkpoint statistics); the caller prints the summary table.
    """
    options = options or ProbeOptions()
    options.check()
    check_device(options.device)
    out_path = records.check_file(check_output(options.out))  # now, not after hours of probing
    watched = watch_target(options.watch) if options.watch else None
    device = worker_device(options.device, torch.cuda.device_count())
    dtype = probe_dtype(options.dtype, device)
    specs = with_cli_params(probes, options.trial, dict(options.eval_sets), options.config)
    built = build_probes(specs, options.config)  # a bad spec is one line before any path is read
    resolved = resolve(paths, options.revision) if paths else []
    targets = [dataclasses.replace(t, tokens_per_step=options.tokens_per_step) for t in resolved]
    claims = Claims(out_path, options.workers.name or default_worker(), options.lease)
    pipeline = Pipeline(built, out_path, source=options.config, claims=claims, dtype=dtype)
    if targets:  # bad inputs fail before W&B and any model (a watched folder's are checked when known)
        pipeline.check(_first_data_dir(targets))
    training = training_run(paths, options.watch, options.revision)
    wandb_run = _launch_wandb(options, paths, probes, str(dtype), out_path, training)
    publish = _to_wandb(wandb_run)
    pipeline.publish = publish or pipeline.publish
    try:
        loader = Loader(device, dtype)
        wait = min(CLAIM_POLL, options.lease / 4)
        made = probe_targets(pipeline, loader, targets) if targets else []
        made += complete(pipeline, loader, targets, wait)
        if publish is not None:  # the lead worker's W&B run gets the other workers' records too
            for record in _by_others(pipeline, targets):
                publish(record)
        if watched is not None:
            made += follow(
                pipeline, loader, watched, options.series.interval, options.series.idle_limit, wait
            )
        if wandb_run is not None and finish is not None:
            finish(out_path, wandb_run)
    finally:
        if wandb_run is not None and wandb_run.started:
            from bytecanary.tracking import finish_wandb

            sync = finish_wandb(training / "wandb" if training is not None else None)
            if sync:
                others = " with the run's others (training, reports)" if training is not None else ""
                print(f"W&B offline run saved; upload it{others}: {sync}")
    return 1 if any(not r.ok for r in made) else 0
