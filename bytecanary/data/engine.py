"""Parallel stages on datatrove: one task per unit of work (a corpus file, a chunk), on local processes
or as a SLURM job array, each finished task marked so a killed stage reruns only the rest; a bad
item records its one-line error, the others go on, and the stage fails at the end with the count.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from datatrove.executor import LocalPipelineExecutor, SlurmPipelineExecutor
from datatrove.pipeline.base import PipelineStep
from loguru import logger

from bytecanary.data.parallel import Parallel
from bytecanary.data.progress import Progress
from bytecanary.errors import BytecanaryError
from bytecanary.io import write_json
from bytecanary.versions import DATATROVE, require

logger.disable("datatrove")  # its per-task log lines would bury the stage's one progress line

RESULTS = "results"
PROGRESS = "progress"
TASKS = "tasks"


PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent dies
# looked up here, not in a forked child, where loading a library can deadlock
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None
_running_here: int | None = None  # the pid of a process running local tasks, while it does


def _die_with_parent() -> None:
    """In a child forked while this process runs local tasks (datatrove's ``Manager``): Linux kills it
    when its parent dies, so a SIGKILLed ``prepare`` (the OOM killer's) leaves no process waiting forever."""
    global _running_here
    parent = _running_here
    _running_here = None
    if parent is None or _PRCTL is None:
        return
    # the signal follows the thread that forked (the one running the tasks); grandchildren are left alone
    _PRCTL(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_die_with_parent)


@contextlib.contextmanager
def _children_die_with_this_process() -> Iterator[None]:
    """While it lasts, a child forked here dies with this process (``_die_with_parent``)."""
    global _running_here
    _running_here = os.getpid()
    try:
        yield
    finally:
        _running_here = None


class Submitted(Exception):
    """A stage's tasks are on SLURM; rerun ``bytecanary prepare`` once they have finished."""


class Reporter:
    """How far a task is into its item, written to a small file at most every 2 s so the
    stage's progress bar moves within long tasks too."""

    def __init__(self, path: Path) -> None:
        self.path, self.done, self.last = path, 0, 0.0

    def __call__(self, nbytes: int) -> None:
        self.done += nbytes
        now = time.monotonic()
        if now - self.last >= 2:
            self.last = now
            self.path.write_text(str(self.done))


class Tasks(PipelineStep):
    """Runs ``work(item, report)`` for the task's item and writes what it returns."""

    name = "bytecanary"
    type = "stage"

    def __init__(self, work: Callable[[Any, Reporter], dict], items: Sequence[Any], folder: str):
        super().__init__()
        self.work, self.items, self.folder = work, list(items), folder

    def run(self, data: Any = None, rank: int = 0, world_size: int = 1) -> None:
        logger.disable("datatrove")
        folder = Path(self.folder)
        report = Reporter(folder / PROGRESS / f"{rank:05d}")
        try:
            with one_thread():
                result = {"ok": self.work(self.items[rank], report)}
        except (BytecanaryError, OSError, ValueError, UnicodeError) as err:
            result = {"error": str(err).splitlines()[0] if str(err) else type(err).__name__}
        write_json(folder / RESULTS / f"{rank:05d}.json", result)


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """A task is one core's work: the tokenizer's own threads would compete with the other
    workers (and make one worker's rate say nothing about a core's)."""
    before = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        yield
    finally:
        if before is None:
            del os.environ["TOKENIZERS_PARALLELISM"]
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = before


def _results(folder: Path, n: int) -> dict[int, dict]:
    found = {}
    for path in (folder / RESULTS).glob("*.json"):
        found[int(path.stem)] = json.loads(path.read_text(encoding="utf-8"))
    return {rank: r for rank, r in found.items() if rank < n}


def _watch(folder: Path, sizes: Sequence[int], progress: Progress, stop: threading.Event) -> None:
    """Advance the bar by finished tasks' sizes plus what running tasks report."""
    while not stop.wait(0.5):
        progress.set(_done_bytes(folder, sizes))


def _done_bytes(folder: Path, sizes: Sequence[int]) -> int:
    finished = {int(p.stem) for p in (folder / RESULTS).glob("*.json")}
    done = sum(sizes[r] for r in finished if r < len(sizes))
    for path in (folder / PROGRESS).glob("*"):
        rank = int(path.name)
        if rank not in finished and rank < len(sizes):
            with contextlib.suppress(OSError, ValueError):  # being rewritten
                done += min(int(path.read_text() or 0), sizes[rank])
    return done


def run_tasks(
    work: Callable[[Any, Reporter], dict],
    items: Sequence[Any],
    sizes: Sequence[int],
    folder: Path,
    run: Parallel,
    desc: str,
) -> list[dict]:
    """``work(item, report)`` for every item (``sizes``: its bytes, for the progress bar)
    in task folder ``folder``; returns each item's result, in item order."""
    require("datatrove", DATATROVE, "bytecanary prepare's retry of failed tasks")
    folder = Path(folder)
    for sub in (RESULTS, PROGRESS):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    workers = max(1, min(run.processes(), len(items)))
    step = Tasks(work, items, str(folder))
    if run.slurm_partition is not None:
        _run_slurm(step, len(items), folder, run, desc)
    else:
        _run_local(step, len(items), sizes, folder, workers, desc)
    results = _results(folder, len(items))
    return _checked(results, len(items), folder, desc)


def _run_local(step: Tasks, n: int, sizes: Sequence[int], folder: Path, workers: int, desc: str) -> None:
    executor = LocalPipelineExecutor(
        pipeline=[step], tasks=n, workers=workers, logging_dir=str(folder / TASKS)
    )
    progress = Progress(desc, sum(sizes))
    stop = threading.Event()
    watcher = threading.Thread(target=_watch, args=(folder, sizes, progress, stop), daemon=True)
    watcher.start()
    try:
        with _children_die_with_this_process():
            executor.run()
    finally:
        stop.set()
        watcher.join()
        progress.close(_done_bytes(folder, sizes))


def _checked(results: dict[int, dict], n: int, folder: Path, desc: str) -> list[dict]:
    """Every result, or a BytecanaryError: one item's own message, or the count of failed
    items after printing each. Failed tasks are marked unfinished so that a rerun retries
    them and only them."""
    failed = sorted(rank for rank, r in results.items() if "error" in r)
    errors = [results[rank]["error"] for rank in failed]
    for rank in failed:
        (folder / RESULTS / f"{rank:05d}.json").unlink()
        (folder / TASKS / "completions" / f"{rank:05d}").unlink(missing_ok=True)
    if failed and len(failed) == n:  # nothing finished, nothing to resume
        shutil.rmtree(folder, ignore_errors=True)
    if len(errors) == 1:
        raise BytecanaryError(errors[0])
    if errors:
        for error in errors:
            print(f"[{desc}] {error}", file=sys.stderr)
        raise BytecanaryError(
            f"[{desc}] {len(errors)} of {n} items failed (each named above); fix them and rerun"
        )
    missing = [rank for rank in range(n) if rank not in results]
    if missing:
        raise BytecanaryError(f"[{desc}] {len(missing)} of {n} tasks left no result (task {missing[0]})")
    return [results[rank]["ok"] for rank in range(n)]


def _submitted_job(folder: Path) -> str | None:
    """The job id of an earlier submission that SLURM still knows (queued or running)."""
    marker = folder / "submitted.json"
    if not marker.exists():
        return None
    job = json.loads(marker.read_text(encoding="utf-8"))["job_id"]
    if shutil.which("squeue") is None:
        return None
    listed = subprocess.run(["squeue", "-h", "-j", str(job)], capture_output=True, text=True)
    return str(job) if listed.returncode == 0 and listed.stdout.strip() else None


def _run_slurm(step: Tasks, n: int, folder: Path, slurm: Parallel, desc: str) -> None:
    """Submit the unfinished tasks as a job array, unless all are done or a job still runs them."""
    if len(_results(folder, n)) == n:
        return
    if (job := _submitted_job(folder)) is not None:
        raise Submitted(f"[{desc}] SLURM job {job} is still running; rerun this command when it has finished")
    venv = Path(sys.prefix) / "bin" / "activate"
    executor = SlurmPipelineExecutor(
        pipeline=[step],
        tasks=n,
        time=slurm.slurm_time,
        partition=slurm.slurm_partition,
        cpus_per_task=slurm.slurm_cpus,
        mem_per_cpu_gb=slurm.slurm_mem_gb,
        job_name=f"bytecanary-{desc}",
        venv_path=str(venv) if venv.exists() else None,
        logging_dir=str(folder / TASKS),
        mail_type="NONE",
    )
    try:
        executor.launch_job()
    except (OSError, subprocess.CalledProcessError) as err:
        raise BytecanaryError(f"[{desc}] sbatch failed: {err}") from None
    write_json(folder / "submitted.json", {"job_id": executor.job_id})
    raise Submitted(
        f"[{desc}] submitted SLURM job {executor.job_id} ({n} tasks, script "
        f"{folder / TASKS / 'launch_script.slurm'}); rerun this command when it has finished"
    )
