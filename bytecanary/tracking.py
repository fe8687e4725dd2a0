"""W&B conventions shared by training and the probes: offline unless it can be online,
``tokens_seen`` as every chart's x-axis, and a clean finish that flushes the run."""

from __future__ import annotations

import os
import socket
from typing import Any

DEFAULT_PROJECT = "bytecanary"  # the W&B project of training, probe and report runs
METRIC_PREFIXES = ("train/*", "val/*", "probe/*")


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
    run.define_metric("tokens_seen")
    for prefix in METRIC_PREFIXES:
        run.define_metric(prefix, step_metric="tokens_seen")


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
