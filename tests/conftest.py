"""Shared fixtures: run the real `ablate` console scripts in a temporary directory."""

from __future__ import annotations

import atexit
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from ablate.compose import TINY, compose, tiny_overrides
from warm import WarmCli, WarmProcess

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parent.parent
# Step times measured by tests (ablate --plan, sweeps) go to a cache of their own, not the user's
# (ablate.step_times.cache_path); the processes the tests start inherit it. Removed at the end of the
# test process that made it (each pytest worker makes its own).
if "ABLATE_CACHE_DIR" not in os.environ:
    os.environ["ABLATE_CACHE_DIR"] = tempfile.mkdtemp(prefix="ablate-test-cache-")
    _cache_owner = os.getpid()  # not a forked child's exit
    atexit.register(lambda path=os.environ["ABLATE_CACHE_DIR"]: os.getpid() == _cache_owner
                    and shutil.rmtree(path, ignore_errors=True))


# One intra-op thread for every process a test starts, and for the test process itself under
# pytest-xdist: the tests' models are tiny (one thread is as fast as two), and `make test` runs two
# workers on two cores, where two processes with a thread per core each spin against each other
# (OpenMP's busy wait): two such runs at once took 25 s where one took 13 s; with one thread each, 15 s.
# What ablate sets itself (a parallel launcher's share of the cores, SLURM's cpus-per-task) still wins.
TEST_THREADS = "1"
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    import torch

    torch.set_num_threads(int(TEST_THREADS))


def as_a_terminal_job() -> None:
    """``preexec_fn`` for a child that a test stops with Ctrl-C: SIGINT at its default and not
    blocked, as a shell gives a foreground job. A child inherits an ignored or blocked SIGINT from
    its parent (and ablate, like any program, keeps an ignored one ignored: ``cmd &`` in a script),
    and a test process may have it so after other tests: the child then never sees the Ctrl-C."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(WANDB_MODE="offline", WANDB_SILENT="true", PYTHONUNBUFFERED="1", HYDRA_FULL_ERROR="0",
               OMP_NUM_THREADS=TEST_THREADS)
    env.update(extra)
    return env


_warm: WarmCli | None = None  # this test process's warm interpreter (tests/warm.py), started on first use


def run_cli(args: list[str], cwd: Path, *, script: str = "ablate", env: dict[str, str] | None = None,
            timeout: float = 240, cold: bool = False, cpus: list[int] | None = None) -> subprocess.CompletedProcess:
    """Run a console script of this package (as a user would) and capture its output: a process forked
    from a warm interpreter (tests/warm.py: the same entry point, without the seconds of imports), or
    with ``cold=True`` (or ``ABLATE_TESTS_COLD=1`` for every call) the console script itself started by
    ``subprocess``. ``cpus``: on those cores only (as ``taskset -c``)."""
    if cold or os.environ.get("ABLATE_TESTS_COLD") == "1":
        return subprocess.run([str(BIN / script), *args], cwd=cwd, env=env or cli_env(), text=True,
                              capture_output=True, timeout=timeout,
                              preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
    return _warm_cli().run(script, args, cwd, env or cli_env(), timeout, cpus=cpus)


def start_cli(args: list[str], cwd: Path, *, env: dict[str, str] | None = None, nice: int = 0,
              umask: int | None = None, cold: bool = False, cpus: list[int] | None = None,
              ) -> WarmProcess | subprocess.Popen:
    """Start ``ablate args`` from the warm interpreter without waiting: a :class:`subprocess.Popen`-like
    process in its own session (a terminal job: a test may stop it, or Ctrl-C its process group),
    stdout and stderr read by ``communicate``; ``nice``: at a lower CPU priority (its workers inherit it);
    ``cpus``: on those cores only (as ``taskset -c``). ``cold=True`` (or ``ABLATE_TESTS_COLD=1``): the
    console script itself, started by ``subprocess`` the same way (its command line then names its
    arguments, as ``/proc`` shows them)."""
    if cold or os.environ.get("ABLATE_TESTS_COLD") == "1":
        def preexec() -> None:
            as_a_terminal_job()
            os.nice(nice)
            if cpus:
                os.sched_setaffinity(0, cpus)

        return subprocess.Popen([str(BIN / "ablate"), *args], cwd=cwd, env=env or cli_env(), text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                preexec_fn=preexec, umask=-1 if umask is None else umask)
    return _warm_cli().popen("ablate", args, cwd, env or cli_env(), nice=nice, umask=umask, cpus=cpus)


def _warm_cli() -> WarmCli:
    global _warm
    if _warm is None:
        _warm = WarmCli(BIN, cli_env())
    return _warm


def pytest_collection_finish(session: pytest.Session) -> None:
    gc.freeze()


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _warm is not None:
        _warm.stop()


# The config `ablate` composes for overrides, in process (Hydra's compose API), and the tiny config's
# overrides: ablate.compose, shared with the package and scripts/. A test's own changes to TINY are
# named there, by key: tiny_overrides(*changes, without=keys).
compose_cfg = compose

#: what runs in process (a test calls run_job) changes in TINY: a smaller batch and sequence, one
#: untimed step, no memory accounting (tensor by tensor: slow), no logger, an evaluation every 2 steps
IN_PROCESS = ("task.batch_size=4", "task.seq_len=16", "measure.warmup_steps=1", "measure.memory=false", "logger=none",
              "eval.every=2")
#: what a sweep through the CLI changes in TINY: no logger, 6 steps (said, for the tests that leave out trainer=debug)
QUIET = ("trainer.max_steps=6", "logger=none")


def script_module(name: str):
    """``scripts/NAME.py`` as a module (the scripts are not a package): for tests that run a part of one."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # where its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def records(sweep_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(sweep_dir.rglob("result.json"))]


