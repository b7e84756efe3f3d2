"""``ablate --plan``: what a sweep would run, without running it; and the one line a sweep starts with.

Every job's overrides, whether its directory already holds a finished record (a relaunch skips
it) or an unfinished one (rerun), its steps, and an estimate of the time left on *this* machine,
with a range. Seconds per step come, best first, from:

1. earlier runs of the same settings here: the sweep directory's finished records, and the
   per-user cache of step times (``ablate.step_times.remember``; keyed by what sets a step's time,
   threads and host included). A record also gives a job's seconds besides its steps (set-up,
   memory pass, evaluation, logging); the range is the spread of those runs' median step times;
2. steps timed earlier by ``--plan`` (the cache);
3. timing here: each variant is built and stepped (interleaved, as ``ablate-bench`` does) at the
   torch threads its jobs will have, :data:`WARMUP_STEPS` steps untimed, then up to
   :data:`TIMING_STEPS` steps, stopping after :data:`TIMING_CAP_S` seconds once it has
   :data:`MIN_TIMED_STEPS`: seconds per variant however loaded the machine. The median is the
   estimate, the quartiles of the timed steps its range, and each job adds
   :data:`JOB_OVERHEAD_S` (plus :data:`EVAL_LENGTH_S` per longer evaluation length).

Each measurement carries the share of its threads' time it had (``cpu_share``: about 1 alone, about
0.5 where another process took half the core) and when it was taken. Measurements taken under load
(a share below :data:`LOADED_SHARE`) are left out where others are at hand, so a busy spell does not
set the estimate of later, quieter sweeps (a sweep under load is estimated from its loaded runs when
there are no others, and says so). The text names where the step times come from and how old the
newest is. Where variants' step times per training FLOP differ by more than :data:`FLOPS_SPREAD`
times, ``--plan`` times them all now, interleaved (earlier measurements were taken at other moments),
and the start line says so.

Every job adds :data:`JOB_GAP_S` (between jobs, outside a record's clock); jobs that run at once
(a parallel launcher) divide the total; ``--plan`` adds its own start-up and planning, which the
sweep repeats. Records and timings go into the cache, so the next ``--plan`` and the sweep's first
line (:func:`start_line`) reuse them; nothing is trained and nothing is written in the sweep directory.

:func:`preview` returns the plan as data (:class:`Preview`); :func:`render` prints it.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from ablate.jobdir import job_dir_name
from ablate.finetune_plan import finetune_stage
from ablate.ownership import directory_conflict
from ablate.planner import Planner
from ablate.tuning import CHOSEN, LR_KEY, final_stage
from ablate.record import RESULT_FILE, Record, read_record
from ablate.console import duration_text
from ablate.pace import SweepEstimate
from ablate.step_times import LOADED_SHARE, loaded
from ablate.power import PowerAdvice, power_advice
from ablate.seed_rounds import seed_round
from ablate.sweep import Rounds, SweepPlan, job_signature

#: the status of a later round's job in ``--plan``: it runs only if its comparison is undecided then
LATER_ROUND = "round"

# Measured with `ablate -m experiment=pos_enc pos_enc=sinusoidal,rope,alibi seed=0 trainer.max_steps=300`
# on this 2-core machine: a record's wall_time_s - steps x median step time was 3.1-3.2 s (5.3 s for
# alibi, whose evaluation at 128 and 256 tokens is the slowest), and 0.8-3.0 s passed between one
# job's end and the next one's start. `make main` (no longer lengths) gave 1.8 s + about 1.5 s.
JOB_OVERHEAD_S = 3.5  # a job's seconds besides its steps when no record says (set-up, memory, evaluation, wandb)
EVAL_LENGTH_S = 1.0   # ... plus this for each evaluation length beyond the training length
JOB_GAP_S = 1.5       # between jobs, outside a record's wall_time_s (Hydra's job set-up, wandb's finish)
WARMUP_STEPS = 3      # untimed steps first: the first steps of a fresh model are slow
MIN_TIMED_STEPS = 5
TIMING_STEPS = 40     # at most
TIMING_CAP_S = 2.0    # seconds of timed steps per variant, after MIN_TIMED_STEPS
FLOPS_SPREAD = 3.0    # variants' seconds per FLOP this far apart: measured under other conditions


@dataclass
class StepEstimate:
    """Seconds per step of one variant here, with a range, and a job's seconds besides its steps."""

    step_s: float
    low_s: float
    high_s: float
    other_s: float
    source: str  # "runs" (earlier records here), "timed" (timed here now), "timed earlier" (the cache)
    count: int   # runs, steps timed, or earlier timings
    newest_at: float | None = None  # when the newest measurement used was taken (None: now)
    loaded: bool = False            # every measurement at hand was taken under load (LOADED_SHARE)
    left_out: int = 0               # measurements under load left out, quieter ones being at hand
    cpu_share: float | None = None  # timed now: the share of its threads' time the timed steps had

    def job_seconds(self, steps: int, per_step: float | None = None) -> float:
        return steps * (self.step_s if per_step is None else per_step) + self.other_s + JOB_GAP_S


