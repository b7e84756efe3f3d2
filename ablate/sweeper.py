"""``hydra/sweeper=ablate`` (the default of every ``ablate -m``): the one owner of a sweep.

``run_sweep`` is the sweeper's ``sweep``. In this order, in the process that launched the sweep:

1. plan once (``ablate.planner.Planner``): the product of the swept values, design rows, budget
   steps, tuning stages; every job composed and validated;
2. ``hydra.sweeper.plan=true`` (``ablate --plan``): print the plan (``ablate.preview``) and stop;
3. check the sweep directory and record the plan there (``sweep.json``), as one step under the
   directory's lock (two sweeps started there at once: one is recorded, the other then checked):
   another definition there is refused unless ``hydra.sweeper.redefine=true`` (``ablate --redefine``);
4. launch the plan through whichever launcher is configured: the
   tuning runs as a first stage, then, once each variant's learning rate is chosen on the
   validation split, the final runs; with ``finetune.tasks``, then every fine-tune of the
   pretraining jobs that ended ok (``ablate.finetune``).

A sweep that cannot run exits 2 naming why, before anything is written or trained; so does a
directory whose ``sweep.json`` cannot be read (without it the directory's sweep is unknown). A
sweep that is stopped (Ctrl-C, SIGTERM, SIGHUP, SIGUSR1/2) or cannot write (a full disk) ends with
one message and a non-zero exit: 130 for Ctrl-C, 128 + the signal, 1 for a write error. Under
joblib the launching process first stops its workers' running jobs (each records
``interrupted``; :class:`_StopWorkers`), so none goes on training as an orphan. Why a sweeper
and not a callback: only a sweeper may launch jobs, only it sees the first stage end before the
second starts (with every launcher), and its errors propagate (Hydra turns a callback's into a
warning). A relaunch into the same directory resumes: finished jobs are skipped by the jobs
themselves (``ablate.run``), so the tuning runs are not repeated and the same rates are chosen; a
stage in which no job has anything to do (each done already, or being trained by another process)
is not launched at all (:class:`_Stages`): no worker or job process starts only to say so.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from ablate.job import LAUNCHER_PID_ENV, job_name, lock_holder
from ablate.launchers import launcher_kind
from ablate.loggers import uses_wandb
from ablate.finetune import from_job, pretrained_problem
from ablate.finetune_plan import finetune_stage
from ablate.planner import Planner, SweepError, launcher_compose, share_compositions
from ablate.ownership import claim_directory
from ablate.tuning import choose_lr, final_stage, lr_text
from ablate.record import load_records, read_record
from ablate.stops import STOP_SIGNALS, SignalHandlers
from ablate.sweep import SweepPlan, job_signature
from ablate.seed_rounds import round_jobs, round_line


def run_sweep(sweeper: Any, arguments: list[str]) -> list[Any]:
    """``Sweeper.sweep`` of ``hydra/sweeper=ablate`` (``hydra_plugins.ablate_sweeper``)."""
    config = sweeper.config
    sweep_dir = Path(config.hydra.sweep.dir)
    launcher = launcher_kind(str(config.hydra.launcher.get("_target_", "")))
    # the basic launcher composes each job in this process: it is handed the plan's composition
    loader = share_compositions(sweeper.launcher) if launcher == "basic" else None
    planner = Planner(config, launcher_compose(config, loader), arguments=list(arguments))
    try:
        plan = planner.plan()
        if sweeper.plan:
            from ablate.job import process_start_time
            from ablate.preview import preview, render

            started = process_start_time()  # the start-up and planning the sweep will repeat
            print(render(preview(planner, plan, sweep_dir, setup_s=time.time() - started if started else 0.0)))
            return []
        _record(sweep_dir, config, plan, planner, redefine=sweeper.redefine)
    except SweepError as error:
        print(f"ablate: {error}", file=sys.stderr)
        sys.exit(2)
    from ablate.pace import SweepEstimate
    from ablate.preview import start

    line, estimate = start(planner, plan, sweep_dir)  # earlier runs' step times only: nothing is timed
    print(line, flush=True)
    if estimate is not None:
        estimate.write(sweep_dir)  # the jobs check their steps against it (ablate.pace)
    else:
        SweepEstimate.clear(sweep_dir)
    if uses_wandb(config.logger) and launcher in ("joblib", "submitit_local"):
        from ablate.tracking import share_service

        share_service()  # the job processes on this machine log through this process's wandb service
    try:
        with _StopWorkers(sweep_dir, active=launcher in ("joblib", "submitit_local")), \
                _JobLines(sweep_dir, active=launcher.startswith("submitit")):
            return _run_stages(sweeper, plan, sweep_dir, planner)
    except KeyboardInterrupt:
        _stopped("interrupted (Ctrl-C)", 130)
    except SystemExit as stop:
        if isinstance(stop.code, int) and stop.code - 128 in set(signal.Signals):  # a job stopped by a signal
            _stopped(f"stopped by {signal.Signals(stop.code - 128).name}", stop.code)
        raise
    except OSError as error:  # Hydra's own files of the next job, a worker's: a full disk, a lost mount
        print(f"ablate: the sweep stopped: {type(error).__name__}: {error}. Jobs without an ok record run "
              "when the same command is relaunched (free space first if the disk is full).", file=sys.stderr)
        sys.exit(1)


def _stopped(why: str, code: int) -> None:
    print(f"ablate: the sweep {why}; its running jobs recorded 'interrupted', no other job started. Relaunch "
          "the same command to resume.", file=sys.stderr)
    sys.exit(code)


def _run_stages(sweeper: Any, plan: SweepPlan, sweep_dir: Path, planner: Planner) -> list[Any]:
    """Launch the plan: a tuned sweep's tuning runs, the learning rates chosen, then its final runs;
    then a fine-tune stage's jobs."""
    stage = _Stages(sweeper, planner, sweep_dir)
    returns = [stage.launch(plan.jobs, 0)]
    chosen = None
    if plan.tune is not None:
        chosen = _tuned_stage(stage, plan, sweep_dir, returns)
    if plan.rounds is not None:
        _seed_rounds(stage, plan, sweep_dir, chosen, returns)
    if plan.finetune is not None:
        _finetune_stage(stage, plan, sweep_dir, chosen, returns)
    return returns


