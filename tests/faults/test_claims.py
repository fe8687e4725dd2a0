"""Claims that are bad, far ahead, held by a namesake or waited for: a bad claim line is a
warning, never a traceback; an expiry beyond its lease counts as run out; a ``--worker`` name
used by two live processes is a warning and the two share the work; a waiting worker says
whom it waits for and until when, once per lease; a lease out of bounds is one line."""

import json
import socket
import subprocess
import time

import pytest

from bytecanary.cli import main
from bytecanary.errors import BytecanaryError
from bytecanary.probes.claims import MAX_LEASE, Claims
from bytecanary.probes.pipeline import Pipeline
from bytecanary.probes.specs import build_probes
from bytecanary.probes.targets import Target
from bytecanary.records import read as read_records

from .conftest import one_error

PAIR = ("sha256:x", "level0", 1, "p")
KEY = json.dumps(list(PAIR))
BAD = [
    {"pair": KEY, "worker": "b", "until": "soon"},  # a non-numeric expiry
    {"pair": 7, "worker": "b", "until": 1.0},  # a pair of the wrong type
    {"pair": KEY, "worker": ["b"], "until": 1.0},
    [KEY, "b"],  # not an object
]


def _write(path, rows: list) -> None:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


@pytest.fixture
def sleeper():
    """A live process of this host: the namesake that holds claims."""
    process = subprocess.Popen(["sleep", "300"])
    yield process
    process.kill()
    process.wait()


def _namesake(pid: int, until: float, lease: float) -> dict:
    return {
        "pair": KEY,
        "worker": "a",
        "until": until,
        "lease": lease,
        "host": socket.gethostname(),
        "pid": pid,
    }


def test_bad_claim_lines_are_skipped_with_one_warning_each(tmp_path, capsys):
    _write(tmp_path / "p.jsonl.claims", [*BAD, "{not json"])
    claims = Claims(tmp_path / "p.jsonl", "a")
    assert claims.claim([PAIR]) == [True]
    warnings = capsys.readouterr().err.strip().splitlines()
    assert len(warnings) == len(BAD) + 1 and all(w.startswith("warning: ") for w in warnings), warnings
    assert "p.jsonl.claims:1: 'until' is not a number of seconds ('soon'); line skipped" in warnings[0]
    assert claims.claim([PAIR]) == [True] and capsys.readouterr().err == ""  # said once


def test_a_claim_far_beyond_its_lease_counts_as_run_out(tmp_path, capsys):
    ahead = {"pair": KEY, "worker": "b", "until": time.time() + 1e9, "lease": 120.0}
    _write(tmp_path / "p.jsonl.claims", [ahead])
    assert Claims(tmp_path / "p.jsonl", "a").claim([PAIR]) == [True]
    one = capsys.readouterr().err.strip()
    assert "the claim of worker b runs out in 1e+09 s, beyond its lease of 120 s; taken as run out" in one
    assert Claims(tmp_path / "p.jsonl", "c").claim([PAIR]) == [False]  # a's claim holds as usual


def test_a_namesake_in_a_live_process_shares_the_work_and_a_dead_ones_pairs_come_back(
    tmp_path, capsys, sleeper
):
    _write(tmp_path / "p.jsonl.claims", [_namesake(sleeper.pid, time.time() + 100, 120.0)])
    claims = Claims(tmp_path / "p.jsonl", "a")
    assert claims.claim([PAIR]) == [False]  # shared: the namesake's pair is not computed twice
    warning = capsys.readouterr().err.strip()
    assert f"worker name 'a' is also used by pid {sleeper.pid} on {socket.gethostname()}" in warning
    with claims.holding([]):
        pass  # releasing this process's claims leaves the namesake's alone
    assert Claims(tmp_path / "p.jsonl", "c").claim([PAIR]) == [False]
    sleeper.kill()
    sleeper.wait()
    assert claims.claim([PAIR]) == [True]  # its process is gone: a restart under the name


@pytest.mark.parametrize("lease", [0.0, -1.0, 1e12])
def test_a_lease_out_of_bounds_is_one_line(tmp_path, capsys, lease):
    for wrong in (lease, float("nan")):
        with pytest.raises(BytecanaryError, match="lease: must be more than 0 and at most 86400 seconds"):
            Claims(tmp_path / "p.jsonl", "a", lease=wrong)
    out = tmp_path / "p.jsonl"
    assert (
        main(["probe", "x.safetensors", "--workers.lease", str(lease), "--wandb=false", "--out", str(out)])
        == 2
    )
    one_error(capsys.readouterr().err, "probe: --workers.lease must be more than 0 and at most 86400 seconds")
    assert not out.exists() and MAX_LEASE == 86_400


def test_a_waiting_worker_says_whom_for_and_until_when_then_takes_over(trained, tmp_path, capsys, sleeper):
    weights = trained / "checkpoints" / "step0000004.safetensors"
    out = tmp_path / "p.jsonl"
    pipeline = Pipeline(build_probes([{"name": "level0", "trial": True}]), out)
    [pair] = pipeline._pairs(Target.file(weights), [0])
    held = {**_namesake(sleeper.pid, time.time() + 3, 3.0), "pair": json.dumps(list(pair)), "worker": "b"}
    _write(tmp_path / "p.jsonl.claims", [BAD[0], held])
    args = [
        "probe",
        str(weights),
        "--probes",
        "[level0]",
        "--trial=true",
        "--workers.name",
        "a",
        "--workers.lease",
        "1",
    ]
    assert main([*args, "--wandb=false", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    waiting = [line for line in captured.out.splitlines() if line.startswith("waiting: ")]
    assert (
        waiting
        and f"worker b (pid {sleeper.pid} on {socket.gethostname()}) holds 1 pair(s) until" in waiting[0]
    )
    assert len(waiting) <= 5, waiting  # once per lease (1 s) over the 3 s left of b's claim, not per look
    assert captured.err.count("warning: ") == 1 and "'until' is not a number" in captured.err
    assert [(r.step, r.worker, r.status) for r in read_records(out)] == [(4, "a", "ok")]