@dataclass
class PlannedJob:
    """One job as ``--plan`` lists it."""

    num: int
    overrides: list[str]
    steps: int
    status: str          # "done" (an ok record: skipped), "rerun" (failed/diverged/interrupted), "to run",
                         # "after tuning" (a tuned sweep's final run, at the lr its tuning runs choose)
    variant: str         # what its step time is looked up by: its variant (a fine-tune's: "variant -> task")
    estimate: StepEstimate | None = None
    flops: float | None = None  # training FLOPs of the job: steps x tokens per step x FLOPs per token
    stage: str = ""      # "finetune" for a fine-tune stage's job; "" for the others (pretraining, or a plain sweep)

    @property
    def runs(self) -> bool:
        return self.status != "done"

    @property
    def step_time_s(self) -> float | None:
        return self.estimate.step_s if self.runs and self.estimate else None

    @property
    def seconds(self) -> float | None:
        """Estimated seconds here: its steps at the variant's step time, plus its other seconds."""
        return self.estimate.job_seconds(self.steps) if self.runs and self.estimate else None

    @property
    def seconds_range(self) -> tuple[float, float] | None:
        if not (self.runs and self.estimate):
            return None
        return self.estimate.job_seconds(self.steps, self.estimate.low_s), \
            self.estimate.job_seconds(self.steps, self.estimate.high_s)


@dataclass
class Preview:
    """What ``--plan`` shows: the jobs, the estimate, and a note (e.g. a directory conflict)."""

    sweep_dir: Path
    jobs: list[PlannedJob]
    note: str | None = None
    estimates: dict[str, StepEstimate] = field(default_factory=dict)  # variant -> its step time here
    parallel: int = 1          # jobs the launcher runs at once
    setup_s: float = 0.0       # start-up and planning, which the sweep repeats (--plan's own)
    rate_from: dict[str, str] = field(default_factory=dict)  # tune.rungs=smallest: variant -> whose rate it reuses
    keys: dict[str, str] = field(default_factory=dict)       # variant -> its step-time cache key (ablate.step_times)
    retimed: str | None = None     # --plan timed every variant now: earlier step times disagreed with the FLOPs
    flops_note: str | None = None  # the start line's: earlier step times disagree with the FLOPs (not re-timed)
    rounds: Rounds | None = None   # seed=auto: the rounds (the jobs of rounds after the first: status "round k")
    power: PowerAdvice | None = None  # with stats.mde: the seeds each comparison needs (ablate.power)

    @property
    def step_times(self) -> dict[str, float]:
        """Variant -> seconds per step here."""
        return {key: e.step_s for key, e in self.estimates.items()}

    @property
    def to_run(self) -> list[PlannedJob]:
        return [j for j in self.jobs if j.runs]

    @property
    def steps_to_run(self) -> int:
        return sum(j.steps for j in self.to_run)

    @property
    def estimated(self) -> bool:
        """Whether every job still to run has a step time."""
        return all(j.estimate for j in self.to_run)

    def _total(self, index: int) -> float:
        return self.setup_s + sum(j.seconds_range[index] for j in self.to_run if j.seconds_range) / self.parallel

    @property
    def seconds(self) -> float:
        """Estimated seconds on this machine: the jobs still to run (``parallel`` at once), plus set-up."""
        return self.setup_s + sum(j.seconds for j in self.to_run if j.seconds is not None) / self.parallel

    @property
    def seconds_range(self) -> tuple[float, float]:
        return self._total(0), self._total(1)


