"""W&B conventions shared by training and the probes: offline unless it can be online,
``tokens_seen`` as every chart's x-axis, a workspace a researcher can read, and a clean
finish that flushes the run.

A probe writes hundreds of keys per checkpoint (language x tier x prefix length x metric).
W&B draws one auto-panel per scalar key, so only the headline keys (``keys.is_headline``)
are logged as scalars; the rest become rows of one growing ``wandb.Table`` per probe,
``detail/<probe>``, which W&B can filter and plot. ``probes.jsonl`` keeps every number.
"""

from __future__ import annotations

import os
import socket
from typing import Any, Literal

from bytecanary import keys

DEFAULT_PROJECT = "bytecanary"  # the W&B project of training, probe and report runs
DETAIL = "detail/"  # + probe: the detail tables
METRIC_PREFIXES = ("train/*", "val/*", "probe/*", "perf/*", f"{DETAIL}*")
Detail = Literal["tables", "scalars"]


def wandb_mode() -> str:
    """``WANDB_MODE`` if set; else online only with an API key and a reachable server."""
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    if not os.environ.get("WANDB_API_KEY"):
        return "offline"
    try:
        socket.create_connection(("api.wandb.ai", 443), timeout=2).close()
    except OSError:
        return "offline"
    return "online"


def define_tokens_seen_axis(run: Any) -> None:
    """Every metric family plotted against ``tokens_seen``."""
    run.define_metric(keys.TOKENS_SEEN)
    for prefix in METRIC_PREFIXES:
        run.define_metric(prefix, step_metric=keys.TOKENS_SEEN)


class WandbView:
    """What a logged metric dict becomes in one W&B run: headline scalars, each bound to
    ``tokens_seen`` and summarised by its best value (max or min, from ``keys``), and rows
    of the probes' detail tables. ``detail="scalars"`` logs every key as a scalar instead."""

    def __init__(self, detail: Detail = "tables") -> None:
        if detail not in ("tables", "scalars"):
            raise ValueError(f"wandb_detail must be 'tables' or 'scalars', got {detail!r}")
        self.detail = detail
        self._defined: set[str] = set()
        self._tables: dict[str, Any] = {}

    def payload(
        self, run: Any, metrics: dict[str, Any], step: int | None = None, checkpoint: str | None = None
    ) -> dict[str, Any]:
        """The dict to ``run.log`` for ``metrics`` (which carry ``tokens_seen``, maybe ``step``)."""
        axes = {k: metrics[k] for k in (keys.TOKENS_SEEN, keys.STEP) if metrics.get(k) is not None}
        values = {k: v for k, v in metrics.items() if k not in axes}
        scalars = values if self.detail == "scalars" else keys.headline_view(values)
        self._define(run, scalars)
        out: dict[str, Any] = {**scalars, **axes}
        if self.detail == "tables":
            out.update(self._detail(values, checkpoint, {keys.STEP: step, **axes}))
        return out

    def _define(self, run: Any, scalars: dict[str, Any]) -> None:
        for key in scalars.keys() - self._defined:
            best = keys.higher_is_better(key)
            summary = {True: "max", False: "min"}.get(best)  # type: ignore[call-overload]
            run.define_metric(key, step_metric=keys.TOKENS_SEEN, **({"summary": summary} if summary else {}))
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
                    "step",
                    "tokens_seen",
                    *keys.detail_columns(probe),
                    "metric",
                    "value",
                ]
                self._tables[probe] = wandb.Table(columns=columns, log_mode="INCREMENTAL")
            self._tables[probe].add_data(*head, *keys.detail_fields(key), value)
            touched[f"{DETAIL}{probe}"] = self._tables[probe]
        return touched


class ViewedRun:
    """A W&B run whose ``log`` goes through a ``WandbView`` (``bytecanary probe``'s run);
    everything else (``summary``, ``dir``, ...) is the run's own."""

    def __init__(self, run: Any, detail: Detail = "tables") -> None:
        self.run, self.view = run, WandbView(detail)

    def log(self, metrics: dict[str, Any], checkpoint: str | None = None) -> None:
        self.run.log(self.view.payload(self.run, metrics, checkpoint=checkpoint))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.run, name)


def is_offline(run: Any) -> bool:
    """Lightning's WandbLogger(offline=True) sets WANDB_MODE=dryrun, W&B's old name for offline."""
    return run.settings.mode in ("offline", "dryrun")


def finish_wandb() -> str | None:
    """Finish the current run and flush it to disk (Lightning never calls finish);
    return the ``wandb sync`` command for an offline run."""
    import wandb

    run = wandb.run
    offline_dir = None
    if run is not None:
        offline_dir = run.dir.removesuffix("/files") if is_offline(run) else None
        wandb.finish()
    wandb.teardown()
    return f"wandb sync {offline_dir}" if offline_dir else None
