"""A sidecar beside training: with in-loop probes off, ``bytecanary probe --watch RUN_DIR``
probes every weights file as it lands, exactly once, and exits 0 by itself once training has
marked the run finished; a training restarted for more steps lets it watch on. It always ends:
a training killed, crashed or hung (its heartbeat), a run without a heartbeat that goes quiet
(``--series.idle_limit``), a watched path that is a file or never appears are each one ``error:`` line
and exit 2; a stale, unreadable or early ``finished.json`` never ends it early."""

import dataclasses
import json
import os
import shutil
import socket
import subprocess
import time

import pytest

from bytecanary.checkpoints import FINISHED, HEARTBEAT, Heartbeat, finished_step, read_heartbeat
from bytecanary.cli import main
from bytecanary.io import write_json
from bytecanary.records import read as read_records
from bytecanary.train.heartbeat import beating

from .. import warm
from .conftest import QUIET, ROOT, command, micro_config, one_error

ENV = {**os.environ, **QUIET, "OMP_NUM_THREADS": "1"}
WATCH = ["--probes", "[level0]", "--trial=true", "--series.interval", "0.2", "--wandb=false"]
GUARD = 300  # seconds: a guard against a hang, far above CI's pace; no test asserts a speed


def test_a_sidecar_probes_each_checkpoint_once_and_ends_with_the_run(tmp_path, small_data):
    probes = [{"name": "level0", "trial": True, "per_language": 2}]
    config = micro_config(tmp_path / "micro.yaml", small_data, tmp_path / "runs", probes, probe_in_loop=False)
    run = tmp_path / "runs" / "side"
    out = tmp_path / "sidecar.jsonl"
    watch = [
        "probe",
        "--watch",
        run,
        "--config",
        config,
        "--series.interval",
        "0.2",
        "--wandb=false",
        "--out",
        out,
    ]
    sidecar = warm.Popen(command(*watch), cwd=ROOT, env=ENV, stdout=subprocess.PIPE, text=True)
    assert f"for {run} to appear" in sidecar.stdout.readline()  # watching before training starts
    train = ["train", "--config", str(config), "--run.name", "side", "--trainer.max_steps", "12"]
    assert main(train) == 0  # the sidecar's process watches this one train
    assert not (run / "probes.jsonl").exists()  # training fired no probe itself
    assert finished_step(run) == 12 == finished_step(run / "checkpoints")
    beat = read_heartbeat(run)  # the attempt that finished said so, and that it ended
    assert beat.ended is not None and json.loads((run / FINISHED).read_text())["attempt"] == beat.attempt
    stdout, _ = sidecar.communicate(timeout=10 * GUARD)
    assert sidecar.returncode == 0 and "the run finished at step 12: every checkpoint is probed" in stdout
    rows = read_records(out)
    assert [(r.step, r.status) for r in rows] == [(4, "ok"), (8, "ok"), (12, "ok")]  # in step order, once
    assert main([*train[:-1], "16", "--run.resume", "true"]) == 0  # trained on: finished again, further
    assert finished_step(run) == 16 and (run / FINISHED).is_file()


