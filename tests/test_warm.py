"""A command forked from a warm server (tests/warm.py) is the process ``python`` would start:
the same arguments, folder, environment, paths, output, exit and shutdown as a spawned one."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from . import warm

SHOW = textwrap.dedent(
    """
    import atexit, json, os, sys, threading, time
    atexit.register(lambda: print("atexit", flush=True))
    threading.Thread(target=lambda: (time.sleep(0.2), print("thread joined", flush=True))).start()
    print(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "path0": sys.path[0], "name": __name__,
                      "x": os.environ.get("WANDB_X"), "nvml": os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK"),
                      "parent": os.getppid(),
                      "io": [type(sys.stdout.buffer).__name__, sys.stderr.write_through]}))
    print("to stderr", file=sys.stderr)
    sys.exit(int(sys.argv[-1]))
    """
)


def _both(
    args: list[str], tmp_path, **kwargs
) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    env = {**single(), "WANDB_X": "runtime"}  # a variable read while it runs may differ
    spawned = subprocess.run(args, capture_output=True, text=True, cwd=tmp_path, env=env)
    forked = warm.run(args, capture_output=True, text=True, cwd=tmp_path, env=env)
    return spawned, forked


def single() -> dict[str, str]:
    """Our environment with one OpenMP thread: a server whose imports start threads does not fork
    (tests/warm.py), and on more than 4 cores the workers' share is more."""
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def _shown(done: subprocess.CompletedProcess) -> tuple[dict, list[str]]:
    first, *rest = done.stdout.splitlines()
    return json.loads(first), rest


@pytest.mark.parametrize("form", ["-c", "-m", "script", "-u"])
def test_a_forked_command_sees_and_does_what_a_spawned_one_does(form, tmp_path):
    (tmp_path / "show.py").write_text(SHOW)
    head = {
        "-c": ["-c", SHOW],
        "-m": ["-m", "show"],
        "script": [str(tmp_path / "show.py")],
        "-u": ["-u", "-m", "show"],
    }[form]
    spawned, forked = _both([sys.executable, *head, "a", "b", "3"], tmp_path)
    assert (
        (forked.returncode, forked.stderr, forked.stdout.splitlines()[1:])
        == (
            spawned.returncode,
            spawned.stderr,
            spawned.stdout.splitlines()[1:],
        )
        == (3, "to stderr\n", ["thread joined", "atexit"])
    )
    (seen, _), (want, _) = _shown(forked), _shown(spawned)
    assert want["parent"] == os.getpid() and seen.pop("parent") != os.getpid()  # it was forked
    want.pop("parent")
    assert seen == want
    assert want["x"] == "runtime" and want["nvml"] == os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK")
    assert form != "-u" or want["io"] == ["FileIO", True]  # unbuffered (else as PYTHONUNBUFFERED says)


def test_a_preloaded_module_runs_as_main_as_in_a_fresh_python(tmp_path):
    spawned, forked = _both([sys.executable, "-m", "bytecanary.cli", "--help"], tmp_path)
    assert (forked.returncode, forked.stdout, forked.stderr) == (0, spawned.stdout, spawned.stderr)


def test_an_exception_exit_text_and_a_kill_end_it_as_they_end_python(tmp_path):
    for code in ("raise ValueError('boom')", "import sys; sys.exit('said')", "x: Undefined = 1"):
        spawned, forked = _both([sys.executable, "-c", code], tmp_path)
        assert forked.returncode == spawned.returncode == 1
        assert forked.stderr.splitlines()[-1] == spawned.stderr.splitlines()[-1]
    sleeper = warm.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
                         stdout=subprocess.PIPE, text=True, env=single())  # fmt: skip
    assert sleeper.stdout.readline() == "up\n"
    with pytest.raises(subprocess.TimeoutExpired):
        sleeper.wait(timeout=0.1)
    os.kill(sleeper.pid, signal.SIGKILL)  # its own pid: what a test kills is the command itself
    assert sleeper.wait(timeout=60) == -signal.SIGKILL
    sleeper.stdout.close()


def test_a_variable_read_on_import_unlike_the_servers_is_spawned_not_forked():
    code = "import os; print(os.getppid())"
    server = str(warm.server(single()))
    flipped = "1" if os.environ.get("HF_HUB_OFFLINE") != "1" else "0"  # huggingface_hub reads it on import
    for env, forked in (({}, True), ({"HF_HUB_OFFLINE": flipped}, False)):
        env = {**single(), **env, "BYTECANARY_WARM": server}  # that server, as a relay asks it
        done = warm.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        assert (int(done.stdout) != os.getpid()) == forked, env


@pytest.mark.parametrize("value", [None, "1", ""])
def test_tqdm_disable_is_read_by_a_fork_as_tqdms_import_reads_it(value):
    """tqdm takes ``TQDM_DISABLE`` as its default ``disable`` when imported, which a fork from a
    server imported without it sets (``warm.SET_ON_FORK``)."""
    env = {k: v for k, v in single().items() if k != "TQDM_DISABLE"}
    code = "import os; from tqdm.auto import tqdm; print(tqdm(range(1)).disable, os.getppid())"
    env["BYTECANARY_WARM"] = str(warm.server(env))
    env.update({} if value is None else {"TQDM_DISABLE": value})
    spawned = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    forked = warm.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    (want, spawner), (seen, parent) = spawned.stdout.split(), forked.stdout.split()
    assert seen == want == str(value == "1") and int(spawner) == os.getpid() != int(parent)


PARENT = textwrap.dedent(
    """
    import json, os, subprocess, sys
    child = (  # imports nothing, so that a spawned one is quick too
        "import json, os, sys; rank_zero = sys.modules.get('lightning.fabric.utilities.rank_zero')\\n"
        "rank = rank_zero and rank_zero.rank_zero_only.rank\\n"
        "print(json.dumps(['torch' in sys.modules, rank, os.getpgid(0)]))"
    )
    done = subprocess.run([sys.executable, "-c", child], env={**os.environ, "LOCAL_RANK": "1"},
                          capture_output=True, text=True, check=True)
    print(json.dumps([os.getpgid(0), *json.loads(done.stdout)]))
    """
)


@pytest.mark.parametrize("session", [False, True])
def test_a_forked_commands_own_python_commands_are_forked_as_a_rank_sees_itself(session):
    """As Lightning starts a second rank: the child has Lightning's rank from ``LOCAL_RANK``, as
    its import reads it, and joins its parent's process group; a parent in a session of its own
    (whose group no process of the server's session can join) spawns its children."""
    forked = warm.run([sys.executable, "-c", PARENT], capture_output=True, text=True, env=single(),
                      start_new_session=session)  # fmt: skip
    group, preloaded, rank, child_group = json.loads(forked.stdout)
    assert (preloaded, rank, child_group) == ((False, None) if session else (True, 1)) + (group,)
