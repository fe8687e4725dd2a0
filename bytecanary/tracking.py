"""W&B conventions shared by training and the probes: offline unless it can be online,
``tokens_seen`` as every chart's x-axis, only headline keys as scalars (the rest in one
``detail/<probe>`` table each) so the workspace stays readable (docs/report-and-wandb.md).
"""

from __future__ import annotations

import netrc
import os
import secrets
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from bytecanary import display, keys, records
from bytecanary.config import read_yaml
from bytecanary.display import display_of
from bytecanary.errors import BytecanaryError
from bytecanary.io import read_json, warn, write_json
from bytecanary.records import Identity, Record

DEFAULT_PROJECT = "bytecanary"  # the W&B project of training, probe and report runs
DETAIL = "detail/"  # + probe: the detail tables
METRIC_PREFIXES = (keys.train("*"), keys.val("*"), keys.probe_root("*"), keys.perf("*"), f"{DETAIL}*")
Detail = Literal["tables", "scalars"]
WANDB_ID = "wandb_id"  # in a run folder: its training run's W&B id (``train.loggers.make_wandb_logger``)
SIDECAR = "-probes"  # ends the name and the id of a sidecar's W&B run
MERGED = "merged_records.json"  # in RUN/wandb: the records a report logged into the training run

# ---- the headline: the scalars a W&B workspace charts ------------------------------------------
# Everything else a probe measures goes to W&B as rows of one detail table per probe (and stays
# in probes.jsonl); a workspace of thousands of auto-panels hides the few curves that carry the
# papers' findings.

HEADLINE_LIMIT = 150  # scalar keys per run, at most (the axes and ``perf/*`` included)


def is_headline(key: str) -> bool:
    """Whether ``key`` is charted as a scalar (see ``headline_view`` for the derived ones)."""
    if keys.root_of(key) in ("train", "perf") or key in (keys.TOKENS_SEEN, keys.STEP):
        return True
    if keys.root_of(key) == "val":
        return keys.metric_of(key) in ("ppl", "loss")
    k = keys.read(key)
    return k is not None and display_of(k.probe).headline(k)


def headline_view(metrics: dict[str, float]) -> dict[str, float]:
    """The headline scalars of one logged dict: its headline keys, plus those the probes
    derive for display (``bytecanary.display``; MCQA's means over each task group)."""
    probes = sorted({p for k in metrics if (p := keys.probe_of(k)) is not None})
    derived = {k: v for p in probes if (d := display_of(p).derived) for k, v in d(metrics).items()}
    return {k: v for k, v in {**metrics, **derived}.items() if is_headline(k)}


# ---- the detail grid: every other key as a table row ------------------------------------------


def detail_columns(probe: str) -> tuple[str, ...]:
    """The fields a probe's keys carry between ``probe/<name>/`` and the metric."""
    return display_of(probe).fields


def detail_fields(key: str) -> tuple[str, ...]:
    """(fields..., metric) of a probe key, ``all`` where a key aggregates over a field:
    ``probe/toy/ja/k1/logprob`` -> ("ja", "k1", "logprob")."""
    k = keys.read(key)
    assert k is not None, key
    shown = display_of(k.probe)
    if not shown.own:
        return ("/".join(k.fields), k.metric)
    return (*k.fields, *(["all"] * (len(shown.fields) - len(k.fields))), k.metric)


# W&B's cloud API under its own name and under CoreWeave's, the default server of wandb >= 0.31:
# ``wandb login`` keeps the key under the name of the version that wrote it, and W&B reads both
WANDB_CLOUD = ("api.wandb.ai", "api.forge.coreweave.com")


def wandb_mode() -> str:
    """``WANDB_MODE`` if set; else online only with credentials (``WANDB_API_KEY``, or the
    netrc entry ``wandb login`` keeps) and a reachable server (``WANDB_BASE_URL``)."""
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    url = os.environ.get("WANDB_BASE_URL") or f"https://{WANDB_CLOUD[0]}"
    server = urlsplit(url)
    try:
        port = server.port or (80 if server.scheme == "http" else 443)
    except ValueError:  # a port that is not a number
        port = None
    if not server.hostname or port is None:
        warn(f"WANDB_BASE_URL={url}: not a server address; W&B stays offline")
        return "offline"
    if not (os.environ.get("WANDB_API_KEY") or _netrc_has_key(server.netloc, server.hostname)):
        return "offline"
    try:
        socket.create_connection((server.hostname, port), timeout=2).close()
    except OSError:
        return "offline"
    return "online"


