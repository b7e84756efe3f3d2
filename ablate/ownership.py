"""A sweep directory belongs to one sweep definition.

Relaunching the same command into a sweep directory resumes its sweep; a command that defines
other jobs there is refused (:class:`ablate.planner.SweepError`) unless ``--redefine`` says to run
it there (its table then uses only its own jobs). The check and the recording of the plan
(``sweep.json``) are one step under a lock on the directory (:func:`claim_directory`), so that of two
sweeps started into one directory at once, one records first and the other finds its plan.
``ablate --plan`` says beforehand what a launch would meet (:func:`directory_conflict`).
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from ablate.planner import SweepError
from ablate.sweep import SweepPlan, same_jobs

#: the lock file in a sweep directory, held while a sweep checks the directory and records its plan there
SWEEP_LOCK = ".sweep.lock"


def claim_directory(sweep_dir: str | Path, plan: SweepPlan, sweeper: str = "ablate", redefine: bool = False,
                    also: Callable[[], None] | None = None) -> None:
    """Check ``sweep_dir`` (:func:`check_directory`) and record ``plan`` there (``sweep.json``, after
    ``also``: more of the sweep's files) as one step, under :func:`directory_lock`: of two sweeps
    started there at once, one records first and the other then finds its plan, and is refused
    when it defines other jobs. ``sweeper`` is the sweeper that runs the sweep (only ``ablate``'s
    offers ``--redefine``). Raises SweepError; OSError when the directory cannot be written."""
    sweep_dir = Path(sweep_dir)
    with directory_lock(sweep_dir):
        unreadable = SweepPlan.unreadable(sweep_dir)
        if unreadable and not redefine:
            raise SweepError(f"{unreadable}: it says which sweep {sweep_dir} holds, so nothing can be resumed "
                             "or checked there. Nothing was trained.\n  Restore or remove it, pick another "
                             "hydra.sweep.dir" + (", or add --redefine to run this sweep there"
                                                  if sweeper == "ablate" else ""))
        check_directory(sweep_dir, plan, sweeper, redefine=redefine)
        if also is not None:
            also()
        plan.write(sweep_dir)


def check_directory(sweep_dir: str | Path, plan: SweepPlan, sweeper: str = "ablate", redefine: bool = False) -> None:
    """Relaunching the same definition into ``sweep_dir`` resumes it; another set of jobs there is
    refused (SweepError) unless ``redefine``."""
    note = directory_conflict(sweep_dir, plan)
    if note and not redefine:
        previous = SweepPlan.read(sweep_dir)
        assert previous is not None
        raise SweepError(
            f"{sweep_dir} holds another sweep ({len(previous.definition)} jobs, e.g. "
            f"{' '.join(previous.definition[0]) or '(defaults)'}); this command defines "
            f"{len(plan.definition)} other jobs (e.g. {' '.join(plan.definition[0]) or '(defaults)'}). "
            "Nothing was trained.\n  Relaunch the same overrides to resume that sweep, pick another "
            "hydra.sweep.dir, or add --redefine to run this definition there (its table then uses only "
            "its own jobs" + ("" if sweeper == "ablate" else "; --redefine needs hydra/sweeper=ablate")
            + ").")


@contextmanager
def directory_lock(sweep_dir: str | Path) -> Iterator[None]:
    """The sweep directory (made if need be), held for as long as the ``with`` block runs: an ``flock``
    on its :data:`SWEEP_LOCK`, which another sweep's check and record waits for (released however
    the process ends). Where there is no ``flock`` (Windows; a filesystem without locks), unlocked."""
    sweep_dir = Path(sweep_dir)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    with open(sweep_dir / SWEEP_LOCK, "a") as lock:
        try:
            import fcntl

            fcntl.flock(lock, fcntl.LOCK_EX)
        except (ImportError, OSError):  # nothing to lock with: check and record unlocked, as before
            pass
        yield  # closing the file releases the lock


def directory_conflict(sweep_dir: str | Path, plan: SweepPlan) -> str | None:
    """A note when ``sweep_dir`` holds a sweep of another definition (launching there would be
    refused without ``--redefine``); None when it holds none or the same one."""
    previous = SweepPlan.read(sweep_dir)
    if previous is None or same_jobs(previous.definition, plan.definition):
        return None
    return (f"{sweep_dir} holds another sweep ({len(previous.definition)} jobs): launching this one there would "
            "be refused; add --redefine, or pick another hydra.sweep.dir")
