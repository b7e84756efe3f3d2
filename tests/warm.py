"""A warm interpreter for the tests' command lines: each ``ablate ...`` a test runs is a new process
forked from one that has imported torch, Lightning, Hydra, wandb and ablate already.

Why: about 4.5 of the ~6.5 CPU-seconds of a tiny sweep's process are imports, the same ones in every
process, and the suite starts well over a hundred of them on two cores. What the forked process runs
is what the console script runs (its entry point from the package's metadata, ``sys.exit(main())``,
the interpreter's own shutdown with atexit hooks): real Hydra, real launchers (their workers are fresh
interpreters, as always), real Lightning, real wandb. It is its own session and process group (a
test may send it SIGTERM, or Ctrl-C to its group), with the test's working directory, environment,
arguments and ``PYTHONPATH``, stdin from /dev/null and stdout/stderr to files. What it does not
exercise is a cold start: the tests about imports, the installed wheel and the processes' command
lines (``/proc``) start their processes with ``subprocess`` as before.

``python tests/warm.py SOCKET`` serves; :class:`WarmCli` is the client (tests/conftest.py's
``run_cli``)."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: what every command line imports (the sweep's end: the report, pandas, matplotlib). Not wandb: at import it makes
#: a temporary directory for media that the first forked process to exit would remove for all the others
PRELOAD = ("ablate.cli", "ablate.lit", "ablate.run", "ablate.train", "ablate.report.cli", "ablate.bench",
           "ablate.coord_check", "pandas", "matplotlib.pyplot")


# ---------------------------------------------------------------------------- the server


def _serve(path: str, parent: int) -> dict:
    """Accept requests on the Unix socket ``path``; fork a process per request and return its request in
    that process. The server itself answers each request with the process's pid, then its exit code, CPU
    seconds and peak resident memory in KiB (its own and its reaped children's, as ``os.wait4`` says)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".tmp")
    listener.listen(16)
    os.rename(path + ".tmp", path)  # ready: the client waits for the name
    running: dict[int, socket.socket] = {}
    while True:
        if os.getppid() != parent:  # the test process is gone
            os._exit(0)
        ready, _, _ = select.select([listener], [], [], 0.05)
        if ready:
            conn, _ = listener.accept()
            request = json.loads(conn.makefile("r").readline())
            pid = os.fork()
            if pid == 0:
                listener.close()
                for other in running.values():
                    other.close()
                conn.close()
                return request
            conn.sendall(f"{pid}\n".encode())
            running[pid] = conn
        while running:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
            if pid == 0:
                break
            conn = running.pop(pid, None)
            if conn is not None:
                try:
                    conn.sendall(f"{os.waitstatus_to_exitcode(status)} {usage.ru_utime + usage.ru_stime:.3f} "
                                 f"{usage.ru_maxrss}\n".encode())
                except OSError:
                    pass  # the client stopped waiting
                conn.close()


def _become(request: dict) -> None:
    """Turn this forked process into the one the request describes, as ``exec`` would have started it."""
    os.setsid()
    if request.get("nice"):
        os.nice(request["nice"])
    if request.get("cpus"):
        os.sched_setaffinity(0, request["cpus"])  # as ``taskset -c`` would start it
    if request.get("umask") is not None:
        os.umask(request["umask"])
    for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[1:1] = [p for p in extra if p not in sys.path]
    stdin = os.open(os.devnull, os.O_RDONLY)
    os.dup2(stdin, 0)
    for fd, name in ((1, "stdout"), (2, "stderr")):
        out = os.open(request[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, fd)
        os.close(out)
    unbuffered = bool(request["env"].get("PYTHONUNBUFFERED"))
    sys.stdout = open(1, "w", encoding="utf-8", errors="backslashreplace", closefd=False,
                      buffering=1 if unbuffered else -1)
    sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False, buffering=1)
    sys.stdin = open(0, "r", closefd=False)
    sys.argv = [request["argv0"], *request["args"]]


def _entry_point(script: str):
    from importlib.metadata import entry_points

    (entry,) = [e for e in entry_points(group="console_scripts") if e.name == script]
    return entry.load()


# ---------------------------------------------------------------------------- the client


class WarmProcess:
    """One forked command line, as much of :class:`subprocess.Popen` as the tests use."""

    def __init__(self, conn: socket.socket, out: Path, err: Path, args: list[str]) -> None:
        self.args = args
        self._conn, self._lines = conn, conn.makefile("r")
        self._out, self._err = out, err
        self.pid = int(self._lines.readline())
        self.returncode: int | None = None
        #: once it has exited: user + system CPU seconds and peak resident memory (KiB), its reaped children's
        #: included (``os.wait4``); the peak counts the pages it shares with the warm interpreter
        self.cpu_seconds: float | None = None
        self.maxrss_kib: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._conn], [], [], 0)[0]:
            self._finish()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not select.select([self._conn], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self._finish()
        return self.returncode

    def _finish(self) -> None:
        line = self._lines.readline().split()
        if line:
            self.returncode, self.cpu_seconds, self.maxrss_kib = int(line[0]), float(line[1]), int(line[2])
        else:
            self.returncode = -signal.SIGKILL  # the server died
        self._conn.close()

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        texts = tuple(p.read_text(errors="backslashreplace") for p in (self._out, self._err))
        for p in (self._out, self._err):
            p.unlink(missing_ok=True)
        return texts

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        if self.returncode is None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class WarmCli:
    """The client of one server, started on first use and stopped with the test process."""

    def __init__(self, bin_dir: Path, env: dict[str, str]) -> None:
        self.bin_dir, self._env = bin_dir, env
        self._server: subprocess.Popen | None = None
        self._dir = Path(tempfile.mkdtemp(prefix="ablate-warm-"))
        self._socket = str(self._dir / "socket")

    def _start(self) -> None:
        if self._server is not None and self._server.poll() is None:
            return
        self._server = subprocess.Popen([sys.executable, __file__, self._socket, str(os.getpid())],
                                        env=self._env, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while not os.path.exists(self._socket):
            if self._server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the warm interpreter did not start (exit code {self._server.poll()})")
            time.sleep(0.05)

    def popen(self, script: str, args: list[str], cwd: Path, env: dict[str, str], *, nice: int = 0,
              umask: int | None = None, cpus: list[int] | None = None) -> WarmProcess:
        """Start ``script args`` in its own session (as ``start_new_session=True``, SIGINT at its default:
        a terminal job), at ``nice`` and ``umask`` where given, on the cores ``cpus`` (its affinity)."""
        self._start()
        out = Path(tempfile.mkstemp(dir=self._dir, suffix=".out")[1])
        err = Path(tempfile.mkstemp(dir=self._dir, suffix=".err")[1])
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(self._socket)
        request = {"script": script, "argv0": str(self.bin_dir / script), "args": [str(a) for a in args],
                   "cwd": str(cwd), "env": dict(env), "stdout": str(out), "stderr": str(err), "nice": nice,
                   "umask": umask, "cpus": cpus}
        conn.sendall((json.dumps(request) + "\n").encode())
        return WarmProcess(conn, out, err, [request["argv0"], *request["args"]])

    def run(self, script: str, args: list[str], cwd: Path, env: dict[str, str], timeout: float | None,
            **how) -> subprocess.CompletedProcess:
        """Like ``subprocess.run(..., capture_output=True, text=True, timeout=timeout)``."""
        process = self.popen(script, args, cwd, env, **how)
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            raise
        return subprocess.CompletedProcess(process.args, process.returncode, out, err)

    def stop(self) -> None:
        if self._server is not None and self._server.poll() is None:
            self._server.kill()
            self._server.wait()
        shutil.rmtree(self._dir, ignore_errors=True)


if __name__ == "__main__":
    import gc
    import importlib

    gc.disable()
    for module in PRELOAD:
        importlib.import_module(module)
    gc.freeze()
    _request = _serve(sys.argv[1], int(sys.argv[2]))
    gc.enable()
    _become(_request)
    _main = _entry_point(_request["script"])
    del _request
    sys.exit(_main())