def leet_inspect(run_dir: str | Path, *flags: str) -> str:
    """``wandb leet inspect [flags] RUN_DIR``'s output. `wandb leet` is a Python front end (about 1.5 s
    of imports a call) that resolves the run's .wandb file and runs ``wandb-core leet inspect`` with
    it; the tests call wandb-core the same way (0.1 s), or `wandb leet` where wandb-core is missing."""
    from wandb.util import get_core_path

    run_dir = Path(run_dir).resolve()
    logs = sorted(run_dir.glob("*.wandb"))
    try:
        core = get_core_path()
    except Exception:  # noqa: BLE001 - no wandb-core binary: the front end finds its own
        core = None
    if core and len(logs) == 1:
        args = [core, "leet", "inspect", "--no-observability", *flags, "--run-file", str(logs[0]), str(run_dir.parent)]
    else:
        args = [str(BIN / "wandb"), "leet", "inspect", *flags, str(run_dir)]
    return subprocess.run(args, capture_output=True, text=True, check=True, timeout=60).stdout


def wandb_summary(run_dir: str | Path) -> dict:
    """What wandb logged for a run, read back from its offline files with `wandb leet inspect --summary`."""
    return json.loads(leet_inspect(run_dir, "--summary", "--json"))


def wandb_run_info(run_dir: str | Path) -> dict:
    """The run record of a run's .wandb log (name, group, job_type, config), via `wandb leet inspect`."""
    out = leet_inspect(run_dir, "--json")
    return next(json.loads(line)["run"] for line in out.splitlines() if '"type":"run"' in line)


# ---------------------------------------------------------------------------- the order of files
# `make test` gives each of its two workers whole files (--dist loadfile) in pytest-xdist's order: the
# files with the most tests first. A longest-first order (by each file's seconds, with
# --no-loadscope-reorder so that it holds) was measured against it on 2026-12-03, same commit, fresh
# clone: 977 s against 903 s of pytest, 28m40 against 25m35 of user CPU: the long files are the
# ones that start processes, and two of them at once on two cores cost more than a short tail.

# ---------------------------------------------------------------------------- the two tiers
# `make test` runs every test; `make test-fast` (pytest -m "not slow") leaves out the ones marked
# `slow`: end to end (they start a process: the ablate CLI, `wandb leet`, a script, DDP ranks, SLURM)
# or seconds long. The fast tier starts no process, and this guard proves it: for a test not marked
# slow, starting one fails the test with SLOW_HINT. It is on from the start of the test's setup
# (fixtures of every scope: a module-scoped fixture is set up inside the first test that uses it)
# through its body to the teardown of its function-scoped fixtures, and off for the teardown of
# wider fixtures (a fast test may be the last of a module whose slow tests used them).

SLOW_HINT = "this test starts a subprocess: mark it @pytest.mark.slow"
# exact harmless commands a library may run inside a fast test (argv tuples); none needed so far
ALLOWED_COMMANDS: frozenset[tuple[str, ...]] = frozenset()

