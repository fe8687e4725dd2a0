"""Commands forked from a server that has imported torch, Lightning and bytecanary once, where a
fork is the process ``python`` would start, spawned otherwise: the seconds of imports each command
would pay, paid once per worker (docs/demo.md#how-the-suite-runs-commands)."""

from __future__ import annotations

import atexit
import dataclasses
import importlib
import io
import json
import os
import runpy
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRELOAD = ("bytecanary.cli", "bytecanary.train.cli", "bytecanary.probes.runner", "bytecanary.report.writer")
# variables read while a command runs, never while the preloaded modules import
RUNTIME_ONLY = ("PYTEST_", "WANDB_", "BYTECANARY_", "PL_", "GIT_", "TORCHELASTIC_",
                "PWD", "OLDPWD", "SHLVL", "_")  # fmt: skip
# read on import, and set by a fork as that import would (``_as_imported``): a rank's variables
# (Lightning's launcher, torchrun), whose rank Lightning keeps, and tqdm's default ``disable``
SET_ON_FORK = ("RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "WORLD_SIZE",
               "LOCAL_WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
               "TORCH_NCCL_ASYNC_ERROR_HANDLING", "TQDM_DISABLE")  # fmt: skip
# where torchrun's agent starts its workers, with the ``Popen`` it imported
TORCHRUN_HANDLER = "torch.distributed.elastic.multiprocessing.subprocess_handler.subprocess_handler"
MESSAGE = 1 << 20
MAX_SERVERS = 4  # per test process: each holds its imports in memory (about 0.7 GB)


def import_time(env: dict[str, str]) -> dict[str, str]:
    """The variables of ``env`` that a module may read on import: equal ones give equal imports."""
    return {k: v for k, v in env.items() if not k.startswith(RUNTIME_ONLY) and k not in SET_ON_FORK}


# --- the client side: in the test process ---

_servers: dict[str, tuple[subprocess.Popen, Path]] = {}
_OWNER = os.getpid()
_home: Path | None = None  # in a command forked from a server: that server, which forks its commands too


def start(env: dict[str, str]) -> str | None:
    """Starts the server for ``env``'s import-time variables, not waiting for its imports; its key.
    None past ``MAX_SERVERS`` (the first stay), or where torch's import would start OpenMP threads
    (more than one allowed), which a fork does not keep."""
    key = json.dumps(import_time(env), sort_keys=True)
    if key not in _servers and (len(_servers) == MAX_SERVERS or env.get("OMP_NUM_THREADS") != "1"):
        return None
    if key not in _servers:
        path = Path(tempfile.mkdtemp(prefix="warm-")) / "socket"
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.warm", str(path), *PRELOAD],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,  # never written: it closes when this process ends, and so does the server
            stdout=subprocess.PIPE,
            text=True,
        )
        _servers[key] = (proc, path)
    return key


def server(env: dict[str, str]) -> Path | None:
    """The socket of the server for ``env``'s import-time variables, once it has imported (the
    one ``BYTECANARY_WARM`` names, in a relay); None where none could start."""
    if "BYTECANARY_WARM" in env:
        return Path(env["BYTECANARY_WARM"])
    if _home is not None:
        return _home
    key = start(env)
    if key is None:
        return None
    proc, path = _servers[key]
    if proc.stdout is not None:  # its imports, waited for once
        ready = proc.stdout.readline()
        proc.stdout.close()
        proc.stdout = None
        if ready != "ready\n":
            proc.kill()
            proc.wait()
    return path if proc.poll() is None else None


@atexit.register
def _stop_servers() -> None:
    if os.getpid() != _OWNER:  # a fork of this process that exits normally
        return
    for proc, path in _servers.values():
        proc.kill()
        proc.wait()
        path.unlink(missing_ok=True)
        path.parent.rmdir()


def _command(args: list[str], executable: str | None, shell: bool) -> list[str] | None:
    """The interpreter's arguments of ``args`` (``-c CODE ...``, ``-m MODULE ...`` or
    ``SCRIPT ...``, after ``-u`` or not), or None where the command is not this interpreter's."""
    if shell or executable or isinstance(args, (str, bytes)) or len(args) < 2:
        return None
    command = [os.fspath(a) for a in args[1:]]
    rest = command[1:] if command[0] == "-u" else command
    if os.fspath(args[0]) != sys.executable or not rest:
        return None
    if (rest[0] in ("-c", "-m") and len(rest) > 1) or os.path.isfile(rest[0]):
        return command
    return None