def _netrc_has_key(netloc: str, hostname: str) -> bool:
    """Whether the netrc file W&B reads (``NETRC``, else ``~/.netrc``) holds a key for the
    server, by its address with or without the port (W&B wrote both over its versions). A file
    that does not parse is one warning (never its text: it holds keys) and no key."""
    path = Path(os.environ.get("NETRC") or "~/.netrc").expanduser()
    try:
        entries = netrc.netrc(path)
    except FileNotFoundError:
        return False
    except (netrc.NetrcParseError, OSError, UnicodeDecodeError) as err:
        line = getattr(err, "lineno", None)
        warn(f"{path}{f' (line {line})' if line else ''}: not a netrc file W&B can read; W&B stays offline")
        return False
    machines = {netloc, hostname, *(WANDB_CLOUD if hostname in WANDB_CLOUD else ())}
    return any((entry := entries.authenticators(m)) is not None and bool(entry[2]) for m in machines)


def define_axis(run: Any, axis: str = keys.TOKENS_SEEN) -> None:
    """Every metric family plotted against ``tokens_seen`` (``axis``: ``step`` for a series
    whose tokens_seen is unknown, which would otherwise chart nothing)."""
    run.define_metric(axis)
    for prefix in METRIC_PREFIXES:
        run.define_metric(prefix, step_metric=axis)


class WandbView:
    """What a logged metric dict becomes in one W&B run: headline scalars, each bound to
    ``axis`` (``tokens_seen``) and summarised by its best value (max or min, from ``keys``),
    and rows of the probes' detail tables. ``detail="scalars"`` logs every key as a scalar."""

    def __init__(self, detail: Detail = "tables", axis: str = keys.TOKENS_SEEN) -> None:
        if detail not in ("tables", "scalars"):
            raise ValueError(f"wandb_detail must be 'tables' or 'scalars', got {detail!r}")
        self.detail, self.axis = detail, axis
        self._defined: set[str] = set()
        self._tables: dict[str, Any] = {}

    def payload(
        self, run: Any, metrics: dict[str, Any], step: int | None = None, checkpoint: str | None = None
    ) -> dict[str, Any]:
        """The dict to ``run.log`` for ``metrics`` (which carry ``tokens_seen``, maybe ``step``)."""
        axes = {k: metrics[k] for k in (keys.TOKENS_SEEN, keys.STEP) if metrics.get(k) is not None}
        values = {k: v for k, v in metrics.items() if k not in axes}
        scalars = values if self.detail == "scalars" else headline_view(values)
        self._define(run, scalars)
        out: dict[str, Any] = {**scalars, **axes}
        if self.detail == "tables":
            out.update(self._detail(values, checkpoint, {keys.STEP: step, **axes}))
        return out

    def _define(self, run: Any, scalars: dict[str, Any]) -> None:
        for key in scalars.keys() - self._defined:
            best = display.higher_is_better(key)
            summary = {True: "max", False: "min"}.get(best)  # type: ignore[call-overload]
            run.define_metric(key, step_metric=self.axis, **({"summary": summary} if summary else {}))
            self._defined.add(key)

    def _detail(self, values: dict[str, Any], checkpoint: str | None, axes: dict[str, Any]) -> dict[str, Any]:
        """One row per probe key, appended to that probe's growing table."""
        import wandb

        touched = {}
        head = [
            checkpoint or f"step{axes.get(keys.STEP, 0):07d}",
            axes.get(keys.STEP),
            axes.get(keys.TOKENS_SEEN),
        ]
        for key, value in values.items():
            probe = keys.probe_of(key)
            if probe is None:
                continue
            if probe not in self._tables:
                columns = [
                    "checkpoint",
                    keys.STEP,
                    keys.TOKENS_SEEN,
                    *detail_columns(probe),
                    "metric",
                    "value",
                ]
                self._tables[probe] = wandb.Table(columns=columns, log_mode="INCREMENTAL")
            self._tables[probe].add_data(*head, *detail_fields(key), value)
            touched[f"{DETAIL}{probe}"] = self._tables[probe]
        return touched