def _finetune_stage(stage: "_Stages", plan: SweepPlan, sweep_dir: Path, chosen: dict[str, float] | None,
                    returns: list[Any]) -> None:
    """After the pretraining: every fine-tune of a pretraining job that ended ok with its weights
    (``finetune_plan.finetune_stage``, the list --plan showed); the others wait for a relaunch, said in one line."""
    todo, waiting = [], {}
    for job in finetune_stage(plan, chosen):
        name = from_job(job)
        problem = waiting.get(name) or _pretraining_problem(sweep_dir / name)
        if problem is None:
            todo.append(job)
        else:
            waiting[name] = problem
    if waiting:
        print(f"[ablate] {len(waiting)} pretraining job(s) did not leave weights to fine-tune from, so their "
              f"fine-tunes wait for a relaunch of the same command: "
              + "; ".join(f"{name}: {why}" for name, why in waiting.items()), flush=True)
    first = list(plan.jobs)
    plan.jobs = first + todo
    plan.write(sweep_dir)
    if todo:
        print(f"[ablate] pretraining done; {len(todo)} fine-tune job(s) on {', '.join(plan.finetune.tasks)} "
              f"({plan.finetune.mode}, {plan.finetune.steps} steps each)", flush=True)
        returns.append(stage.launch(todo, len(first)))


def _pretraining_problem(job_dir: Path) -> str | None:
    record = read_record(job_dir)
    if record is None or not record.ok:
        return "no ok record" if record is None else f"it ended {record.status}"
    return pretrained_problem(job_dir, record.finetune.sha256 if record.finetune else None)


def _tuned_stage(stage: "_Stages", plan: SweepPlan, sweep_dir: Path, returns: list[Any]) -> dict[str, float]:
    """A tuned sweep's second stage: each variant's rate chosen on its tuning runs, then its final runs."""
    chosen, scores = choose_lr(load_records(sweep_dir), plan)
    first = list(plan.jobs)
    todo = final_stage(plan, chosen)  # the list --plan showed, at the rates now chosen
    if plan.rounds is not None:  # seed=auto: the first round's final runs; the others as they are needed
        todo = round_jobs(plan, todo, 1)
    plan.jobs = first + todo
    plan.tune.chosen, plan.tune.scores = chosen, scores
    plan.write(sweep_dir)
    print("[ablate] learning rate chosen per variant on the validation split: "
          + "; ".join(f"{variant or 'defaults'}: {lr_text(lr)}" for variant, lr in chosen.items()))
    if todo:
        returns.append(stage.launch(todo, len(first)))
    return chosen


