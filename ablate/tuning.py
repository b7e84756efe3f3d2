"""A tuned sweep's stages (``tune.lr=[...]``): one tuning run per variant x learning rate x tuning
seed, each variant's rate chosen on the validation split of its tuning runs, then the definition's
jobs at the chosen rates (less those that are a tuning run already). The sweeper launches the
stages (``ablate.sweeper``) and ``--plan`` shows them (``ablate.preview``) through the same
functions, so the plan is the run.
"""

from __future__ import annotations

import math

from ablate.record import Record
from ablate.sweep import SweepPlan, Tuning, job_signature, job_value, job_variant, override_key

#: the key a tuned sweep chooses per variant
LR_KEY = "optim.lr"
#: a final run's learning rate before its variant's tuning runs have chosen it (``--plan``)
CHOSEN = "<chosen>"


def lr_text(lr: float) -> str:
    """A learning rate as override text: short and exact (``0.001``, ``3e-05``)."""
    return repr(float(lr))


def no_seed(job: list[str]) -> list[str]:
    """A job's cost does not depend on its seed: one composition serves every seed."""
    return [o for o in job if override_key(o) != "seed"]


def tuning_jobs(definition: list[list[str]], swept: list[str], tune: Tuning) -> list[list[str]]:
    """One job per variant x learning rate x tuning seed: the variant's first job with the seed
    and the learning rate set (its other settings, e.g. a budget's steps, kept)."""
    first_of: dict[str, list[str]] = {}
    for job in definition:
        if job_variant(job, swept) not in tune.transfer:  # tune.rungs=smallest: a larger rung reuses a lr
            first_of.setdefault(job_variant(job, swept), no_seed(job))
    return [job + [f"seed={seed}", f"{LR_KEY}={lr_text(lr)}"]
            for job in first_of.values() for lr in tune.lr for seed in tune.seeds]


def final_jobs(plan: SweepPlan, chosen: dict[str, float]) -> list[list[str]]:
    """The definition's jobs at each variant's chosen learning rate (a tuned sweep's second stage).
    A job that does not sweep the seed names the one it runs at (the config's): the tuning run of
    the same seed and rate is then the same job, found done, not trained and counted a second time."""
    seed = [f"seed={plan.tune.final_seeds[0]}"] if plan.tune is not None and plan.tune.final_seeds else []
    jobs = []
    for job in plan.definition:
        named = job if job_value(job, "seed") is not None else job + seed
        jobs.append(named + [f"{LR_KEY}={lr_text(chosen[plan.variant(job)])}"])
    return jobs


def final_stage(plan: SweepPlan, chosen: dict[str, float] | None = None) -> list[list[str]]:
    """The jobs a tuned sweep launches after its tuning runs, in order: its final runs
    (:func:`final_jobs`) less those that are a tuning run already (a tuned variant's run at a tuning
    seed: its tuning run at the chosen rate). A variant that reuses another's rate
    (``tune.rungs=smallest``) has no tuning runs, so all of its final runs are here. The one list both
    the sweep (``chosen``: each variant's rate) and ``--plan`` (``chosen`` None: each job at
    ``optim.lr=<chosen>``, its rate not known yet) use; empty for an untuned sweep.

    Whether a final run is a tuning run does not depend on the rate chosen: a tuned variant has a
    tuning run at every rate of the grid (and the rate chosen is one of them)."""
    tune = plan.tune
    if tune is None:
        return []
    tuning = {job_signature(job) for job in tuning_jobs(plan.definition, plan.swept, tune)}
    rates = chosen if chosen is not None else {plan.variant(job): tune.lr[0] for job in plan.definition}
    stage = [job for job in final_jobs(plan, rates) if job_signature(job) not in tuning]
    if chosen is None:
        stage = [[o for o in job if override_key(o) != LR_KEY] + [f"{LR_KEY}={CHOSEN}"] for job in stage]
    return stage


def choose_lr(records: list[Record], plan: SweepPlan) -> tuple[dict[str, float], dict[str, dict[str, float | None]]]:
    """Each variant's learning rate, chosen on the validation split of its tuning runs.

    The score of a learning rate is the mean over the tuning seeds of the validation loss (or of
    minus the validation accuracy, ``tune.metric=accuracy``); a run that diverged or failed scores
    +inf. The lowest finite score wins; on a tie, the smaller learning rate. A variant whose every
    run failed keeps the shared default. Returns ``(chosen, scores)``: the scores per variant and lr
    (``lr_text``) as the metric itself, None where no run finished."""
    tune = plan.tune
    if tune is None:
        raise ValueError("choose_lr: this sweep tunes no learning rate (tune.lr is empty)")
    sign = 1.0 if tune.metric == "loss" else -1.0
    outcome: dict[tuple[str, ...], float] = {}
    for record in records:
        value = getattr(record.metrics.val, tune.metric, None)
        ok = record.ok and isinstance(value, (int, float)) and math.isfinite(value)
        outcome[job_signature(record.overrides)] = sign * value if ok else math.inf
    runs: dict[str, dict[float, list[float]]] = {}
    for job in tuning_jobs(plan.definition, plan.swept, tune):
        per_lr = runs.setdefault(plan.variant(job), {}).setdefault(float(job_value(job, LR_KEY)), [])
        if job_signature(job) in outcome:
            per_lr.append(outcome[job_signature(job)])
    chosen: dict[str, float] = {}
    scores: dict[str, dict[str, float | None]] = {}
    for variant, per_lr in runs.items():
        means = {lr: sum(v) / len(v) for lr, v in per_lr.items() if v}
        finite = {lr: m for lr, m in means.items() if math.isfinite(m)}
        scores[variant] = {lr_text(lr): sign * finite[lr] if lr in finite else None for lr in per_lr}
        chosen[variant] = min(finite, key=lambda lr: (finite[lr], lr)) if finite else tune.default_lr
    for variant, source in tune.transfer.items():  # tune.rungs=smallest: the smallest rung's choice
        chosen[variant] = chosen.get(source, tune.default_lr)
    return chosen, scores