class ViewedRun:
    """A W&B run whose ``log`` goes through a ``WandbView`` (``bytecanary probe``'s run, a
    report's merge); everything else (``summary``, ``dir``, ...) is the run's own. Its first
    row sets the axis: ``tokens_seen`` where it has one, else ``step`` (a hub series)."""

    def __init__(self, run: Any, detail: Detail = "tables") -> None:
        self.run, self.view = run, WandbView(detail)
        self.axis: str | None = None

    def log(self, metrics: dict[str, Any], checkpoint: str | None = None) -> None:
        if self.axis is None:
            self.axis = keys.TOKENS_SEEN if metrics.get(keys.TOKENS_SEEN) is not None else keys.STEP
            self.view.axis = self.axis
            define_axis(self.run, self.axis)
        self.run.log(self.view.payload(self.run, metrics, checkpoint=checkpoint))

    def log_record(self, record: Record) -> None:
        """A record's metrics, with its ``tokens_seen`` and ``step`` where known."""
        axes = {keys.TOKENS_SEEN: record.tokens_seen, keys.STEP: record.step}
        self.log({**record.metrics, **{k: v for k, v in axes.items() if v is not None}}, record.checkpoint)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.run, name)


class LaterRun:
    """A run that ``start()`` begins at its first use (``log``, ``summary``, ...): a sidecar may start
    before its training wrote the ``config.yaml`` whose project and group its run joins.
    ``started``: whether it was used.
    """

    def __init__(self, start: Any) -> None:
        self._start, self._run = start, None

    @property
    def started(self) -> bool:
        return self._run is not None

    def __getattr__(self, name: str) -> Any:
        if self._run is None:
            self._run = self._start()
        return getattr(self._run, name)


def is_offline(run: Any) -> bool:
    """Offline in either spelling: Lightning's WandbLogger(offline=True) sets WANDB_MODE=dryrun,
    which W&B also reads as offline."""
    return run.settings.mode in ("offline", "dryrun")


_gathered: ContextVar[list[Path] | None] = ContextVar("gathered_offline_runs", default=None)


@contextmanager
def one_sync_command() -> Iterator[list[Path]]:
    """Inside it, ``offline_sync`` gives no command but keeps each offline run's folder in the
    yielded list: the demo trains and reports in one process and prints one command for both
    at the end (a newcomer who ran only the first of two would miss the figures)."""
    folders: list[Path] = []
    token = _gathered.set(folders)
    try:
        yield folders
    finally:
        _gathered.reset(token)


def offline_sync(offline_dir: str | Path | None, everything: str | Path | None = None) -> str | None:
    """The ``wandb sync`` command that uploads the offline run in ``offline_dir``, or
    ``everything`` (a ``wandb/`` folder: W&B syncs each run in it that it has not synced yet);
    None for an online run, and inside ``one_sync_command``."""
    if offline_dir is None:
        return None
    gathered = _gathered.get()
    if gathered is not None:
        gathered.append(Path(offline_dir))
        return None
    return f"wandb sync {everything or offline_dir}"


def finish_wandb(everything: str | Path | None = None) -> str | None:
    """Finish the current run and flush it to disk (Lightning never calls finish);
    return the ``wandb sync`` command for an offline run (see ``offline_sync``: ``everything``,
    a run's ``wandb/`` folder, to upload it with the folder's other runs)."""
    import wandb

    run = wandb.run
    offline_dir = None
    if run is not None:
        offline_dir = run.dir.removesuffix("/files") if is_offline(run) else None
        wandb.finish()
    wandb.teardown()
    return offline_sync(offline_dir, everything)


# ---- a training run's W&B run, from its folder: what a sidecar joins and a report resumes ------


