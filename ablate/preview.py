"""``ablate --plan``: what a sweep would run, without running it.

Every job's overrides, whether its directory already holds a finished record (a relaunch skips
it) or an unfinished one (rerun), its steps, and an estimate of the time left on *this* machine:
each variant still to run is timed for a few training steps here (interleaved, as
``ablate-bench`` does; nothing is saved), and each job adds a start-up allowance for data,
memory accounting, evaluation and logging. Nothing is trained and nothing is written.

:func:`preview` returns the plan as data (:class:`Preview`); :func:`render` prints it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig

from ablate.jobdir import job_dir_name
from ablate.planner import LR_KEY, Planner, directory_conflict, variant_configs
from ablate.results import read_record
from ablate.sweep import SweepPlan, job_signature

#: seconds a job spends outside its timed steps here (data, the memory pass, evaluation, slower
#: than median steps, validation, wandb): `make main`'s 9 jobs on this 2-core machine gave a median
#: wall_time_s - steps x median step time of 1.8 s, plus about 1.5 s a job outside that clock
JOB_OVERHEAD_S = 3.5
TIMING_STEPS = 5
WARMUP_ROUNDS = 2  # untimed rounds first: the first steps of a fresh model are slow


@dataclass
class PlannedJob:
    """One job as ``--plan`` lists it."""

    num: int
    overrides: list[str]
    steps: int
    status: str          # "done" (an ok record: skipped), "rerun" (failed/diverged/interrupted), "to run",
                         # "after tuning" (a tuned sweep's final run, at the lr its tuning runs choose)
    variant: str
    step_time_s: float | None = None
    flops: float | None = None  # training FLOPs of the job: steps x tokens per step x FLOPs per token

    @property
    def runs(self) -> bool:
        return self.status != "done"

    @property
    def seconds(self) -> float | None:
        """Estimated seconds here: its steps at the variant's timed step, plus the start-up allowance."""
        return self.steps * self.step_time_s + JOB_OVERHEAD_S if self.runs and self.step_time_s else None


@dataclass
class Preview:
    """What ``--plan`` shows: the jobs, the estimate, and a note (e.g. a directory conflict)."""

    sweep_dir: Path
    jobs: list[PlannedJob]
    note: str | None = None
    step_times: dict[str, float] = field(default_factory=dict)  # variant -> seconds per step, timed here

    @property
    def to_run(self) -> list[PlannedJob]:
        return [j for j in self.jobs if j.runs]

    @property
    def steps_to_run(self) -> int:
        return sum(j.steps for j in self.to_run)

    @property
    def seconds(self) -> float:
        """Estimated seconds on this machine, one job after another."""
        return sum(j.seconds if j.seconds is not None else JOB_OVERHEAD_S for j in self.to_run)


def job_status(sweep_dir: Path, overrides: list[str]) -> str:
    """A job's state in ``sweep_dir``: done (a relaunch skips it), rerun, or to run."""
    record = read_record(sweep_dir / job_dir_name(overrides))
    if record is None or job_signature(record.get("overrides")) != job_signature(overrides):
        return "to run"
    return "done" if record.get("status") == "ok" else "rerun"


def preview(planner: Planner, plan: SweepPlan, sweep_dir: str | Path, time_steps: bool = True) -> Preview:
    """The plan of a validated sweep as data. A tuned sweep's final jobs, whose learning rate the
    tuning runs choose, are listed "after tuning"; those whose seed is a tuning seed reuse a tuning
    run and are not counted. ``time_steps``: time each variant still to run here (a few steps)."""
    sweep_dir = Path(sweep_dir)
    jobs = [PlannedJob(num, job, int(planner.compose(job).trainer.max_steps), job_status(sweep_dir, job),
                       plan.variant(job) or "defaults") for num, job in enumerate(plan.jobs)]
    if plan.tune is not None:
        tuning_seeds = {f"seed={s}" for s in plan.tune.seeds}
        for job in plan.definition:
            if not any(o in tuning_seeds for o in job):
                jobs.append(PlannedJob(len(jobs), job + [f"{LR_KEY}=<chosen>"],
                                       int(planner.compose(job).trainer.max_steps), "after tuning",
                                       plan.variant(job) or "defaults"))
    result = Preview(sweep_dir, jobs, directory_conflict(sweep_dir, plan))
    if time_steps:
        todo = {j.variant for j in jobs if j.runs}
        configs = {(key or "defaults"): cfg for key, cfg in variant_configs(planner, plan, plan.jobs).items()}
        result.step_times = time_variants({k: v for k, v in configs.items() if k in todo})
    for job in jobs:
        job.step_time_s = result.step_times.get(job.variant) if job.runs else None
        cost = planner.cost([o for o in job.overrides if o != f"{LR_KEY}=<chosen>"])
        job.flops = job.steps * cost["tokens_per_step"] * cost["flops_per_token"]
    return result


def time_variants(configs: dict[str, DictConfig]) -> dict[str, float]:
    """Seconds per training step of each variant, timed here for a few steps."""
    from ablate.timing import interleaved
    from ablate.train import accumulated_batches

    if not configs:
        return {}
    result = interleaved(configs, rounds=1, steps_per_round=TIMING_STEPS, warmup_rounds=WARMUP_ROUNDS)
    out = {}
    for key, entry in result["variants"].items():
        cfg = configs[key]
        tokens_per_step = int(cfg.task.batch_size) * int(cfg.task.seq_len) * accumulated_batches(cfg)
        out[key] = tokens_per_step / entry["tokens_per_s"]["median"]
    return out


def _duration(seconds: float) -> str:
    minutes, s = divmod(int(round(seconds)), 60)
    hours, m = divmod(minutes, 60)
    return f"{hours} h {m} min" if hours else f"{m} min {s} s" if m else f"{s} s"


def render(plan: Preview) -> str:
    lines = [f"ablate --plan: {len(plan.jobs)} job(s) in {plan.sweep_dir} (nothing is trained, nothing is written)"]
    if plan.note:
        lines.append(f"  note: {plan.note}")
    width = max((len(" ".join(j.overrides)) for j in plan.jobs), default=10)
    lines.append(f"  {'#':>3}  {'job':<{width}}  {'status':<12} {'steps':>7}  {'FLOPs':>7}  {'s/step':>7}  "
                 f"{'est.':>9}")
    for job in plan.jobs:
        per_step = f"{job.step_time_s:.3f}" if job.step_time_s else "-"
        flops = f"{job.flops:.1e}".replace("e+", "e") if job.flops else "-"
        estimate = _duration(job.seconds) if job.seconds is not None else "-"
        lines.append(f"  {job.num:>3}  {' '.join(job.overrides) or '(defaults)':<{width}}  {job.status:<12} "
                     f"{job.steps:>7}  {flops:>7}  {per_step:>7}  {estimate:>9}")
    todo = plan.to_run
    lines.append(f"to run: {len(todo)} job(s), {plan.steps_to_run:,} training steps; done already: "
                 f"{len(plan.jobs) - len(todo)} (a relaunch into this directory skips them)")
    if todo:
        lines.append(f"estimated time on this machine, one job after another: about {_duration(plan.seconds)} "
                     f"({TIMING_STEPS} timed steps per variant here, plus ~{JOB_OVERHEAD_S:g} s a job for "
                     "data, memory accounting, evaluation and logging)")
    return "\n".join(lines)