def job_status(sweep_dir: Path, overrides: list[str]) -> str:
    """A job's state in ``sweep_dir``: done (a relaunch skips it), rerun, or to run."""
    path = sweep_dir / job_dir_name(overrides) / RESULT_FILE
    try:
        record = Record.read(path)
    except FileNotFoundError:
        return "to run"
    except (OSError, ValueError):  # a record a relaunch does not trust (ablate.record): it runs again
        return "rerun"
    if job_signature(record.overrides) != job_signature(overrides):
        return "to run"
    return "done" if record.ok else "rerun"


def preview(planner: Planner, plan: SweepPlan, sweep_dir: str | Path, time_steps: bool = True,
            setup_s: float = 0.0) -> Preview:
    """The plan of a validated sweep as data. A tuned sweep's final jobs, whose learning rate the
    tuning runs choose, are listed "after tuning" (``optim.lr=<chosen>``): exactly the jobs the sweep
    launches after its tuning runs (:func:`ablate.tuning.final_stage`), so a tuned variant's run at
    a tuning seed, which is one of its tuning runs, is not counted twice, and a larger rung that
    reuses the smallest rung's rate (``tune.rungs=smallest``) has all of its runs here. ``time_steps``: time here each variant still to run that no earlier
    run or timing covers (else those have no estimate). ``setup_s``: start-up and planning to add."""
    sweep_dir = Path(sweep_dir)
    result = _planned(planner, plan, sweep_dir)
    result.setup_s = setup_s
    _estimate(planner, plan, result, time_steps)
    for job in result.jobs:
        cost = planner.cost(_rate_unset(job.overrides))
        job.flops = job.steps * cost["tokens_per_step"] * cost["flops_per_token"]
    result.power = power_advice(planner, plan, sweep_dir)
    return result


def start_line(planner: Planner, plan: SweepPlan, sweep_dir: str | Path) -> str:
    """The line a sweep starts with (:func:`start`)."""
    return start(planner, plan, sweep_dir)[0]


def start(planner: Planner, plan: SweepPlan, sweep_dir: str | Path) -> tuple[str, SweepEstimate | None]:
    """The line a sweep starts with: its jobs, those done, and the time left here when earlier runs
    or timings of every variant still to run say (nothing is timed: a sweep starts at once); and that
    estimate, which the sweep's jobs check their steps against (``ablate.pace``; None without one)."""
    shown = _planned(planner, plan, Path(sweep_dir))
    shown.jobs = [job for job in shown.jobs if not job.status.startswith(LATER_ROUND)]  # seed=auto: round 1 only
    _estimate(planner, plan, shown, time_steps=False)
    return _start_text(shown, planner), (SweepEstimate(
        at=time.time(), seconds=shown.seconds, jobs=len(shown.to_run),
        step_s={shown.keys[v]: e.step_s for v, e in shown.estimates.items() if v in shown.keys})
        if shown.to_run and shown.estimated else None)


def _start_text(shown: Preview, planner: Planner) -> str:
    done = len(shown.jobs) - len(shown.to_run)
    line = f"[ablate] {len(shown.jobs)} jobs ({done} already done)"
    if shown.rounds is not None:
        line = f"[ablate] round 1 of at most {len(shown.rounds.looks())}: {len(shown.jobs)} jobs ({done} already done)"
    if not shown.to_run:
        return line + ", nothing left to run"
    if shown.estimated:
        low, high = shown.seconds_range
        spread = f"{duration_text(low)} to {duration_text(high)}, " if high - low >= 1 else ""
        note = (f"; note: {shown.flops_note}, measured at other moments (ablate --plan times them side by side)"
                if shown.flops_note else "")
        return line + f", about {duration_text(shown.seconds)} here ({spread}{_sources(shown)}){note}"
    return line + f"; for an estimate: ablate --plan {' '.join(planner.arguments)}".rstrip()


