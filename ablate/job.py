"""Where a job runs: its identity in its sweep and its share of the machine.

A :class:`Job` is built from Hydra's runtime config (:meth:`Job.from_hydra`): its directory,
overrides and group choices; its sweep and the sweep's plan (``sweep.json``, read once here); the
launcher that started it and, from that, how many of the sweep's jobs share its cores, its torch
threads and, under submitit's local executor, the machine's job slot it holds while it runs.

One process trains a job at a time: rank 0 holds an ``flock`` on the job directory's
:data:`JOB_LOCK` for the job's whole life (:meth:`Job.claim`), so a second launch into the same
directory skips a job that is training elsewhere instead of training it again. A joblib worker
stops (SIGTERM) when the process that launched it dies (:func:`stop_with_launcher`). A process
that imports this module ends through :func:`ablate.heap.quick_teardown`.
"""

from __future__ import annotations

import atexit
import functools
import os
import signal
import time
import warnings
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from ablate.config import CONFIG_GROUPS
from ablate.heap import quick_teardown
from ablate.launchers import launcher_kind, sweeper_kind
from ablate.record import JobEntry
from ablate.sweep import SweepPlan, job_variant, override_key


# Registered at import, so before the hooks of what a job starts later (wandb, Lightning), which
# run first: in `ablate` (its sweeper or single run imports this module) and in every job process
# (joblib, submitit), where the task function imports it. (Not in ablate.cli: a job process gets
# the task function by value and never imports that module.)
atexit.register(quick_teardown)

#: the lock file in a job directory, held by the process training the job (its pid, then its parent's)
JOB_LOCK = ".job.lock"
#: set by the sweeper in the process that launches a local parallel sweep: its pid
LAUNCHER_PID_ENV = "ABLATE_LAUNCHER_PID"

def env_int(name: str, low: int = 0) -> int | None:
    """The environment variable ``name`` as an integer >= ``low``; None when unset, and when it is
    malformed (then one warning names it and the form expected, and the value is not used)."""
    text = os.environ.get(name)
    if text is None or text.strip() == "":
        return None
    try:
        value = int(text.strip())
    except ValueError:
        value = None
    if value is None or value < low:
        warnings.warn(f"ignoring the environment's {name}={text!r}: expected an integer >= {low}", stacklevel=2)
        return None
    return value


def cpu_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # macOS
        return os.cpu_count() or 1