def test_a_sidecar_ends_with_one_line_once_its_training_is_killed(run_copy, tmp_path, capsys):
    run, config = run_copy  # finished at step 8; resumed to 12 and SIGKILLed saving its full state
    resume = ["train", "--config", config, "--run.name", "copy", "--trainer.max_steps", "12"]
    killer = command(*resume, "--run.resume", "true", prelude="import tests.faults.killer_state")
    training = warm.Popen(killer, cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert training.wait(timeout=GUARD) == -9
    beat = read_heartbeat(run)
    assert (beat.pid, beat.ended) == (training.pid, None) and finished_step(run) is None
    missed = dataclasses.replace(beat, updated=beat.updated - 2 * beat.every)  # killed two beats ago
    write_json(run / HEARTBEAT, dataclasses.asdict(missed))
    out = tmp_path / "side.jsonl"
    capsys.readouterr()
    watch = ["probe", "--watch", str(run), *WATCH, "--series.idle_limit", "2", "--out", str(out)]
    assert main(watch) == 2
    sidecar = capsys.readouterr()
    one_error(sidecar.err, f"{run}: its training stopped without finishing", f"pid {beat.pid}", "gone")
    assert [(r.step, r.status) for r in read_records(out)] == [(4, "ok"), (8, "ok"), (12, "ok")]
    assert "nothing to do" not in sidecar.out  # nothing was said of a records file not yet written


def _replace(path, text: str) -> None:
    """Write ``path`` whole at once, as training's atomic writes do."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _running(process) -> None:
    """``process`` still runs; else (or after GUARD) fail with what it printed."""
    if process.poll() is None:
        return
    pytest.fail(f"exited {process.returncode}: {process.communicate()}")


def _until(condition, process) -> None:
    deadline = time.monotonic() + GUARD
    while not condition():
        _running(process)
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"not met in {GUARD} s: {process.communicate()}")
        time.sleep(0.1)


def test_a_stale_unreadable_or_early_marker_does_not_end_a_sidecar(run_copy, tmp_path):
    run, _ = run_copy  # finished.json of the attempt that trained it; a newer attempt now trains
    now = time.time()
    live = Heartbeat(os.getpid(), socket.gethostname(), "newer", 5.0, now, now)  # this test's process
    write_json(run / HEARTBEAT, dataclasses.asdict(live))
    out = tmp_path / "side.jsonl"
    args = command("probe", "--watch", run, *WATCH, "--series.idle_limit", "3600", "--out", out)
    sidecar = warm.Popen(args, cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _until(lambda: len(read_records(out)) == 2, sidecar)
    marker = run / FINISHED
    for text in ("", "[12]", json.dumps({"step": 12, "attempt": "newer"})):  # stale, wrong type, early
        if text:
            _replace(marker, text)
        time.sleep(1.0)  # several looks at each
        _running(sidecar)
    ckpts = run / "checkpoints"  # step 12's weights land: the same weights as step 8's, so done
    shutil.copy(ckpts / "step0000008.safetensors", ckpts / ".step0000012.safetensors.tmp")
    os.replace(ckpts / ".step0000012.safetensors.tmp", ckpts / "step0000012.safetensors")
    stdout, stderr = sidecar.communicate(timeout=GUARD)
    assert sidecar.returncode == 0 and "the run finished at step 12: every checkpoint is probed" in stdout
    [warning] = stderr.strip().splitlines()  # once, though the bad marker was read at every look
    assert warning.startswith("warning: ") and f"{marker}: expected a JSON object, got list" in warning
    waiting = [line for line in stdout.splitlines() if line.startswith("waiting")]
    assert 1 <= len(waiting) <= 4, waiting  # each state said once, not at each of the ~15 looks
    assert any("the run finished at step 12; its weights file is not in" in line for line in waiting)
    assert len(read_records(out)) == 2


def test_a_quiet_run_without_heartbeat_ends_the_watch(run_copy, tmp_path, capsys):
    run, _ = run_copy  # as a run trained before heartbeats, stopped early
    (run / HEARTBEAT).unlink()
    (run / FINISHED).unlink()
    out = tmp_path / "side.jsonl"
    assert main(["probe", "--watch", str(run), *WATCH, "--series.idle_limit", "1", "--out", str(out)]) == 2
    captured = capsys.readouterr()
    one_error(captured.err, f"{run}: its training stopped without finishing", "no heartbeat.json", "1 s")
    assert len(read_records(out)) == 2 and "nothing to do" not in captured.out


def test_a_watch_target_that_is_a_file_or_never_appears_is_one_line(tmp_path, capsys):
    weights = tmp_path / "step0000004.safetensors"
    weights.write_bytes(b"not a folder")
    out = tmp_path / "side.jsonl"
    assert main(["probe", "--watch", str(weights), *WATCH, "--out", str(out)]) == 2
    one_error(capsys.readouterr().err, f"--watch {weights}: not a folder")
    typo = tmp_path / "runs" / "tyop"
    assert main(["probe", "--watch", str(typo), *WATCH, "--series.idle_limit", "0.5", "--out", str(out)]) == 2
    captured = capsys.readouterr()
    one_error(captured.err, f"--watch {typo}: did not appear in 0.5 s")
    assert f"waiting up to 0.5 s (--series.idle_limit) for {typo} to appear" in captured.out
    assert not out.exists()


def test_the_heartbeat_is_renewed_and_says_when_its_process_left(tmp_path):
    with beating(tmp_path, every=0.05) as attempt:
        first = read_heartbeat(tmp_path)
        assert (first.pid, first.host, first.attempt, first.ended) == (
            os.getpid(), socket.gethostname(), attempt, None,
        )  # fmt: skip
        deadline = time.monotonic() + GUARD
        while read_heartbeat(tmp_path).updated == first.updated:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    assert read_heartbeat(tmp_path).ended is not None
    with pytest.raises(RuntimeError), beating(tmp_path) as again:
        raise RuntimeError("a crash in training")
    beat = read_heartbeat(tmp_path)
    assert beat.attempt == again != attempt and beat.ended >= beat.started


def test_a_marker_counts_only_for_the_attempt_that_trained_last(tmp_path):
    write_json(tmp_path / FINISHED, {"step": 8, "tokens_seen": 64, "attempt": "first"})
    assert finished_step(tmp_path) == 8  # no heartbeat: a run trained before heartbeats
    with beating(tmp_path, every=60) as attempt:
        assert finished_step(tmp_path) is None  # resumed: the marker is stale
    write_json(tmp_path / FINISHED, {"step": 12, "tokens_seen": 96, "attempt": attempt})
    assert finished_step(tmp_path) == 12
    heard = []
    (tmp_path / FINISHED).write_text('{"step": "12"}')
    assert finished_step(tmp_path, on_bad=heard.append) is None
    assert heard == [f"{tmp_path / FINISHED}: 'step' has the wrong type ('12'); taken as absent"]