def _planned(planner: Planner, plan: SweepPlan, sweep_dir: Path) -> Preview:
    """The jobs of ``plan`` and their state in ``sweep_dir``, without estimates."""
    jobs = [PlannedJob(num, job, int(planner.compose(job).trainer.max_steps), job_status(sweep_dir, job),
                       plan.variant(job) or "defaults") for num, job in enumerate(plan.jobs)]
    for job in final_stage(plan):  # the sweeper's own list of a tuned sweep's final runs
        later = plan.rounds is not None and seed_round(plan.rounds, job) > 1
        jobs.append(PlannedJob(len(jobs), job, int(planner.compose(_rate_unset(job)).trainer.max_steps),
                               f"{LATER_ROUND} {seed_round(plan.rounds, job)}" if later else "after tuning",
                               plan.variant(job) or "defaults"))
    if plan.rounds is not None and plan.tune is None:  # the later rounds' jobs: each runs if its row is undecided
        listed = {job_signature(job) for job in plan.jobs}
        for job in plan.definition:
            if job_signature(job) not in listed:
                status = job_status(sweep_dir, job)
                jobs.append(PlannedJob(len(jobs), job, int(planner.compose(job).trainer.max_steps),
                                       "done" if status == "done" else f"{LATER_ROUND} {seed_round(plan.rounds, job)}",
                                       plan.variant(job) or "defaults"))
    for job in finetune_stage(plan):  # the sweeper's own list of the fine-tunes, after the pretraining
        cfg = planner.compose(job)
        jobs.append(PlannedJob(len(jobs), job, int(cfg.trainer.max_steps), job_status(sweep_dir, job),
                               f"{plan.variant(job) or 'defaults'} -> {cfg.task.name}", stage="finetune"))
    return Preview(sweep_dir, jobs, directory_conflict(sweep_dir, plan),
                   rate_from=dict(plan.tune.transfer) if plan.tune is not None else {}, rounds=plan.rounds)


def _rate_unset(job: list[str]) -> list[str]:
    """A final run without its rate, not chosen yet (its steps and step time do not depend on it)."""
    return [o for o in job if o != f"{LR_KEY}={CHOSEN}"]


def _job_share(config: DictConfig, n_jobs: int) -> tuple[int, int]:
    """``(torch threads, jobs at once)`` of this sweep's jobs, as each job will work them out."""
    import torch

    from ablate.job import Job

    launcher = config.hydra.launcher if "hydra" in config else {}
    _, parallel, threads, _ = Job._cpu_share(launcher, n_jobs)  # the job's own rule (ablate.job)
    return threads or torch.get_num_threads(), parallel or 1


def _estimate(planner: Planner, plan: SweepPlan, shown: Preview, time_steps: bool) -> None:
    """Fill in ``shown``'s estimates: earlier runs, earlier timings, then (``time_steps``) timing here;
    ``time_steps`` also re-times every variant when their step times disagree with their FLOPs."""
    from ablate.step_times import device_name, recall, remember, step_time_key

    jobs = {}  # one job per step time to find: each variant's (a fine-tune's: per task) first job
    for job in shown.jobs:
        if job.runs and job.variant not in jobs:
            jobs[job.variant] = _rate_unset(job.overrides)
    configs = {variant: planner.compose(job) for variant, job in jobs.items()}
    threads, shown.parallel = _job_share(planner.config, len(plan.jobs))
    keys = {variant: step_time_key(cfg, threads, shown.parallel, device_name(cfg)) for variant, cfg in configs.items()}
    shown.keys = keys
    found = _record_samples(shown.sweep_dir, plan)
    remember(found)
    untimed = {}
    for variant, key in keys.items():
        cached = recall(key)  # the sweep directory's records are there already, unless the cache cannot be written
        samples = cached + [s for s in found.get(key, []) if s["id"] not in {c.get("id") for c in cached}]
        estimate = _from_samples(samples, _allowance(configs[variant]))
        if estimate is not None:
            shown.estimates[variant] = estimate
        else:
            untimed[variant] = configs[variant]
    spread = _flops_spread(planner, jobs, shown.estimates)
    if spread is not None and time_steps:  # measured at other moments: time them all now, side by side
        untimed = dict(configs)
        shown.retimed = spread
    elif spread is not None:
        shown.flops_note = spread
    if time_steps and untimed:
        timed = time_variants(untimed, threads)
        shown.estimates.update(timed)
        remember({keys[v]: [{"step_s": e.step_s, "low_s": e.low_s, "high_s": e.high_s, "other_s": None,
                             "source": "timed", "cpu_share": e.cpu_share}] for v, e in timed.items()})
    for job in shown.jobs:
        job.estimate = shown.estimates.get(job.variant) if job.runs else None


