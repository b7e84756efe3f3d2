"""What a multirun runs, and in which order: Hydra's basic sweep plus designs, budgets and tuning.

Hydra's basic sweeper makes the cartesian product of the swept values and launches it as one
batch. Three things a fair ablation needs do not fit a product launched at once:

* ``experiment.design``: rows generated from a base (one change at a time, or leave one out), not a
  product of values (:func:`ablate.sweep.design_rows`);
* ``budget.match=tokens|flops``: each job's ``trainer.max_steps`` follows from its own and its
  baseline's cost, so a cheaper variant trains for more steps (:func:`budget_steps`);
* ``tune.lr=[...]``: the seeds may only start once each variant's learning rate has been chosen on
  the validation split, i.e. after a first batch of runs (:func:`choose_lr`).

:func:`plan_sweep` turns a multirun's composed config into :class:`SweepPlan` (the jobs, the
budget, the tuning), the one description of the sweep: the sweep-start callback validates,
previews (``--plan``) and records (``sweep.json``) it, and :func:`run_sweep`, the ``sweep`` of
``hydra/sweeper=ablate`` (``hydra_plugins.ablate_sweeper``, the default), launches it through
whichever launcher is configured: the tuning runs as a first batch, then the final runs at each
variant's chosen learning rate. Why a sweeper and not a callback: only the sweeper may launch
jobs, and only it sees the first batch end before the second starts, with every launcher.

A relaunch into the same directory resumes: finished jobs are skipped by the jobs themselves
(``ablate.run``), so the tuning runs are not repeated and the same learning rates are chosen.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from omegaconf import DictConfig, OmegaConf

from ablate.results import load_records
from ablate.sweep import (design_keys, design_rows, expand_sweep, job_signature, job_variant, launcher_kind,
                          override_key, split_override_string, swept_keys, write_sweep_file)

LR_KEY = "optim.lr"
STEPS_KEY = "trainer.max_steps"


@dataclass
class SweepPlan:
    """A multirun, planned: ``definition`` is every job the command line defines (design rows and
    budget steps included), ``first`` the jobs launched at once (the tuning runs of a tuned sweep,
    else the definition), ``tune`` and ``budget`` what sweep.json records of each (None: off)."""

    definition: list[list[str]]
    first: list[list[str]]
    tune: dict[str, Any] | None = None
    budget: dict[str, Any] | None = None
    swept: list[str] = field(default_factory=list)

    def final_jobs(self, chosen: dict[str, float]) -> list[list[str]]:
        """The definition's jobs at each variant's chosen learning rate (a tuned sweep's second batch)."""
        return [job + [f"{LR_KEY}={lr_text(chosen[job_variant(job, self.swept)])}"] for job in self.definition]

    def record(self, sweep_dir: str | Path, launched: list[list[str]], **tune: Any) -> None:
        """Write ``sweep.json``: the jobs launched so far, the definition, the tuning (with ``tune``'s
        updates: what was chosen) and the budget."""
        entries: dict[str, Any] = {"budget": self.budget}
        if self.tune is not None:
            entries["tune"] = {**self.tune, **tune}
        write_sweep_file(sweep_dir, launched, self.definition, swept=self.swept, **entries)


def job_config(config: DictConfig, overrides: list[str]) -> DictConfig:
    """A job's composed config (with its ``hydra`` node), as the launcher will compose it."""
    from hydra.core.global_hydra import GlobalHydra

    return GlobalHydra.instance().config_loader().load_sweep_config(config, overrides)


def lr_text(lr: float) -> str:
    """A learning rate as override text: short and exact (``0.001``, ``3e-05``)."""
    return repr(float(lr))


def _design_jobs(config: DictConfig, jobs: list[list[str]]) -> list[list[str]]:
    """Each job of the product once per row of ``experiment.design`` (rows first, so that in a table
    of rows x seeds every row keeps its place)."""
    design = OmegaConf.to_container(config.experiment.design, resolve=True) if config.experiment.get("design") else None
    if not design:
        return jobs
    rows = design_rows(design)
    keys = {k for _, row in rows for k in row}
    clash = sorted({override_key(o) for job in jobs for o in job} & keys)
    if clash:
        raise ValueError(f"{', '.join(clash)}: set by experiment.design's rows; the command line cannot also "
                         "set or sweep it (remove it, or change the design)")
    return [[f"{k}={v}" for k, v in row.items()] + job for _, row in rows for job in jobs]


def plan_sweep(config: DictConfig, compose: Callable[[list[str]], DictConfig] | None = None) -> SweepPlan:
    """The sweep of a multirun's composed config (with its ``hydra`` node). ``compose(overrides)``
    gives a job's config (without ``hydra``), for a ``budget.match`` other than ``steps``; without it
    every job keeps its own steps (what validation needs). Raises ValueError for a sweep that cannot
    be planned (the message says why)."""
    params = config.hydra.sweeper.get("params") or {}
    jobs = expand_sweep([f"{k}={v}" for k, v in params.items()] + list(config.hydra.overrides.task))
    definition = _design_jobs(config, jobs)
    design = config.experiment.get("design")
    named = design_keys(OmegaConf.to_container(design, resolve=True)) if design else []
    swept = named + [k for k in swept_keys(definition) if k != LR_KEY and k not in named]
    budget = None
    match = str(OmegaConf.select(config, "budget.match", default="steps"))
    if match != "steps" and compose is not None and config.get("smoke") is not True:  # a smoke test: few steps
        definition, budget = budget_steps(definition, swept, config, compose, match)
    plan = SweepPlan(definition=definition, first=definition, budget=budget, swept=swept)
    grid = [float(x) for x in (OmegaConf.select(config, "tune.lr", default=None) or [])]
    if grid:
        if any(override_key(o) == LR_KEY for job in definition for o in job):
            raise ValueError(f"tune.lr chooses {LR_KEY} per variant; the command line cannot also set or sweep "
                             f"{LR_KEY} (remove it, or drop tune.lr)")
        default = float(config.optim.lr)
        seeds = [int(o.split("=", 1)[1]) for job in definition for o in job if override_key(o) == "seed"]
        plan.tune = {"lr": sorted(set(grid) | {default}), "default_lr": default,
                     "seeds": [int(s) for s in config.tune.seeds], "metric": str(config.tune.metric),
                     "final_seeds": sorted(set(seeds)) or [int(config.seed)]}
        plan.first = tuning_jobs(definition, swept, plan.tune)
    return plan


def budget_steps(definition: list[list[str]], swept: list[str], config: DictConfig,
                 compose: Callable[[list[str]], DictConfig], match: str) -> tuple[list[list[str]], dict[str, Any]]:
    """Each job with ``trainer.max_steps`` set so that it trains on as many tokens (``match=tokens``) or
    training FLOPs (``match=flops``) as its baseline does in the baseline's ``trainer.max_steps``
    (rounded to the nearest step, so within half a step's worth). The baseline of a job is the job
    with the baseline's values (``experiment.baseline``, else the first variant) in place of its
    own: in a sweep over task x variant, the baseline variant on the same task."""
    from ablate.run import job_cost

    if STEPS_KEY in swept:
        raise ValueError(f"budget.match={match} sets {STEPS_KEY} per job; it cannot also be swept "
                         f"(sweep it with budget.match=steps)")
    spec = OmegaConf.select(config, "experiment.baseline", default=None)
    base_values = split_override_string(str(spec)) if spec and "=" in str(spec) else {}
    if not base_values:
        base_values = {k: v for k, v in split_override_string(" ".join(definition[0])).items() if k in swept}
    costs: dict[tuple[str, ...], dict[str, float]] = {}

    def cost(job: list[str]) -> dict[str, float]:
        key = job_signature(o for o in job if override_key(o) != "seed")
        if key not in costs:
            costs[key] = job_cost(compose(job))
        return costs[key]

    jobs, steps_of, baselines = [], {}, {}
    for job in definition:
        base_job = [o for o in job if override_key(o) not in base_values]
        base_job += [f"{k}={v}" for k, v in base_values.items()]
        own, base = cost(job), cost(base_job)
        base_total = base["max_steps"] * base["tokens_per_step"] * (base["flops_per_token"] if match == "flops" else 1)
        per_step = own["tokens_per_step"] * (own["flops_per_token"] if match == "flops" else 1)
        steps = max(1, round(base_total / per_step))
        jobs.append([o for o in job if override_key(o) != STEPS_KEY] + [f"{STEPS_KEY}={steps}"])
        variant = job_variant(job, swept)
        steps_of[variant] = steps
        baselines[variant] = job_variant(base_job, swept)
    return jobs, {"match": match, "steps": steps_of, "baseline_of": baselines}


def tuning_jobs(definition: list[list[str]], swept: list[str], tune: dict[str, Any]) -> list[list[str]]:
    """One job per variant x learning rate x tuning seed: the variant's first job with the seed
    and the learning rate set (its other settings, e.g. a budget's steps, kept)."""
    first_of: dict[str, list[str]] = {}
    for job in definition:
        first_of.setdefault(job_variant(job, swept), [o for o in job if override_key(o) != "seed"])
    return [job + [f"seed={seed}", f"{LR_KEY}={lr_text(lr)}"]
            for job in first_of.values() for lr in tune["lr"] for seed in tune["seeds"]]


def _lr_of(job: list[str]) -> float:
    return next(float(o.split("=", 1)[1]) for o in job if override_key(o) == LR_KEY)


def choose_lr(records: list[dict], plan: SweepPlan) -> tuple[dict[str, float], dict[str, dict[str, float | None]]]:
    """Each variant's learning rate, chosen on the validation split of its tuning runs.

    The score of a learning rate is the mean over the tuning seeds of the validation loss (or of
    minus the validation accuracy, ``tune.metric=accuracy``); a run that diverged or failed scores
    +inf. The lowest finite score wins; on a tie, the smaller learning rate. A variant whose every
    run failed keeps the shared default. Returns ``(chosen, scores)``: the scores per variant and lr
    (``lr_text``) as the metric itself, None where no run finished."""
    assert plan.tune is not None
    metric, sign = plan.tune["metric"], (1.0 if plan.tune["metric"] == "loss" else -1.0)
    outcome: dict[tuple[str, ...], float] = {}
    for record in records:
        value = ((record.get("metrics") or {}).get("val") or {}).get(metric)
        ok = record.get("status") == "ok" and isinstance(value, (int, float)) and math.isfinite(value)
        outcome[job_signature(record.get("overrides"))] = sign * value if ok else math.inf
    runs: dict[str, dict[float, list[float]]] = {}
    for job in plan.first:
        per_lr = runs.setdefault(job_variant(job, plan.swept), {}).setdefault(_lr_of(job), [])
        if job_signature(job) in outcome:
            per_lr.append(outcome[job_signature(job)])
    chosen: dict[str, float] = {}
    scores: dict[str, dict[str, float | None]] = {}
    for variant, per_lr in runs.items():
        means = {lr: sum(v) / len(v) for lr, v in per_lr.items() if v}
        finite = {lr: m for lr, m in means.items() if math.isfinite(m)}
        scores[variant] = {lr_text(lr): sign * finite[lr] if lr in finite else None for lr in per_lr}
        chosen[variant] = min(finite, key=lambda lr: (finite[lr], lr)) if finite else plan.tune["default_lr"]
    return chosen, scores


def run_sweep(sweeper: Any, arguments: list[str]) -> list[Any]:
    """``Sweeper.sweep`` of ``hydra/sweeper=ablate``: launch the plan's first batch; for a tuned sweep
    then choose each variant's learning rate, record it in sweep.json, and launch the final runs
    that the first batch did not already run."""
    config = sweeper.config
    sweep_dir = Path(config.hydra.sweep.dir)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(config, sweep_dir / "multirun.yaml")

    def compose(overrides: list[str]) -> DictConfig:
        cfg = job_config(config, overrides)
        return OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])

    plan = plan_sweep(config, compose)
    launcher = launcher_kind(str(config.hydra.launcher.get("_target_", "")))
    if config.logger.name == "wandb" and launcher in ("joblib", "submitit_local"):
        from ablate.tracking import share_service

        share_service()  # the job processes on this machine log through this process's wandb service
    returns = [_launch(sweeper, plan.first, 0)]
    if plan.tune is None:
        return returns
    chosen, scores = choose_lr(load_records(sweep_dir), plan)
    final = plan.final_jobs(chosen)
    done = {job_signature(job) for job in plan.first}
    todo = [job for job in final if job_signature(job) not in done]
    launched = plan.first + todo
    plan.record(sweep_dir, launched, chosen=chosen, scores=scores)
    print("[ablate] learning rate chosen per variant on the validation split: "
          + "; ".join(f"{variant or 'defaults'}: {lr_text(lr)}" for variant, lr in chosen.items()))
    if todo:
        returns.append(_launch(sweeper, todo, len(plan.first)))
    return returns


def _launch(sweeper: Any, jobs: list[list[str]], first_index: int) -> Any:
    """One batch through the configured launcher (``hydra.sweeper.max_batch_size`` splits it)."""
    results: list[Any] = []
    # No ``validate_batch_is_legal`` (the basic sweeper's composition of every job, one more per job
    # before any starts): the sweep-start callback has composed and validated each of them already.
    for batch in sweeper.split_overrides_to_chunks(jobs, sweeper.max_batch_size):  # the basic sweeper's own
        results += list(sweeper.launcher.launch(batch, initial_job_idx=first_index + len(results)))
    for result in results:
        _ = result.return_value  # raises for a job that raised (Hydra's basic sweeper does the same)
    return results