def _seed_rounds(stage: "_Stages", plan: SweepPlan, sweep_dir: Path, chosen: dict[str, float] | None,
                 returns: list[Any]) -> None:
    """``seed=auto``: after each round every comparison with its baseline is decided on the records
    (``ablate.report.round_state``, the table's own verdicts); the next round's seeds run for the
    variants still undecided and their baselines (rows stay paired by seed), until none is or the cap's
    round has run. A relaunch replays the rounds from the records: each round's finished jobs are
    found done, so it resumes where the sweep stopped, mid-round included."""
    from ablate.report import load_sweep, round_state

    rounds = plan.rounds
    looks = rounds.looks()
    pool = final_stage(plan, chosen) if plan.tune is not None else plan.definition
    while True:
        state = round_state(load_sweep(sweep_dir))
        rounds.verdicts = {variant: {"verdict": v.verdict, "n": v.n, "round": v.round}
                           for variant, v in state.verdicts.items()}
        undecided = [variant for variant, v in state.verdicts.items() if v.verdict == "undecided"]
        print(round_line(rounds, state.verdicts), flush=True)
        if not undecided or rounds.run >= len(looks):
            plan.write(sweep_dir)
            return
        need = set(undecided) | {state.baseline_of[variant] for variant in undecided}
        rounds.run += 1
        launched = {job_signature(job) for job in plan.jobs}
        todo = [job for job in round_jobs(plan, pool, rounds.run) if plan.variant(job) in need]
        first = len(plan.jobs)
        plan.jobs = plan.jobs + [job for job in todo if job_signature(job) not in launched]
        plan.write(sweep_dir)
        low, high = looks[rounds.run - 2], looks[rounds.run - 1]
        print(f"[ablate] round {rounds.run} of at most {len(looks)}: seeds {low}-{high - 1} for the {len(undecided)} "
              f"undecided comparison(s) and their baseline(s): {len(todo)} job(s)", flush=True)
        if todo:
            returns.append(stage.launch(todo, first))


def _record(sweep_dir: Path, config: Any, plan: SweepPlan, planner: Planner, redefine: bool) -> None:
    """The sweep directory checked (another definition there is refused unless ``redefine``; so is an
    unreadable ``sweep.json``) and its ``multirun.yaml`` and ``sweep.json`` written, before any job
    starts: one step under the directory's lock (``ownership.claim_directory``), so that of two sweeps
    started into one directory at once, only one is recorded there."""
    try:
        claim_directory(sweep_dir, plan, planner.sweeper, redefine=redefine,
                        also=lambda: OmegaConf.save(config, sweep_dir / "multirun.yaml"))
    except OSError as error:
        raise SweepError(f"the sweep could not run: cannot write its plan in {sweep_dir} "
                         f"({type(error).__name__}: {error}); nothing was trained") from error


class _Stages:
    """Launches a sweep's stages through the configured launcher."""

    def __init__(self, sweeper: Any, planner: Planner, sweep_dir: Path) -> None:
        self.sweeper, self.planner, self.sweep_dir = sweeper, planner, sweep_dir

    def launch(self, jobs: list[list[str]], first_index: int) -> list[Any]:
        """One stage through the configured launcher (``hydra.sweeper.max_batch_size`` splits it).
        A stage with nothing to do (every job done already or being trained by another process: a
        relaunch of a finished sweep, the same command run twice) starts no job process, under any
        launcher: each job's line is printed here, as the job would have printed it."""
        idle = self.nothing_to_do(jobs)
        if idle is not None:
            print("\n".join(idle), flush=True)
            return []
        sweeper, results = self.sweeper, []
        # No ``validate_batch_is_legal`` (the basic sweeper's composition of every job, one more per job
        # before any starts): the planner has composed and validated each of them already.
        for batch in sweeper.split_overrides_to_chunks(jobs, sweeper.max_batch_size):  # the basic sweeper's own
            results += list(sweeper.launcher.launch(batch, initial_job_idx=first_index + len(results)))
        for result in results:
            _ = result.return_value  # raises for a job that raised (Hydra's basic sweeper does the same)
        return results

    def nothing_to_do(self, jobs: list[list[str]]) -> list[str] | None:
        """Each job's line where none of ``jobs`` would train if it started now (``run.nothing_to_do``,
        the job's own first check, in the directory Hydra gives it); None as soon as one would.
        Only a whole stage is left out: a launcher numbers the jobs it is given from the first."""
        from ablate.job import Job
        from ablate.jobdir import JOB_SUBDIR, job_dir_name
        from ablate.run import nothing_to_do

        if OmegaConf.to_container(self.sweeper.config.hydra.sweep, resolve=False).get("subdir") != JOB_SUBDIR:
            return None  # job directories named otherwise: each job finds its own
        lines = []
        for overrides in jobs:
            job = Job(self.sweep_dir / job_dir_name(overrides), list(overrides), {}, str(self.sweep_dir), None)
            line = nothing_to_do(self.planner.compose(list(overrides)), job)
            if line is None:
                return None
            lines.append(line)
        return lines or None