_guard: pytest.MonkeyPatch | None = None  # set while a fast test is guarded
_violations: list[str] = []  # what the guarded test tried to start (kept for its report)


def _refuse(what: str, argv=None) -> bool:
    """Fail the guarded test for starting ``what``; True where the command is allowed (or no guard)."""
    if _guard is None:
        return True
    if argv is not None:
        argv = (argv,) if isinstance(argv, (str, bytes, os.PathLike)) else tuple(argv)
        if tuple(os.fsdecode(a) for a in argv) in ALLOWED_COMMANDS:
            return True
    message = f"{SLOW_HINT} (it started {what})"
    _violations.append(message)
    pytest.fail(message, pytrace=True)  # BaseException: no library's `except Exception` swallows it


def _start_guard() -> None:
    global _guard
    import _posixsubprocess

    if _guard is not None:
        return
    mp = pytest.MonkeyPatch()
    popen_init, system = subprocess.Popen.__init__, os.system

    def guarded_popen_init(self, args, *a, **kw):
        if _refuse(f"subprocess.Popen({args!r})", args):
            with _paused():  # an allowed command: its own fork/exec inside Popen too
                return popen_init(self, args, *a, **kw)

    def guarded_system(command):
        if _refuse(f"os.system({command!r})", ["/bin/sh", "-c", command]):
            with _paused():
                return system(command)

    def refusing(name, original):
        def guarded(*a, **kw):
            _refuse(f"{name}()")
            return original(*a, **kw)
        return guarded

    mp.setattr(subprocess.Popen, "__init__", guarded_popen_init)
    mp.setattr(os, "system", guarded_system)
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp"):  # multiprocessing, DataLoader workers
        if hasattr(os, name):
            mp.setattr(os, name, refusing(f"os.{name}", getattr(os, name)))
    mp.setattr(_posixsubprocess, "fork_exec", refusing("_posixsubprocess.fork_exec", _posixsubprocess.fork_exec))
    _guard = mp


def _stop_guard() -> None:
    global _guard
    if _guard is not None:
        _guard.undo()
        _guard = None


class _paused:
    def __enter__(self):
        self.guard = _guard
        _stop_guard()

    def __exit__(self, *exc):
        if self.guard is not None:
            _start_guard()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    if item.get_closest_marker("slow") is None:
        _start_guard()
    try:
        return (yield)
    except BaseException:
        _stop_guard()  # setup failed or skipped: no body follows
        raise


@pytest.fixture(autouse=True)
def _fast_tests_start_no_subprocess():
    """Keeps the guard (switched on by pytest_runtest_setup, before fixtures of every scope) through
    the test and its function-scoped fixtures (set up after this one, torn down before it)."""
    yield
    _stop_guard()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem):
    try:
        return (yield)
    finally:
        _stop_guard()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A refusal swallowed by a library (`except BaseException`, another thread) still fails the test."""
    report = yield
    if _violations:
        if report.passed:
            report.outcome = "failed"
            report.longrepr = "\n".join(dict.fromkeys(_violations))
        _violations.clear()
    return report


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models: one intra-op thread is fastest and immune to a busy machine."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def tiny() -> list[str]:
    """Overrides for a tiny, fast model: ablate.compose.TINY."""
    return list(TINY)


# ---------------------------------------------------------------------------- the built-in options
import ablate  # noqa: E402
from ablate.components import import_target  # noqa: E402
from ablate.resolvers import register_resolvers  # noqa: E402

register_resolvers()  # tests compose the config with Hydra's API, as `ablate` does after registering them

CONF = Path(ablate.__file__).resolve().parent / "conf"


def builtin_options(group: str) -> list[str]:
    """The built-in options of a config group (the YAML files of ``ablate/conf/<group>``)."""
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def builtin_node(group: str, name: str, **overrides) -> dict:
    """An option's YAML as a plain dict (interpolations dropped), with ``overrides`` on top."""
    from omegaconf import OmegaConf

    node = OmegaConf.to_container(OmegaConf.load(CONF / group / f"{name}.yaml"), resolve=False)
    node = {k: v for k, v in node.items() if not (isinstance(v, str) and v.startswith("${"))}
    return {**node, **overrides}


def builtin_target(group: str, name: str):
    """The class (or function) that implements a built-in option."""
    return import_target(builtin_node(group, name)["_target_"])
