"""Power before a run: how many paired seeds each comparison needs (``--plan`` with ``stats.mde``).

For each comparison of a row with its baseline, the spread of its paired differences comes from this
sweep's own records where they have two seeds or more of both rows, else from the per-user cache of
spreads measured here (``ablate.seed_spreads``: keyed by both configs, its source and age said).
With a spread, the advice is the smallest number of paired seeds that gives ``stats.power`` at the
effect ``stats.mde`` in a paired t-test at Holm's first level (alpha over the number of comparisons:
the level the table's hardest comparison is tested at), what those seeds cost here, and, for a
``seed=auto`` sweep, the rounds' power at the cap and the seeds they use on average at that effect
(``ablate.sequential``). Without one, it says so and what a first round would cost.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from omegaconf import OmegaConf

from ablate.jobdir import job_dir_name
from ablate.record import Record, read_record
from ablate.seed_spreads import Spread, paired_spread, recall, spread_key
from ablate.sweep import SweepPlan, split_override_string, variant_overrides


@dataclass
class ComparisonPower:
    """One comparison's power advice (accuracy differences as fractions)."""

    variant: str
    baseline: str
    spread: Spread | None           # None: nothing known for these settings
    from_records: bool = False      # the spread is this sweep's own records' (else the cache's)
    seeds: int | None = None        # paired seeds for the power asked, fixed design (None: more than the most)
    rounds_power: float | None = None    # seed=auto: P(different) at the effect mde, at the rounds' level
    rounds_seeds: float | None = None    # seed=auto: paired seeds used on average at that effect


@dataclass
class PowerAdvice:
    """What ``--plan`` says of the power of a sweep's comparisons."""

    mde: float            # in accuracy points
    alpha: float
    power: float
    level: float          # the level each comparison's seeds are sized for (alpha / comparisons)
    comparisons: list[ComparisonPower]


def baselines(plan: SweepPlan, spec: str | None, labels: dict[str, str] | None = None) -> dict[str, str]:
    """Each variant of the definition that is compared -> its baseline's variant, as the table pairs
    them: ``spec`` (``experiment.baseline``: an override string naming some or all swept keys, or a
    label) with the variant's other values kept; else the first variant."""
    jobs: dict[str, list[str]] = {}
    for job in plan.definition:
        jobs.setdefault(plan.variant(job), job)
    names = list(jobs)
    if not names:
        return {}
    by_label = {label: variant for variant, label in (labels or {}).items()}
    wanted = split_override_string(str(spec)) if spec and "=" in str(spec) else {}
    out = {}
    for variant, job in jobs.items():
        base = names[0]
        if wanted:
            own = variant_overrides(job, plan.swept)
            target = {**own, **{k: v for k, v in wanted.items() if k in own}}
            base = next((v for v, j in jobs.items() if variant_overrides(j, plan.swept) == target), names[0])
        elif spec and str(spec) in by_label:
            base = by_label[str(spec)]
        if variant != base:
            out[variant] = base
    return out


def variant_values(records: Iterable[Record], plan: SweepPlan) -> dict[str, dict[int, float]]:
    """Of ok records with a headline accuracy (pretraining and plain jobs; a fine-tune's are its
    task's): variant -> {seed: accuracy}."""
    values: dict[str, dict[int, float]] = {}
    for record in records:
        seed = record.config.get("seed")
        if not record.ok or record.stage == "finetune" or not isinstance(seed, int) \
                or not isinstance(record.metrics.accuracy, (int, float)):
            continue
        values.setdefault(plan.variant(record.overrides), {})[seed] = float(record.metrics.accuracy)
    return values


def power_advice(planner: Any, plan: SweepPlan, sweep_dir: Path) -> PowerAdvice | None:
    """The advice for ``plan`` (None without ``stats.mde``)."""
    from ablate.sequential import seeds_for_power, sequential_power

    stats = planner.settings.stats
    if stats.mde is None:
        return None
    experiment = planner.settings.experiment
    pairs = baselines(plan, experiment.baseline, dict(experiment.labels or {}))
    level = stats.alpha / max(1, len(pairs))
    effect = float(stats.mde) / 100.0
    found = (read_record(Path(sweep_dir) / job_dir_name(job)) for job in plan.definition)
    values = variant_values([r for r in found if r is not None], plan)
    first_job = {}
    for job in plan.definition:
        first_job.setdefault(plan.variant(job), job)
    advice = PowerAdvice(mde=float(stats.mde), alpha=stats.alpha, power=stats.power, level=level, comparisons=[])
    for variant, base in pairs.items():
        measured = paired_spread(values.get(variant, {}), values.get(base, {}))
        spread, own = None, False
        if measured is not None:
            spread, own = Spread(measured[0], measured[1], time.time(), str(sweep_dir)), True
        else:
            configs = [OmegaConf.to_container(planner.compose(first_job[v]), resolve=True) for v in (variant, base)]
            spread = recall(spread_key(*configs))
        entry = ComparisonPower(variant, base, spread, from_records=own)
        if spread is not None:
            entry.seeds = seeds_for_power(spread.sd, effect, level, stats.power)
            if plan.rounds is not None:
                entry.rounds_power, entry.rounds_seeds = sequential_power(plan.rounds.design(), spread.sd, effect, level,
                                                                          reps=4000)
        advice.comparisons.append(entry)
    return advice