def _from_samples(samples: list[dict[str, Any]], allowance: float) -> StepEstimate | None:
    """A variant's estimate from its cached measurements: earlier runs first, else earlier timings;
    of those, the ones taken with their threads' time (``cpu_share`` at least :data:`LOADED_SHARE`,
    or not recorded) where there are any, else the loaded ones (``loaded``)."""
    for source, name in (("runs", "runs"), ("timed", "timed earlier")):
        mine = [s for s in samples if s.get("source") == source]
        quiet = [s for s in mine if not loaded(s)]
        used = quiet or mine
        if not used:
            continue
        steps = [s["step_s"] for s in used]
        if source == "runs":
            other = [s["other_s"] for s in used if s.get("other_s") is not None]
            low, high, other_s = min(steps), max(steps), statistics.median(other) if other else allowance
        else:
            low = min(s.get("low_s") or s["step_s"] for s in used)
            high, other_s = max(s.get("high_s") or s["step_s"] for s in used), allowance
        return StepEstimate(statistics.median(steps), low, high, other_s, name, len(used),
                            newest_at=max((s["at"] for s in used if s.get("at")), default=None),
                            loaded=not quiet, left_out=len(mine) - len(used))
    return None


def _flops_spread(planner: Planner, jobs: dict[str, list[str]], estimates: dict[str, StepEstimate]) -> str | None:
    """Where the variants' seconds per training FLOP (from earlier measurements) are more than
    :data:`FLOPS_SPREAD` times apart: the slowest and the fastest per FLOP, in words; else None."""
    flops = {v: planner.cost(jobs[v])["tokens_per_step"] * planner.cost(jobs[v])["flops_per_token"] for v in estimates}
    per_flop = {v: e.step_s / flops[v] for v, e in estimates.items() if flops[v] > 0}
    if len(per_flop) < 2:
        return None
    slow, fast = max(per_flop, key=per_flop.get), min(per_flop, key=per_flop.get)
    if per_flop[slow] / per_flop[fast] <= FLOPS_SPREAD:
        return None
    return (f"{slow} steps {estimates[slow].step_s / estimates[fast].step_s:.1f}x as long as {fast} "
            f"at {flops[slow] / flops[fast]:.2f}x its FLOPs")


def _record_samples(sweep_dir: Path, plan: SweepPlan) -> dict[str, list[dict[str, Any]]]:
    """Step times of the sweep directory's finished jobs, keyed as the cache keys them."""
    from ablate.step_times import record_samples

    return record_samples(r for r in (read_record(sweep_dir / job_dir_name(job)) for job in plan.jobs) if r)


def _allowance(cfg: DictConfig) -> float:
    """A job's seconds besides its steps when no record of it says: :data:`JOB_OVERHEAD_S`, plus
    :data:`EVAL_LENGTH_S` for each evaluation length beyond the training length."""
    return JOB_OVERHEAD_S + EVAL_LENGTH_S * len(cfg.task.get("eval_lengths") or [])


def time_variants(configs: dict[str, DictConfig], threads: int | None = None) -> dict[str, StepEstimate]:
    """Seconds per training step of each variant, timed here (at ``threads`` torch threads): a few
    warm-up steps, then up to :data:`TIMING_STEPS` steps, at most :data:`TIMING_CAP_S` seconds of them
    per variant once it has :data:`MIN_TIMED_STEPS`."""
    import torch

    from ablate.timing import interleaved

    if not configs:
        return {}
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        result = interleaved(configs, rounds=TIMING_STEPS, steps_per_round=1, warmup_rounds=WARMUP_STEPS,
                             max_seconds=TIMING_CAP_S, min_rounds=MIN_TIMED_STEPS)
    finally:
        torch.set_num_threads(before)
    out = {}
    for key, entry in result["variants"].items():
        times = entry["step_time_s"]
        out[key] = StepEstimate(times["median"], times["q25"], times["q75"], _allowance(configs[key]), "timed",
                                entry["timed_steps"], cpu_share=entry.get("cpu_share"))
    return out


def _sources(plan: Preview) -> str:
    """Where the step times came from and how old they are, in words, with what was left out or
    taken under load."""
    used = {key: e for key, e in plan.estimates.items() if any(j.variant == key for j in plan.to_run)}
    measured = list({plan.keys.get(key, key): e for key, e in used.items()}.values())  # variants may share step times
    parts = []
    for source, what in (("runs", "earlier run(s) here"), ("timed earlier", "earlier timing(s) here")):
        mine = [e for e in measured if e.source == source]
        if mine:
            newest = max((e.newest_at for e in mine if e.newest_at), default=None)
            age = f", the newest {duration_text(max(0.0, time.time() - newest))} old" if newest else ""
            parts.append(f"from {sum(e.count for e in mine)} {what}{age}")
    timed = [e for e in measured if e.source == "timed"]
    if timed:
        parts.append(f"{sum(e.count for e in timed)} steps timed now, the quartiles of their times")
    left = sum(e.left_out for e in measured)
    if left:
        parts.append(f"{left} taken under load left out")
    loaded = [key for key, e in used.items() if e.loaded or (e.cpu_share is not None and e.cpu_share < LOADED_SHARE)]
    if loaded:
        parts.append(f"{', '.join(loaded)} timed under load only (steps with under {LOADED_SHARE:.0%} of their "
                     "threads' time): the estimate holds while the machine stays this busy")
    return "; ".join(parts)


