"""A sidecar beside training: with in-loop probes off, ``bytecanary probe --watch RUN_DIR``
probes every weights file as it lands, exactly once, and exits 0 by itself once training has
marked the run finished; a training restarted for more steps lets it watch on."""

import os
import subprocess

from bytecanary.checkpoints import FINISHED, finished_step
from bytecanary.records import read as read_records

from .conftest import QUIET, ROOT, command, micro_config


def test_a_sidecar_probes_each_checkpoint_once_and_ends_with_the_run(tmp_path, small_data):
    probes = [{"name": "level0", "trial": True, "per_language": 2}]
    config = micro_config(tmp_path / "micro.yaml", small_data, tmp_path / "runs", probes, probe_in_loop=False)
    run = tmp_path / "runs" / "side"
    out = tmp_path / "sidecar.jsonl"
    env = {**os.environ, **QUIET, "OMP_NUM_THREADS": "1"}
    watch = ["probe", "--watch", run, "--config", config, "--interval", "0.2", "--no-wandb", "--out", out]
    sidecar = subprocess.Popen(command(*watch), cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    train = ["train", "--config", config, "--run.name", "side", "--trainer.max_steps", "12"]
    trained = subprocess.run(command(*train), cwd=ROOT, env=env, capture_output=True, text=True)
    assert trained.returncode == 0, trained.stderr[-2000:]
    assert not (run / "probes.jsonl").exists()  # training fired no probe itself
    assert finished_step(run) == 12 == finished_step(run / "checkpoints")
    stdout, _ = sidecar.communicate(timeout=3000)  # a guard against a hang, far above CI's pace
    assert sidecar.returncode == 0 and "the run finished at step 12: every checkpoint is probed" in stdout
    rows = read_records(out)
    assert [(r.step, r.status) for r in rows] == [(4, "ok"), (8, "ok"), (12, "ok")]  # in step order, once
    longer = [*train[:-1], "16", "--run.resume", "true"]  # trained on: finished again, further
    more = subprocess.run(command(*longer), cwd=ROOT, env=env, capture_output=True, text=True)
    assert more.returncode == 0, more.stderr[-2000:]
    assert finished_step(run) == 16 and (run / FINISHED).is_file()