class _JobLines:
    """Under submitit a job's output goes to its log file, so the launching process prints each job's
    line (``run.job_line``) as its record appears, and a job's line on its pace against the sweep's
    estimate (``ablate.pace``) as it is noted; under the other launchers the job prints them."""

    def __init__(self, sweep_dir: Path, active: bool, poll_s: float = 1.0) -> None:
        self.sweep_dir, self.active, self.poll_s = sweep_dir.resolve(), active, poll_s
        self._seen: dict[Path, int] = {}
        self._said: str | None = None  # the pace line printed last
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="ablate-job-lines", daemon=True)

    def __enter__(self) -> "_JobLines":
        if self.active:
            self._scan(say=False)  # records from before this launch are not news
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.active:
            self._done.set()
            self._thread.join()
            if exc[0] is None:
                self._scan()  # the jobs that ended since the last look

    def _watch(self) -> None:
        while not self._done.wait(self.poll_s):
            self._scan()

    def _scan(self, say: bool = True) -> None:
        from rich.console import Console

        from ablate.record import RESULT_FILE, read_record
        from ablate.console import job_line

        for path in sorted(self.sweep_dir.glob(f"*/{RESULT_FILE}")):
            try:
                stamp = path.stat().st_mtime_ns
            except OSError:
                continue
            if self._seen.get(path) == stamp:
                continue
            self._seen[path] = stamp
            record = read_record(path.parent)
            if say and record is not None:
                Console(highlight=False, soft_wrap=True).print(job_line(record, job_name(record.overrides)))
        self._say_pace(say)

    def _say_pace(self, say: bool) -> None:
        from ablate.pace import SweepEstimate

        estimate = SweepEstimate.read(self.sweep_dir)
        line = estimate.said_line if estimate is not None else None
        if line and line != self._said:
            self._said = line
            if say:
                print(line, flush=True)


class _StopWorkers:
    """In the process that launches a joblib or submitit_local sweep: a stop (Ctrl-C, SIGTERM, SIGHUP,
    SIGUSR1/2) is passed on as SIGTERM to the running jobs (found by their job locks, ``ablate.job``),
    each of which stops at its step boundary and records ``interrupted``; once they have, the sweep
    exits (joblib then ends its idle workers; submitit's waiting jobs were never started). Without
    this the launching process died alone and its jobs went on training. joblib's workers also stop
    if this process is killed outright (``ablate.job.stop_with_launcher``); submitit's job processes
    are its helper's children, not this process's, so a SIGKILL of the launcher leaves them running.
    A second signal while waiting exits at once."""

    def __init__(self, sweep_dir: Path, active: bool, wait_s: float = 120.0) -> None:
        self.sweep_dir, self.active, self.wait_s = sweep_dir, active, wait_s
        self.stopping = False
        self._handlers = SignalHandlers((signal.SIGINT, *STOP_SIGNALS), self._handler)
        self._env: str | None = None

    def __enter__(self) -> "_StopWorkers":
        if not self.active:
            return self
        self._env = os.environ.get(LAUNCHER_PID_ENV)
        os.environ[LAUNCHER_PID_ENV] = str(os.getpid())  # the workers inherit it: who launched them
        self._handlers.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._handlers.__exit__(*exc)
        if self.active:
            if self._env is None:
                os.environ.pop(LAUNCHER_PID_ENV, None)
            else:
                os.environ[LAUNCHER_PID_ENV] = self._env

    def _handler(self, signum: int, frame: Any) -> None:
        code = 130 if signum == signal.SIGINT else 128 + signum
        if self.stopping:
            raise SystemExit(code)
        self.stopping = True
        name = signal.Signals(signum).name
        print(f"ablate: {name}: stopping the sweep's running jobs (each records 'interrupted' at the end of its "
              "step; again to exit at once)", file=sys.stderr, flush=True)
        left = self.stop_running_jobs()
        if left:
            print(f"ablate: {len(left)} job process(es) still running after {self.wait_s:.0f} s: {sorted(left)}; "
                  "exiting", file=sys.stderr)
        raise KeyboardInterrupt if signum == signal.SIGINT else SystemExit(code)

    def running_jobs(self) -> set[int]:
        """The pids of this process's workers that are training a job of this sweep."""
        me, pids = os.getpid(), set()
        for job_dir in self.sweep_dir.iterdir() if self.sweep_dir.is_dir() else ():
            holder = lock_holder(job_dir) if job_dir.is_dir() else None
            if holder and holder[1] == me and holder[0] != me:
                pids.add(holder[0])
        return pids

    def stop_running_jobs(self, poll_s: float = 0.2) -> set[int]:
        """SIGTERM to every worker training a job (one that starts meanwhile too), then wait until
        none is; the pids still running after ``wait_s``."""
        signalled: set[int] = set()
        deadline = time.monotonic() + self.wait_s
        while True:
            running = self.running_jobs()
            for pid in running - signalled:
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                signalled.add(pid)
            if not running or time.monotonic() > deadline:
                return running
            time.sleep(poll_s)