class Popen(subprocess.Popen):
    """``subprocess.Popen``, its command forked from a warm server where that is equivalent."""

    _control: socket.socket | None = None

    def __init__(self, *args, tied: bool = False, **kwargs) -> None:
        """``tied``: the command is SIGKILLed if this process dies first (a relay's)."""
        self._tied = tied
        super().__init__(*args, **kwargs)

    def _execute_child(self, *spawn) -> None:
        """``subprocess.Popen``'s POSIX spawn (same arguments), asking the server first."""
        args, executable, preexec_fn, _, pass_fds, cwd, env, _, _, shell = spawn[:10]
        p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite = spawn[10:16]
        *unchanged, start_new_session, process_group = spawn[16:]
        plain = (*unchanged, process_group) == (True, None, None, None, -1, -1)
        command = _command(args, executable, shell) if plain and not (preexec_fn or pass_fds) else None
        stdio = [p2cread, c2pwrite, errwrite]
        stdio = [fd if fd != -1 else inherited for fd, inherited in zip(stdio, (0, 1, 2), strict=True)]
        if command is None or not self._fork(command, cwd, env, stdio, start_new_session):
            super()._execute_child(*spawn)
            return
        self._child_created = True
        self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)

    def _fork(self, command: list[str], cwd, env, stdio: list[int], session: bool) -> bool:
        """Asks the server for the process; False where there is none or it refuses."""
        env = {os.fsdecode(k): os.fsdecode(v) for k, v in (os.environ if env is None else env).items()}
        path = server(env)
        if path is None or not os.path.isdir(cwd or "."):  # a missing folder: spawning raises
            return False
        folder = os.path.abspath(cwd or ".")
        request = {"command": command, "cwd": folder, "env": env, "session": session, "tied": self._tied,
                   "group": os.getpgid(0), "sid": os.getsid(0)}  # fmt: skip
        control = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            control.connect(str(path))
            socket.send_fds(control, [json.dumps(request).encode()], stdio)
            reply = json.loads(control.recv(MESSAGE))
        except (OSError, ValueError):  # the server is gone
            reply = {}
        if "pid" not in reply:
            control.close()
            return False
        self.pid = reply["pid"]
        self._control = control
        return True

    def _status(self, timeout: float | None) -> int | None:
        """The exit code the server reports once the process has ended; None while it runs."""
        ready, _, _ = select.select([self._control], [], [], timeout)
        if not ready:
            return None
        reply = self._control.recv(MESSAGE)
        self._control.close()  # the manager then reaps the process: its pid stays taken till now
        if not reply:
            raise RuntimeError(f"the warm server lost process {self.pid} of {self.args}")
        return json.loads(reply)["returncode"]

    def _internal_poll(self, _deadstate=None, **unused) -> int | None:
        if self._control is None or self.returncode is not None:
            return super()._internal_poll(_deadstate=_deadstate)
        self.returncode = self._status(0)
        return self.returncode

    def _wait(self, timeout: float | None) -> int:
        if self._control is None or self.returncode is not None:
            return super()._wait(timeout)
        code = self._status(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        self.returncode = code
        return code


def run(*popenargs, check: bool = False, **kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run`` through ``Popen``."""
    timeout = kwargs.pop("timeout", None)
    if kwargs.pop("capture_output", False):
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    with Popen(*popenargs, **kwargs) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except BaseException:
            process.kill()
            raise
    done = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    if check:
        done.check_returncode()
    return done


# --- the server side ---


@dataclasses.dataclass(frozen=True)
class _Imported:
    """What the server's imports saw (the environment) and left (variables set, threads, what
    they wrote on stderr, which each command writes again)."""

    seen: dict[str, str]
    added: dict[str, str]
    threaded: bool
    said: bytes

    def refusal(self, request: dict) -> str:
        """Why a fork would not be the process ``python`` starts for ``request`` ('' where it would)."""
        if self.threaded:
            return "the server runs threads, which a fork does not keep"
        if request["sid"] != os.getsid(0) and not request["session"]:
            return "the client is in another session, whose process group a child joins"
        ours, theirs = import_time(self.seen), import_time(request["env"])
        differ = sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k))
        return f"its environment differs in {', '.join(differ)}, read on import" if differ else ""


def _run(command: list[str]) -> int:
    """``python [-u] -c CODE ARGS``, ``... -m MODULE ARGS`` or ``... SCRIPT ARGS`` in this
    process, in a fresh ``__main__``; its exit code."""
    if command[0] == "-u":  # stdout and stderr unbuffered, as python -u opens them
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            raw = io.FileIO(stream.fileno(), "w", closefd=False)
            setattr(sys, name, io.TextIOWrapper(raw, stream.encoding, stream.errors, write_through=True))
        command = command[1:]
    main = types.ModuleType("__main__")
    main.__builtins__ = __builtins__
    sys.modules["__main__"] = main
    try:
        if command[0] == "-c":
            sys.argv = ["-c", *command[2:]]
            sys.path[0] = ""
            exec(compile(command[1], "<string>", "exec", dont_inherit=True), main.__dict__)
        elif command[0] == "-m":
            sys.argv = [command[1], *command[2:]]
            sys.path[0] = os.getcwd()
            sys.modules.pop(command[1], None)  # preloaded, not yet imported in a fresh python
            runpy._run_module_as_main(command[1])
        else:
            sys.argv = list(command)
            sys.path[0] = os.path.dirname(os.path.abspath(command[0]))
            main.__file__ = command[0]
            source = Path(command[0]).read_bytes()
            exec(compile(source, command[0], "exec", dont_inherit=True), main.__dict__)
    except SystemExit as exit_:
        if exit_.code is None or isinstance(exit_.code, int):
            return exit_.code or 0
        print(exit_.code, file=sys.stderr)
        return 1
    except BaseException:
        sys.excepthook(*sys.exc_info())
        return 1
    return 0


def _child(request: dict, fds: list[int], imported: _Imported, home: Path) -> None:
    """The command's process: the request's stdio, folder, environment and process group or
    session, then the command, then the interpreter's shutdown (threads joined, atexit), as
    ``python`` does. Its own commands of this interpreter are forked from ``home`` too."""
    global _home
    code = 1
    try:
        if request["session"]:
            os.setsid()
        else:
            os.setpgid(0, request["group"])
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in set(fds) - {0, 1, 2}:
            os.close(fd)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update({**request["env"], **imported.added})  # as after the same imports
        _as_imported()
        _home = home
        for module in (subprocess, sys.modules.get(TORCHRUN_HANDLER)):  # the latter imported the name
            if module is not None:
                module.Popen = Popen
        os.write(2, imported.said)
        code = _run(request["command"])
        threading._shutdown()
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
    finally:
        os._exit(code)


def _as_imported() -> None:
    """What the preloaded modules took from the environment on import (``SET_ON_FORK``), taken
    from the command's: Lightning's rank, and tqdm's ``TQDM_DISABLE`` (``envwrap``: bool(value))."""
    rank_zero = sys.modules.get("lightning.fabric.utilities.rank_zero")
    if rank_zero is not None:
        rank_zero.rank_zero_only.rank = rank_zero._get_rank() or 0
    std = sys.modules.get("tqdm.std")
    if std is not None:
        init = vars(std.tqdm)["__init__"]
        keywords = {k: v for k, v in init.keywords.items() if k != "disable"}
        if "TQDM_DISABLE" in os.environ:
            keywords["disable"] = bool(os.environ["TQDM_DISABLE"])
        std.tqdm.__init__ = type(init)(init.func, **keywords)


def _ended(pid: int, tie: socket.socket | None) -> int:
    """Waits for the process to end, leaving it unreaped; its exit code. SIGKILLs it first if
    ``tie``, the connection of a client that asked for it, closes."""
    ended = os.pidfd_open(pid)
    watched = [ended] if tie is None else [ended, tie]
    while ended not in select.select(watched, [], [])[0]:
        os.kill(pid, signal.SIGKILL)
        watched = [ended]
    info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def _manage(connection: socket.socket, imported: _Imported, home: Path) -> None:
    """Between the server and a command: forks it, tells the client its pid, then its exit code,
    and reaps it once the client has read that (until then its pid is taken, as a child's is)."""
    pid = 0
    try:
        message, fds, _, _ = socket.recv_fds(connection, MESSAGE, 3)
        request = json.loads(message)
        refusal = imported.refusal(request)
        if refusal:
            connection.send(json.dumps({"refused": refusal}).encode())
            return
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        pid = os.fork()
        if pid == 0:
            connection.close()
            _child(request, fds, imported, home)
        for fd in fds:
            os.close(fd)
        connection.send(json.dumps({"pid": pid}).encode())
        code = _ended(pid, connection if request["tied"] else None)
        connection.send(json.dumps({"returncode": code}).encode())
        connection.recv(MESSAGE)
        os.waitpid(pid, 0)
    except OSError:  # the client is gone: its process is reaped once it ends
        if pid:
            os.waitpid(pid, 0)
    finally:
        os._exit(0)


def serve(path: str, modules: list[str]) -> None:
    """Import ``modules``, say so on stdout, then fork a manager per connection on ``path``
    until stdin closes (the test process has ended)."""
    seen = dict(os.environ)
    stderr = os.dup(2)
    with tempfile.TemporaryFile() as said:
        os.dup2(said.fileno(), 2)
        for module in modules:
            importlib.import_module(module)
        sys.stderr.flush()
        os.dup2(stderr, 2)
        said.seek(0)
        added = {k: v for k, v in os.environ.items() if seen.get(k) != v}  # Lightning sets some
        threaded = len(os.listdir("/proc/self/task")) > 1
        imported = _Imported(seen, added, threaded, said.read())
    os.close(stderr)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # managers are reaped by the kernel
    print("ready", flush=True)
    while True:
        ready, _, _ = select.select([listener, sys.stdin], [], [])
        if sys.stdin in ready:
            return
        connection, _ = listener.accept()
        if os.fork() == 0:
            listener.close()
            _manage(connection, imported, Path(path))
        connection.close()


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2:])
