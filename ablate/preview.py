"""``ablate --plan``: what a sweep would run, without running it.

Every job's overrides, whether its directory already holds a finished record (a relaunch skips
it) or an unfinished one (rerun), its steps, and an estimate of the time left on *this* machine:
each variant still to run is timed for a few training steps here (interleaved, as
``ablate-bench`` does; nothing is saved), and each job adds a start-up allowance for data,
memory accounting, evaluation and logging. Nothing is trained and nothing is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from omegaconf import DictConfig

from ablate.results import read_record
from ablate.sweep import job_dir_name, job_signature, variant_key, variant_overrides

#: seconds a job spends outside its timed steps here (data, the memory pass, evaluation, slower
#: than median steps, validation, wandb): `make main`'s 9 jobs on this 2-core machine gave a median
#: wall_time_s - steps x median step time of 1.8 s, plus about 1.5 s a job outside that clock
JOB_OVERHEAD_S = 3.5
TIMING_STEPS = 5
WARMUP_ROUNDS = 2  # untimed rounds first: the first steps of a fresh model are slow


@dataclass
class PlannedJob:
    num: int
    overrides: list[str]
    steps: int
    status: str          # "done" (an ok record: skipped), "rerun" (failed/diverged/interrupted), "to run",
                         # "after tuning" (a tuned sweep's final run, at the lr its tuning runs choose)
    variant: str
    step_time_s: float | None = None

    @property
    def runs(self) -> bool:
        return self.status != "done"


def plan_jobs(sweep_dir: Path, jobs: list[list[str]], configs: list[DictConfig], swept: list[str]) -> list[PlannedJob]:
    """Each job's state in ``sweep_dir``: done, to rerun, or to run."""
    planned = []
    for num, (overrides, cfg) in enumerate(zip(jobs, configs)):
        record = read_record(sweep_dir / job_dir_name(overrides))
        if record is None or job_signature(record.get("overrides")) != job_signature(overrides):
            status = "to run"
        else:
            status = "done" if record.get("status") == "ok" else "rerun"
        variant = variant_key(variant_overrides(overrides, swept)) or "defaults"
        planned.append(PlannedJob(num, overrides, int(cfg.trainer.max_steps), status, variant))
    return planned


def time_variants(planned: list[PlannedJob], configs: list[DictConfig]) -> dict[str, float]:
    """Seconds per training step of each variant still to run, timed here for a few steps."""
    from ablate.bench import interleaved

    todo = {}
    for job, cfg in zip(planned, configs):
        if job.runs:
            todo.setdefault(job.variant, cfg)
    if not todo:
        return {}
    result = interleaved(todo, rounds=1, steps_per_round=TIMING_STEPS, warmup_rounds=WARMUP_ROUNDS)
    out = {}
    for key, entry in result["variants"].items():
        tokens_per_s = entry["tokens_per_s"]["median"]
        cfg = todo[key]
        tokens_per_step = int(cfg.task.batch_size) * int(cfg.task.seq_len)
        out[key] = tokens_per_step / tokens_per_s
    return out


def _duration(seconds: float) -> str:
    minutes, s = divmod(int(round(seconds)), 60)
    hours, m = divmod(minutes, 60)
    return f"{hours} h {m} min" if hours else f"{m} min {s} s" if m else f"{s} s"


def render(sweep_dir: Path, planned: list[PlannedJob], step_times: dict[str, float], note: str | None = None) -> str:
    lines = [f"ablate --plan: {len(planned)} job(s) in {sweep_dir} (nothing is trained, nothing is written)"]
    if note:
        lines.append(f"  note: {note}")
    width = max((len(" ".join(j.overrides)) for j in planned), default=10)
    lines.append(f"  {'#':>3}  {'job':<{width}}  {'status':<12} {'steps':>7}  {'s/step':>7}")
    for job in planned:
        job.step_time_s = step_times.get(job.variant) if job.runs else None
        per_step = f"{job.step_time_s:.3f}" if job.step_time_s else "-"
        lines.append(f"  {job.num:>3}  {' '.join(job.overrides) or '(defaults)':<{width}}  {job.status:<12} "
                     f"{job.steps:>7}  {per_step:>7}")
    todo = [j for j in planned if j.runs]
    steps = sum(j.steps for j in todo)
    seconds = sum(j.steps * (j.step_time_s or 0.0) + JOB_OVERHEAD_S for j in todo)
    lines.append(f"to run: {len(todo)} job(s), {steps:,} training steps; done already: "
                 f"{len(planned) - len(todo)} (a relaunch into this directory skips them)")
    if todo:
        lines.append(f"estimated time on this machine, one job after another: about {_duration(seconds)} "
                     f"({TIMING_STEPS} timed steps per variant here, plus ~{JOB_OVERHEAD_S:g} s a job for "
                     "data, memory accounting, evaluation and logging)")
    return "\n".join(lines)


def show_plan(sweep_dir: Path, jobs: list[list[str]], load: Callable[[list[str]], DictConfig],
              swept: list[str], note: str | None = None, print_fn: Callable[[str], Any] = print,
              later: list[list[str]] = ()) -> list[PlannedJob]:
    """Print the plan of a validated sweep; ``load(overrides)`` composes a job's config. ``later``:
    a tuned sweep's final jobs, whose learning rate the tuning runs (``jobs``) choose; those whose
    seed is a tuning seed reuse a tuning run and are not counted."""
    configs = [load(overrides) for overrides in jobs]
    planned = plan_jobs(sweep_dir, jobs, configs, swept)
    tuning_seeds = {o for job in jobs for o in job if o.startswith("seed=")}
    for overrides in later:
        if not any(o in tuning_seeds for o in overrides):
            cfg = load(overrides)
            planned.append(PlannedJob(len(planned), overrides + ["optim.lr=<chosen>"], int(cfg.trainer.max_steps),
                                      "after tuning", variant_key(variant_overrides(overrides, swept)) or "defaults"))
            configs.append(cfg)
    print_fn(render(sweep_dir, planned, time_variants(planned, configs), note))
    return planned
