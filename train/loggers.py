"""Logging that never depends on W&B: ``metrics.jsonl`` always, W&B offline (no key or network) or
online, every row with ``step`` and ``tokens_seen``, the x-axis of W&B's charts (docs/training.md#logging)."""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import Logger, WandbLogger
from lightning.pytorch.utilities import rank_zero_only

from bytecanary import keys
from bytecanary.io import atomic_path, read_jsonl
from bytecanary.tracking import WANDB_ID, Detail, WandbView, wandb_mode


class JsonlLogger(Logger):
    """Append one JSON object per logged dict to ``metrics.jsonl`` (rank 0)."""

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.path = Path(path)

    @property
    def name(self) -> str:
        return "jsonl"

    @property
    def version(self) -> str:
        return "0"

    @rank_zero_only
    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass  # the resolved config is config.yaml in the run folder

    @rank_zero_only
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        row: dict[str, Any] = {keys.STEP: int(step) if step is not None else None}
        for key, value in metrics.items():
            row[key] = int(value) if key == keys.TOKENS_SEEN else value
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")

    @rank_zero_only
    def truncate_after(self, step: int, train_row: dict[str, Any] | None = None) -> None:
        """Drop rows past ``step`` (and any torn last line): a resumed run logs them again.
        ``train_row``, the resumed checkpoint's own step row, is put back if it is missing."""
        keep = []
        lines = self.path.read_text(encoding="utf-8").splitlines() if self.path.exists() else []
        for line in lines:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if row.get(keys.STEP) is not None and row[keys.STEP] <= step:
                keep.append(line)
        rows = [json.loads(line) for line in keep]
        if (
            train_row
            and train_row[keys.STEP] == step
            and not any(r[keys.STEP] == step and keys.train("loss") in r for r in rows)
        ):
            keep.append(json.dumps(train_row))
        with atomic_path(self.path) as tmp:
            tmp.write_text("".join(f"{line}\n" for line in keep), encoding="utf-8")


class TruncateMetricsOnStart(Callback):
    """Once the checkpoint (if any) is restored, drop metrics.jsonl rows past its step,
    so a resumed run's history has no duplicated steps."""

    def on_train_start(self, trainer, pl_module) -> None:
        step = trainer.global_step
        logged = step > 0 and step % trainer.log_every_n_steps == 0  # Lightning logged this step
        row = getattr(pl_module, "train_row", None) if logged else None
        for logger in trainer.loggers:
            if isinstance(logger, JsonlLogger):
                logger.truncate_after(step, row)


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a ``metrics.jsonl``."""
    return read_jsonl(path)


class HeadlineWandbLogger(WandbLogger):
    """Lightning's W&B logger, logging each dict through a ``WandbView``: headline scalars
    against ``tokens_seen``, the probes' fine grid as detail tables."""

    def __init__(self, *args: Any, detail: Detail = "tables", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.view = WandbView(detail)

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        super().log_metrics(self.view.payload(self.experiment, dict(metrics), step), step)


def make_wandb_logger(
    run_dir: Path, name: str, project: str, group: str | None, detail: Detail = "tables"
) -> WandbLogger:
    """A W&B logger writing under ``run_dir/wandb``, continuing the W&B run whose id the run
    folder keeps, else under a new id (``keep_wandb_id`` writes it once training starts: the
    run folder changes only after every check)."""
    id_file = run_dir / WANDB_ID
    run_id = id_file.read_text().strip() if id_file.exists() else secrets.token_hex(4)
    mode = wandb_mode()
    return HeadlineWandbLogger(
        detail=detail,
        save_dir=str(run_dir),
        name=name,
        project=project,
        group=group or name,
        id=run_id,
        offline=mode == "offline",
        mode=mode,
        settings={"silent": True},
    )


def keep_wandb_id(run_dir: Path, logger: WandbLogger) -> None:
    """Keep ``logger``'s W&B run id in the run folder, so a resumed run continues that W&B run."""
    id_file = run_dir / WANDB_ID
    if not id_file.exists():
        id_file.write_text(f"{logger.version}\n")