class Job:
    """What a job needs to know about where it runs; built from Hydra's runtime config."""

    def __init__(self, job_dir: Path, overrides: list[str], choices: dict[str, str],
                 sweep_dir: str | None, num: int | None, parallel_jobs: int | None = 1,
                 torch_threads: int | None = None, launcher: str | None = None,
                 sweep: SweepPlan | None = None, sweeper: str | None = None) -> None:
        self.dir, self.overrides, self.choices = job_dir, overrides, choices
        self.sweep_dir, self.num = sweep_dir, num
        self.sweep = sweep                  # the sweep's plan (sweep.json; None: a single run, or none written)
        self.sweeper = sweeper              # ablate | basic | another sweeper's name (None: a single run)
        self.parallel_jobs = parallel_jobs  # jobs of this sweep that may run at once on this job's cores (None: unknown)
        self.torch_threads = torch_threads  # this job's share of the cores (None: torch's default)
        self.launcher = launcher            # basic | joblib | submitit_local | submitit_slurm | ... (None: single run)
        self.cores = cpu_cores()
        self.started_at, self.slot_wait_s = time.time(), 0.0
        self.process_started_at = process_start_time()
        self._slot: Any = None              # the lock file of the machine's job slot this job holds
        self._lock: Any = None              # JOB_LOCK, open and locked while this process trains the job

    @classmethod
    def from_hydra(cls) -> "Job":
        """The job Hydra is running. In a multirun its torch threads follow its share of the cores:
        joblib's ``n_jobs`` processes share the machine; a submitit job gets ``cpus_per_task``
        (``SLURM_CPUS_PER_TASK`` under SLURM); submitit's local executor starts every job at once,
        so a local job first waits for one of the machine's ``cores // cpus_per_task`` job slots."""
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hc = HydraConfig.get()
        multirun = hc.mode == RunMode.MULTIRUN
        choices = {g: hc.runtime.choices.get(g) for g in CONFIG_GROUPS if g in hc.runtime.choices}
        launcher, parallel, threads, slots, sweep = None, 1, None, 0, None
        if multirun:
            sweep = SweepPlan.read(hc.sweep.dir)
            launcher, parallel, threads, slots = cls._cpu_share(hc.launcher, len(sweep.jobs) if sweep else None)
        job = cls(Path(hc.runtime.output_dir), list(hc.overrides.task), choices,
                  hc.sweep.dir if multirun else None, hc.job.num if multirun else None, parallel, threads, launcher,
                  sweep, sweeper_kind(str(hc.sweeper.get("_target_", ""))) if multirun else None)
        if launcher == "joblib":
            stop_with_launcher()
        if slots:
            job._hold_slot(slots)
        return job

    @staticmethod
    def _cpu_share(launcher: Any, n_jobs_swept: int | None) -> tuple[str, int | None, int | None, int]:
        """``(launcher, parallel jobs, torch threads, job slots)`` of a multirun job: its launcher's
        name, how many of the sweep's jobs may run at once on its cores, its torch threads (None:
        torch's default) and how many job slots the machine has for it to wait for (0: no waiting)."""
        kind = launcher_kind(str(launcher.get("_target_", "")))
        cores = cpu_cores()
        n_jobs_swept = n_jobs_swept or cores * 1024  # unknown (no sweep.json): no cap

        if kind == "joblib":
            n_jobs = int(launcher.get("n_jobs") or 1)
            parallel = min(n_jobs_swept, max(1, cores + 1 + n_jobs) if n_jobs < 0 else n_jobs)  # joblib's rule
            return kind, parallel, max(1, cores // parallel) if parallel > 1 else None, 0
        if kind == "submitit_local":
            cpus = launcher.get("cpus_per_task")
            if cpus:  # the user's share per job: cores // cpus_per_task jobs at once
                threads = min(int(cpus), cores)
                slots = max(1, cores // threads)
                return kind, min(slots, n_jobs_swept), threads, slots
            parallel = min(cores, n_jobs_swept)  # default: one core per job, the jobs' share if fewer
            return kind, parallel, max(1, cores // parallel), cores
        if kind == "submitit_slurm":  # SLURM allocates each job its own cpus_per_task cores
            cpus = env_int("SLURM_CPUS_PER_TASK", low=1) or launcher.get("cpus_per_task")
            return kind, 1, int(cpus) if cpus else None, 0
        if kind == "basic":  # one job after the other, in this process
            return kind, 1, None, 0
        return kind, None, None, 0

    def _hold_slot(self, slots: int, poll_s: float = 0.2) -> None:
        """Wait until one of the sweep's ``slots`` job slots on this machine is free, then hold it
        until this job ends (an ``flock`` on ``<sweep>/.submitit/slots/<i>.lock``, released when
        the process exits however it ends)."""
        try:
            import fcntl
        except ImportError:  # no flock (Windows, where submitit does not run either)
            return
        folder = Path(str(self.sweep_dir)) / ".submitit" / "slots"
        folder.mkdir(parents=True, exist_ok=True)
        waiting = time.monotonic()
        while True:
            for i in range(slots):
                lock = open(folder / f"{i}.lock", "a")  # noqa: SIM115 - held open while the job runs
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    lock.close()
                    continue
                self._slot, self.slot_wait_s, self.started_at = lock, time.monotonic() - waiting, time.time()
                return
            time.sleep(poll_s)

    def release_slot(self) -> None:
        """Give this job's slot back (the process's exit would, but only after the interpreter's
        teardown: about a second with torch and Lightning loaded)."""
        if self._slot is not None:
            self._slot.close()  # closing the file releases its flock
            self._slot = None

    def claim(self) -> bool:
        """Take this job's lock (:data:`JOB_LOCK`) for as long as this process trains it; False when
        another live process holds it (that process is training the job)."""
        try:
            import fcntl
        except ImportError:  # no flock (Windows): nothing to lock with
            return True
        self.dir.mkdir(parents=True, exist_ok=True)
        lock = open(self.dir / JOB_LOCK, "a+")  # noqa: SIM115 - held open while the job runs
        for attempt in range(3):  # lock_holder() takes the lock for an instant to look: look again
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if attempt == 2:
                    lock.close()
                    return False
                time.sleep(0.1)
            except OSError:  # a filesystem without locks: train unlocked, as before there were locks
                lock.close()
                return True
        lock.truncate(0)
        # who trains it, and the sweep process that launched it (under submitit_local a helper
        # process stands between them, so the launcher is named, not only the parent)
        launcher = os.environ.get(LAUNCHER_PID_ENV, "")
        lock.write(f"{os.getpid()} {launcher if launcher.isdigit() else os.getppid()}\n")
        lock.flush()
        self._lock = lock
        return True

    def release(self) -> None:
        """Give back this job's lock and its machine slot (the process's exit would, but a joblib
        worker goes on to its next job, and a slot's exit waits for the interpreter's teardown)."""
        if self._lock is not None:
            self._lock.close()  # closing the file releases its flock
            self._lock = None
        self.release_slot()

    def record_fields(self) -> JobEntry:
        """The record's ``job`` entry: where and how this job ran."""
        return JobEntry(num=self.num, dir=str(self.dir), sweep_dir=self.sweep_dir, launcher=self.launcher,
                        started_at=self.started_at, slot_wait_s=round(self.slot_wait_s, 3),
                        process_started_at=self.process_started_at, slurm=slurm_fields())

    @property
    def name(self) -> str:
        return job_name(self.overrides)

    @functools.cached_property
    def variant(self) -> str:
        """This job's variant (``ablate.sweep``), e.g. ``qkv_sharing=qk_shared``: the name its table
        row and its ``bench.json`` entry have too. The swept keys come from the sweep's plan; a
        single run's variant (or a job of a sweep without one) is all its overrides but the seed
        and experiment."""
        return job_variant(self.overrides, self.sweep.swept if self.sweep else None) or "defaults"


def job_name(overrides: Any) -> str:
    """A job's name on the terminal and in wandb: its overrides but the experiment, comma-joined."""
    return ",".join(o for o in overrides or [] if override_key(o) != "experiment") or "defaults"


def lock_holder(job_dir: str | Path) -> tuple[int, int] | None:
    """``(pid, launcher pid)`` of the live process training the job in ``job_dir`` (holding its
    :data:`JOB_LOCK`): the launcher is the sweep process that started it (a parallel sweep's,
    :data:`LAUNCHER_PID_ENV`), else its parent; None when no process holds it."""
    try:
        import fcntl
    except ImportError:
        return None
    path = Path(job_dir) / JOB_LOCK
    try:
        with open(path) as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                pid, parent = (int(x) for x in (path.read_text().split() + ["0", "0"])[:2])
                return pid, parent
            return None
    except (OSError, ValueError):
        return None


def stop_with_launcher() -> None:
    """In a joblib worker (a process of the launcher's, which runs job after job): ask the OS to
    send this process SIGTERM when its launcher dies (Linux's ``PR_SET_PDEATHSIG``), so a killed
    sweep leaves no worker training the remaining jobs; the job then stops like any stopped job.
    A launcher that is already gone stops the worker here."""
    launcher = os.environ.get(LAUNCHER_PID_ENV)
    if not launcher or launcher == str(os.getpid()):  # not a worker (joblib with n_jobs=1 runs jobs in-process)
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the launcher's own stop handling still applies
        pass
    if launcher_gone():
        raise SystemExit(f"ablate: the sweep that launched this job (pid {launcher}) has ended; job not started")


def launcher_gone() -> bool:
    """Whether this process is a worker of a local parallel sweep whose launching process has died."""
    launcher = os.environ.get(LAUNCHER_PID_ENV)
    return bool(launcher) and launcher != str(os.getpid()) and str(os.getppid()) != launcher


def process_start_time() -> float | None:
    """When this process started (seconds since the epoch; None where the OS does not say): a
    job's ``started_at`` minus this is its start-up (interpreter, imports, Hydra) in a process of
    its own (submitit, SLURM), and includes the earlier jobs where a process runs several."""
    try:
        stat = Path(f"/proc/{os.getpid()}/stat").read_text()
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22: start time, clock ticks after boot
        booted = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                      if line.startswith("btime "))
        return booted + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):  # not Linux
        return None


def slurm_fields() -> dict[str, Any] | None:
    """The SLURM job this process runs in (None outside SLURM): ids, node, CPUs, partition, requeues."""
    env = os.environ
    if "SLURM_JOB_ID" not in env:
        return None
    return {"job_id": env["SLURM_JOB_ID"], "array_job_id": env.get("SLURM_ARRAY_JOB_ID"),
            "array_task_id": env.get("SLURM_ARRAY_TASK_ID"), "node": env.get("SLURMD_NODENAME"),
            "partition": env.get("SLURM_JOB_PARTITION"),
            "cpus_per_task": env_int("SLURM_CPUS_PER_TASK", low=1),
            "restart_count": env_int("SLURM_RESTART_COUNT") or 0}  # unset until the first requeue