def render(plan: Preview) -> str:
    lines = [f"ablate --plan: {len(plan.jobs)} job(s) in {plan.sweep_dir} (nothing is trained, nothing is written there)"]
    if plan.note:
        lines.append(f"  note: {plan.note}")
    width = max((len(" ".join(j.overrides)) for j in plan.jobs), default=10)
    lines.append(f"  {'#':>3}  {'job':<{width}}  {'status':<12} {'steps':>7}  {'FLOPs':>7}  {'s/step':>7}  "
                 f"{'est.':>9}")
    for job in plan.jobs:
        per_step = f"{job.step_time_s:.3f}" if job.step_time_s else "-"
        flops = f"{job.flops:.1e}".replace("e+", "e") if job.flops else "-"
        estimate = duration_text(job.seconds) if job.seconds is not None else "-"
        lines.append(f"  {job.num:>3}  {' '.join(job.overrides) or '(defaults)':<{width}}  {job.status:<12} "
                     f"{job.steps:>7}  {flops:>7}  {per_step:>7}  {estimate:>9}")
    if any(job.status == "after tuning" for job in plan.jobs):
        lines.append("  after tuning: a final run, at the learning rate its variant's tuning runs choose"
                     + (f"; {len(plan.rate_from)} variant(s) of a larger rung take the rate chosen at their "
                        "smallest rung (tune.rungs=smallest)" if plan.rate_from else ""))
    if any(job.stage == "finetune" for job in plan.jobs):
        lines += _stage_lines(plan)
    if plan.rounds is not None:
        lines += _round_lines(plan)
    todo = plan.to_run
    lines.append(f"to run: {'at most ' if plan.rounds is not None else ''}{len(todo)} job(s), "
                 f"{plan.steps_to_run:,} training steps; done already: "
                 f"{len(plan.jobs) - len(todo)} (a relaunch into this directory skips them)")
    if todo and plan.estimates:
        low, high = plan.seconds_range
        at_once = "one job after another" if plan.parallel == 1 else f"{plan.parallel} jobs at once"
        spread = f"{duration_text(low)} to {duration_text(high)}" if high - low >= 1 else "no spread to show"
        lines.append(f"estimated time on this machine, {at_once}: about {duration_text(plan.seconds)} "
                     f"({spread}; step times {_sources(plan)})")
        setup = f"{duration_text(plan.setup_s)} of start-up and planning, " if plan.setup_s else ""
        if plan.retimed:
            lines.append(f"  every variant timed now, side by side: earlier step times disagreed with the FLOPs "
                         f"({plan.retimed}), measured at other moments")
        lines.append(f"  includes {setup}each job's set-up, evaluation and logging (from its records where "
                     f"there are, else ~{JOB_OVERHEAD_S:g} s + {EVAL_LENGTH_S:g} s per longer evaluation "
                     f"length) and ~{JOB_GAP_S:g} s between jobs")
    if plan.parallel > 1 and todo:
        lines.append("  (steps were timed one variant at a time: jobs sharing the cores may step slower)")
    if plan.power is not None:
        lines += _power_lines(plan)
    return "\n".join(lines)


def _jobs_seconds(plan: Preview, jobs: list[PlannedJob]) -> float | None:
    """The seconds ``jobs`` take here (``parallel`` at once), or None where one has no estimate."""
    if not all(j.seconds is not None for j in jobs if j.runs):
        return None
    return sum(j.seconds for j in jobs if j.runs) / plan.parallel


