"""Two launches into one sweep directory, and stopping a joblib sweep: real `ablate` processes.

One scenario, three launches of the same 2-job joblib sweep (2 workers), so that its processes are
paid for once: the first trains both jobs; a second launch meanwhile finds both locked, trains
nothing and starts no worker; SIGTERM to the first launching process stops its workers' jobs
(records ``interrupted``, no worker left training); a relaunch resumes them, and Ctrl-C stops it
with exit code 130 and no traceback. A job that starts while another process trains it (two
launches at once) finds that for itself: in process, the one test here not marked slow.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import records, run_cli, start_cli

from ablate.job import Job, lock_holder


def _processes_in(where: Path) -> list[int]:
    """The live processes whose working directory is ``where`` (a sweep's launcher and its workers)."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and int(proc.name) != os.getpid() and Path(os.readlink(proc / "cwd")) == where:
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


def _wait(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _modified(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:  # Lightning's CSVLogger starts a resumed job's file afresh
        return 0.0


def _launch(args: list[str], cwd: Path, *, nice: int = 0, cold: bool = False) -> subprocess.Popen:
    """``ablate args`` in its own session, as a terminal job; ``nice``: at a lower CPU priority (its
    workers inherit it), for a sweep that only has to keep training while the test's other commands run;
    ``cold``: the console script itself (its command line names the sweep, which ``_processes_of`` reads),
    not a process forked from the warm interpreter."""
    return start_cli(args, cwd, nice=nice, cold=cold)


@pytest.fixture
def workdir(tmp_path: Path):
    yield tmp_path
    for pid in _processes_in(tmp_path):  # whatever a failed test left running (orphaned workers)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.slow  # real `ablate` processes
@pytest.mark.timeout(600)
@pytest.mark.skipif(not Path("/proc/self/cwd").exists(), reason="finds processes through /proc (Linux)")
def test_one_process_per_job_and_a_stopped_joblib_sweep_leaves_no_worker(workdir: Path, tiny: list[str]) -> None:
    sweep = workdir / "sweep"
    args = ["-m", "seed=0,1", *tiny, "trainer.max_steps=1000000", "logger=csv", "hydra/launcher=joblib",
            "hydra.launcher.n_jobs=2", f"hydra.sweep.dir={sweep}"]
    first = _launch(args, workdir, nice=19)  # the second launch below is not slowed by its training
    # logger=csv writes metrics.csv after 100 logged steps: both workers are training then
    _wait(lambda: len(list(sweep.glob("*/metrics.csv"))) == 2 or first.poll() is not None, 240, "two jobs training")
    running = {d: lock_holder(d) for d in sweep.glob("*seed=*")}

    # the same command again, while they train: both jobs are skipped, none is trained twice, and
    # no worker is started only to find that out (the sweeper sees both locks; joblib is not called)
    second = run_cli(args, workdir, timeout=180)
    assert second.returncode == 0, second.stderr[-3000:]
    assert second.stdout.count("being trained by process") == 2, second.stdout[-3000:]
    assert "2 job(s) of this sweep are being trained by another process" in second.stdout
    assert "Launching jobs" not in second.stdout + second.stderr, second.stdout[-3000:]
    assert records(sweep) == [] and {d: lock_holder(d) for d in running} == running

    os.kill(first.pid, signal.SIGTERM)  # the launching process only, as `kill PID` does
    out, err = first.communicate(timeout=300)
    assert first.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "stopped by SIGTERM" in err and "Relaunch the same command" in err, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    # an orphaned worker would go on training: none is left once the workers have exited
    _wait(lambda: _processes_in(workdir) == [], 15, "no worker going on training after its sweep was stopped")
    recs = records(sweep)
    assert [r["status"] for r in recs] == ["interrupted", "interrupted"], [r["error"] for r in recs]
    assert all("checkpoint saved" in r["error"] for r in recs)

    # a relaunch resumes both from their checkpoints; Ctrl-C (SIGINT to the terminal's process group)
    relaunch, started = _launch(args, workdir), time.time()
    _wait(lambda: all(_modified(d / "metrics.csv") > started for d in running) or relaunch.poll() is not None,
          240, "the relaunched jobs training")
    os.killpg(relaunch.pid, signal.SIGINT)
    out, err = relaunch.communicate(timeout=300)
    assert relaunch.returncode == 130, err[-3000:]
    assert "interrupted (Ctrl-C)" in err and "Traceback" not in err, err[-3000:]
    recs = [json.loads((d / "result.json").read_text()) for d in running]
    assert all(r["status"] == "interrupted" and r["metrics"]["resumed_from_step"] > 0 for r in recs), recs
    _wait(lambda: _processes_in(workdir) == [], 15, "no worker left after Ctrl-C")


def _processes_of(sweep: Path) -> list[int]:
    """The live processes whose command line names ``sweep`` (a sweep's launcher and its jobs)."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(sweep) in (proc / "cmdline").read_bytes().decode(errors="replace"):
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.skipif(not Path("/proc/self/cwd").exists(), reason="finds processes through /proc (Linux)")
def test_a_stopped_submitit_local_sweep_stops_its_jobs(workdir: Path, tiny: list[str]) -> None:
    """SIGTERM to the process that launched a submitit_local sweep reaches its running jobs (whose
    parent is submitit's helper process, not the launcher): each records interrupted, none is left."""
    sweep = workdir / "sweep"
    first = _launch(["-m", "seed=0,1", *tiny, "trainer.max_steps=1000000", "logger=csv",
                     "hydra/launcher=submitit_local", f"hydra.sweep.dir={sweep}"], workdir, cold=True)
    try:
        _wait(lambda: len(list(sweep.glob("*/metrics.csv"))) == 2 or first.poll() is not None, 200, "two jobs training")
        os.kill(first.pid, signal.SIGTERM)
        out, err = first.communicate(timeout=120)
        assert first.returncode == 128 + signal.SIGTERM, err[-3000:]
        assert "Traceback" not in err, err[-3000:]
        # an orphaned job would go on training: none is left once the jobs have exited
        _wait(lambda: _processes_of(sweep) == [], 15, "no job going on training after its sweep was stopped")
        recs = records(sweep)
        assert [r["status"] for r in recs] == ["interrupted", "interrupted"], [r["error"] for r in recs]
    finally:
        for pid in _processes_of(sweep):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_sweeps_started_into_one_directory_at_once_one_is_refused(workdir: Path, tiny: list[str]) -> None:
    """Two sweeps of other jobs started together into one directory: one records its plan and trains,
    the other exits 2 naming the other definition, before training anything (both were accepted in 1
    of 3 tries when the check and the record were two steps)."""
    sweep = workdir / "sweep"
    common = [*tiny, "trainer.max_steps=2", "logger=none", f"hydra.sweep.dir={sweep}"]
    both = [_launch(["-m", "seed=0", *common], workdir), _launch(["-m", "seed=1", *common], workdir)]
    outcome = [(p.returncode, out, err) for p in both for out, err in [p.communicate(timeout=240)]]
    codes = sorted(code for code, _, _ in outcome)
    assert codes == [0, 2], [err[-2000:] for _, _, err in outcome]
    lost = next(err for code, _, err in outcome if code == 2)
    assert "holds another sweep" in lost and "Traceback" not in lost, lost[-2000:]
    seed = json.loads((sweep / "sweep.json").read_text())["definition"][0]
    assert [r["overrides"] for r in records(sweep)] == [seed]  # the winner's one job, nothing of the other's


def test_a_job_that_another_process_trains_finds_it_for_itself(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The sweeper starts no process for a stage whose every job another process trains (above); a
    job that starts anyway (two launches at once; a stage with other jobs to run) checks its lock
    itself (``Job.claim``, an flock: a second open file of it is refused, in one process too): it
    trains nothing, writes nothing, and names the process that holds it."""
    from ablate.compose import compose, tiny_overrides
    from ablate.run import nothing_to_do, run_job

    cfg = compose(tiny_overrides("logger=none"))
    job_dir = tmp_path / "job"
    training = Job(job_dir, ["seed=0"], {}, None, None)
    assert nothing_to_do(cfg, training) is None  # no record, no lock: it would train
    assert training.claim()
    try:
        again = Job(job_dir, ["seed=0"], {}, None, None)
        said = f"being trained by process {os.getpid()} (it holds {job_dir / '.job.lock'}); skipped here"
        assert said in (nothing_to_do(cfg, again) or "")  # what the sweeper prints for it
        record = run_job(cfg, again)
        assert record.status == "running" and not (job_dir / "result.json").exists(), record
        assert said in capsys.readouterr().out
    finally:
        training.release()
    assert nothing_to_do(cfg, Job(job_dir, ["seed=0"], {}, None, None)) is None  # released: it would train