@dataclass(frozen=True)
class RunWandb:
    """Where the W&B run of the training run in ``folder`` is, as its logger set it up
    (``train.loggers.make_wandb_logger``): project, group, name, detail and the id in ``RUN/wandb_id``
    (None: training logged no W&B run, or has not started).
    """

    folder: Path
    project: str
    name: str
    group: str
    detail: Detail
    run_id: str | None

    @classmethod
    def of(cls, folder: str | Path) -> RunWandb:
        """Read from ``folder``'s ``config.yaml`` (absent: the folder's name and the defaults)."""
        folder = Path(folder)
        config = read_yaml(folder / "config.yaml") if (folder / "config.yaml").is_file() else {}
        run = (config.get("run") if isinstance(config, dict) else None) or {}
        name = str(run.get("name") or folder.name)
        id_file = folder / WANDB_ID
        run_id = id_file.read_text(encoding="utf-8").strip() if id_file.is_file() else ""
        return cls(
            folder=folder,
            project=str(run.get("wandb_project") or DEFAULT_PROJECT),
            name=name,
            group=str(run.get("experiment") or name),
            detail=run.get("wandb_detail") or "tables",
            run_id=run_id or None,
        )

    def sidecar(self) -> dict[str, Any]:
        """``wandb.init`` arguments of a ``bytecanary probe`` run beside this training run (its project and
        group, ``<run>-probes``, in ``RUN/wandb``); the id is new per launch so two sidecars never share a
        run, and ends in ``SIDECAR`` so a report never takes it for the training run's.
        """
        return {
            "project": self.project,
            "group": self.group,
            "name": f"{self.name}{SIDECAR}",
            "id": f"{secrets.token_hex(4)}{SIDECAR}",
            "job_type": "probe",
            "dir": str(self.folder),
        }


def records_to_merge(folder: str | Path, run_id: str) -> tuple[list[Record], list[Identity]]:
    """The rows of ``RUN/probes.jsonl`` that ``bytecanary report`` logs into training run ``run_id`` (those
    its history lacks, merged as the report merges them, in ``tokens_seen`` order), and the identities
    to ``mark_merged`` once logged, so each record reaches W&B once (docs/report-and-wandb.md).
    """
    folder = Path(folder)
    ok = [r for r in records.read(folder / "probes.jsonl") if r.ok and r.tokens_seen is not None]
    live = {(r.probe, r.tokens_seen) for r in ok if r.worker is None}
    logged = _merged(folder, run_id)
    new = [r for r in ok if r.worker is not None and r.identity not in logged]
    rows = [r for r in records.merge(new) if (r.probe, r.tokens_seen) not in live]
    return sorted(rows, key=lambda r: (r.tokens_seen, r.step or 0)), [r.identity for r in new]


def log_records(run: Any, rows: list[Record], detail: Detail = "tables") -> None:
    """``rows`` into ``run`` as the training run logs probes: headline scalars and detail
    tables against ``tokens_seen``, with ``step``. No ``step=``: W&B drops a row whose step is
    below the run's current one, and these are older than the run's last row."""
    viewed = ViewedRun(run, detail)
    for record in rows:
        viewed.log_record(record)


def _merged(folder: Path, run_id: str) -> set[Identity]:
    """The identities an earlier report logged into ``run_id`` (a ledger of another id: none)."""
    path = folder / "wandb" / MERGED
    if not path.is_file():
        return set()
    doc = read_json(path, "merged-records ledger")
    logged = doc.get("logged") if isinstance(doc, dict) else None
    if not isinstance(logged, list) or not all(isinstance(i, list) for i in logged):
        raise BytecanaryError(f'{path}: expected {{"run_id": ..., "logged": [...]}}; a report wrote it')
    return {tuple(i) for i in logged} if doc.get("run_id") == run_id else set()


def mark_merged(folder: str | Path, run_id: str, identities: list[Identity]) -> None:
    """Add ``identities`` to the ledger of records logged into ``run_id`` (written whole)."""
    if not identities:
        return
    folder = Path(folder)
    logged = _merged(folder, run_id) | set(identities)
    (folder / "wandb").mkdir(parents=True, exist_ok=True)
    write_json(folder / "wandb" / MERGED, {"run_id": run_id, "logged": sorted(map(list, logged), key=str)})