def _round_lines(plan: Preview) -> list[str]:
    """``seed=auto``: the first round, then what the later rounds can add at most, with their time."""
    rounds, looks = plan.rounds, plan.rounds.looks()
    first = [j for j in plan.jobs if not j.status.startswith(LATER_ROUND)]
    later = [j for j in plan.jobs if j.status.startswith(LATER_ROUND)]

    def timed(jobs: list[PlannedJob]) -> str:
        seconds = _jobs_seconds(plan, jobs)
        return f", about {duration_text(seconds)} here" if seconds is not None and jobs else ""

    return [f"  seeds in rounds (seed=auto, stats.mde={rounds.mde:g} points, alpha={rounds.alpha:g}, "
            f"{rounds.spending.replace('_', '-')} spending): rounds at {', '.join(map(str, looks))} seeds",
            f"    round 1: seeds 0-{looks[0] - 1} of every row: {len(first)} job(s), {sum(j.runs for j in first)} to "
            f"run{timed(first)}",
            f"    rounds 2-{len(looks)}: {rounds.round_seeds} more seeds each for the rows still undecided and their "
            f"baselines ({LATER_ROUND} k above): at most {sum(j.runs for j in later)} job(s){timed(later)}; the "
            f"sweep stops when every comparison is decided, or at {looks[-1]} seeds"] if len(looks) > 1 else \
        [f"  seeds in rounds (seed=auto): one round of {looks[0]} seeds (stats.max_seeds = stats.min_seeds)"]


def _pair_seconds(plan: Preview, pair: list[PlannedJob | None], seeds: int) -> float | None:
    """What ``seeds`` seeds of a row and its baseline (a job of each) take here, or None unestimated."""
    if not all(job is not None and job.estimate for job in pair):
        return None
    return seeds * sum(job.estimate.job_seconds(job.steps) for job in pair) / plan.parallel


def _power_lines(plan: Preview) -> list[str]:
    """With ``stats.mde``: each comparison's seeds for the power asked, and what they cost here."""
    advice = plan.power
    lines = [f"power at stats.mde={advice.mde:g} accuracy points: paired seeds for {advice.power:.0%} power in a "
             f"paired t-test at alpha={advice.alpha:g} over {len(advice.comparisons)} comparison(s) "
             f"(Holm's first level, {advice.level:.3g}):"]
    step = {j.variant: j for j in plan.jobs}
    for entry in advice.comparisons:
        name = f"  {entry.variant} vs {entry.baseline}"
        pair = [step.get(entry.variant), step.get(entry.baseline)]
        if entry.spread is None:
            first = plan.rounds.min_seeds if plan.rounds is not None else 2
            seconds = _pair_seconds(plan, pair, first)
            cost = f"; {first} seeds of both rows cost about {duration_text(seconds)} here" if seconds else ""
            lines.append(f"{name}: no spread of paired differences known for these settings (neither this sweep's "
                         f"records nor an earlier sweep's here){cost}, and the first round measures it")
            continue
        spread = entry.spread
        where = ("this sweep's records" if entry.from_records else
                 f"{spread.source}, {duration_text(max(0.0, time.time() - spread.at))} old")
        needed = (f"{entry.seeds} paired seeds" if entry.seeds is not None else "more seeds than it is sensible to run")
        seconds = _pair_seconds(plan, pair, entry.seeds) if entry.seeds is not None else None
        cost = f" (about {duration_text(seconds)} here for both rows)" if seconds else ""
        text = (f"{name}: sd of paired differences {100 * spread.sd:.2f} points over {spread.n} seeds ({where}): "
                f"{needed}{cost}")
        if entry.rounds_power is not None:
            text += (f"; the rounds: {entry.rounds_power:.0%} power at the cap, {entry.rounds_seeds:.1f} seeds on "
                     "average at that effect")
        lines.append(text)
    return lines


def _stage_lines(plan: Preview) -> list[str]:
    """A sweep with a fine-tune stage: its two stages, in the order they run, with their jobs and time."""
    lines = ["  stages, in order (the fine-tunes start once the pretraining has ended):"]
    for name, stage in (("pretraining", ""), ("fine-tuning", "finetune")):
        jobs = [j for j in plan.jobs if j.stage == stage]
        todo = [j for j in jobs if j.runs]
        seconds = sum(j.seconds or 0.0 for j in todo) / plan.parallel
        timed = f", about {duration_text(seconds)} here" if todo and all(j.seconds is not None for j in todo) else ""
        lines.append(f"    {name}: {len(jobs)} job(s), {len(todo)} to run, {sum(j.steps for j in todo):,} steps{timed}")
    return lines
