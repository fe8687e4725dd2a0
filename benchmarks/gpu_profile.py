"""Where the Lightning path's step time goes: a callback that ``gpu_check.py``'s ``profile``
part adds to ``bytecanary train`` on the command line, so train/ holds no benchmark code.

It runs torch.profiler over a few warm training steps and writes the top CUDA kernels by
total time (on a CPU: the top CPU ops by self time, and says so) to a JSON:

    PYTHONPATH=benchmarks bytecanary train --config configs/gpt2-355m.yaml \\
        --trainer.callbacks+='{"class_path": "gpu_profile.StepProfile", "init_args": {"out": "p.json"}}'
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import lightning as L
from gpu_ceiling import sync
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from bytecanary.io import write_json


class StepProfile(L.Callback):
    """Profile optimizer steps ``after + 1`` to ``after + steps`` (compile and warm-up done by
    then), the device synchronized at both ends so the window holds exactly their work."""

    def __init__(self, out: str, after: int = 5, steps: int = 3, rows: int = 15) -> None:
        self.out, self.after, self.steps, self.rows = out, after, steps, rows
        self._profiler: profile | None = None
        self._started = 0.0

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        if trainer.global_step != self.after or self._profiler is not None:
            return
        activities = [ProfilerActivity.CPU]
        if pl_module.device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        sync(pl_module.device)
        self._profiler = profile(activities=activities)
        self._profiler.__enter__()
        self._started = time.perf_counter()

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        if self._profiler is None or trainer.global_step != self.after + self.steps:
            return
        sync(pl_module.device)
        window_ms = (time.perf_counter() - self._started) * 1e3
        self._profiler.__exit__(None, None, None)
        if trainer.is_global_zero:
            device = pl_module.device.type
            result = {"device": device, "after_steps": self.after, "steps": self.steps}
            result["window_ms"] = round(window_ms, 3)
            result |= top(self._profiler.events(), device, self.rows)
            write_json(self.out, result)


def top(events: Iterable[Any], device: str, rows: int) -> dict[str, Any]:
    """The ``rows`` names with the most time: CUDA kernels (and copies) by duration, or on a
    CPU the ops by self time (nested ops would count twice by total time); ``share`` is of the
    time of all of them, so the shares of the rows listed sum to at most 1."""
    total_us: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    for event in events:
        if device == "cuda" and event.device_type == DeviceType.CUDA:
            us = event.time_range.elapsed_us()
        elif device == "cpu" and event.device_type == DeviceType.CPU and not event.is_async:
            us = event.self_cpu_time_total
        else:
            continue
        total_us[event.name] += us
        calls[event.name] += 1
    busy = sum(total_us.values())
    ranked = sorted(total_us, key=total_us.__getitem__, reverse=True)[:rows]
    what = "CUDA kernels by total time" if device == "cuda" else "CPU ops by self time (no GPU here)"
    return {
        "what": what,
        "busy_ms": round(busy / 1e3, 3),
        "top": [
            {
                "name": name,
                "calls": calls[name],
                "total_ms": round(total_us[name] / 1e3, 3),
                "share": round(total_us[name] / busy, 4),
            }
            for name in ranked
        ],
    }
