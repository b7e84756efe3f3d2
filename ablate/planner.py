"""What a multirun runs, planned once: Hydra's basic sweep plus designs, budgets and tuning.

Hydra's basic sweeper makes the cartesian product of the swept values and launches it as one
batch. Four things a fair ablation needs do not fit a product launched at once:

* ``experiment.design``: rows generated from a base (one change at a time, or leave one out), not a
  product of values (:func:`ablate.sweep.design_rows`);
* ``budget.match=tokens|flops``: each job's ``trainer.max_steps`` follows from its own and its
  baseline's cost, so a cheaper variant trains for more steps (:meth:`Planner.budget`);
* ``tune.lr=[...]``: the seeds may only start once each variant's learning rate has been chosen on
  the validation split, i.e. after a first stage of runs (``ablate.tuning``: the stages' jobs and
  :func:`ablate.tuning.choose_lr`);
* ``finetune.tasks=[...]``: every pretraining job is fine-tuned on each downstream task once it has
  ended, a second stage whose jobs are validated with the first (``ablate.finetune_plan``,
  ``ablate.finetune``).

:class:`Planner` turns a multirun's composed config into a :class:`ablate.sweep.SweepPlan` (the
jobs, the budget, the tuning) and validates every job on the way; a sweep that cannot run raises
:class:`SweepError`, whose message names every problem. Only ``hydra/sweeper=ablate``
(``ablate.sweeper``) plans this way; under another sweeper that launches a plain product
(``hydra/sweeper=basic``) the sweep-start callback runs the same planner with ``sweeper="basic"``,
which refuses what only ablate's sweeper can honour and validates the rest. Each job is composed
once, through the ``compose`` given (the launcher's own composition in a sweep; any function in
tests), and cached; a job that differs from one composed already only in its seed or its budget's
steps is a copy of that one with its own values, and the seeds of a job are validated once.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from typing import Any, Callable

from omegaconf import DictConfig, OmegaConf

from ablate.components import value_problem
from ablate.config import config_problems
from ablate.launchers import launcher_kind, sweeper_refusal
from ablate.settings import AUTO_SEED, RunSettings, Seed, apply_smoke
from ablate.finetune import finetune_jobs
from ablate.finetune_plan import check_finetune, plan_finetune
from ablate.tuning import LR_KEY, no_seed, tuning_jobs
from ablate.sweep import (SIZE_KEYS, Budget, Rounds, SweepPlan, Tuning, design_keys, design_rows, expand_sweep,
                          job_signature, job_value, job_variant, override_key,
                          split_override_string, swept_keys)

STEPS_KEY = "trainer.max_steps"

#: the keys a job's config may differ in from a job composed already, set on a copy of that one's
#: config: what Hydra's composition of a plain ``key=<digits>`` override does
COPIED_KEYS = ("seed", STEPS_KEY)


def _copied(override: str) -> bool:
    """Whether ``override`` is set on a copy: ``seed=3``, ``trainer.max_steps=100``; not ``+seed=3``
    nor ``seed=03`` (a string to Hydra)."""
    key, _, value = override.partition("=")
    return key in COPIED_KEYS and re.fullmatch(r"0|[1-9][0-9]*", value) is not None


def _valid_seed(override: str) -> bool:
    """A copied seed that is valid (:data:`ablate.settings.Seed`): what else of its job is checked
    does not depend on it."""
    key, _, value = override.partition("=")
    return _copied(override) and key == "seed" and not value_problem(int(value), Seed)


#: a job's config (without the ``hydra`` node) from its overrides
Compose = Callable[[list[str]], DictConfig]
#: what one training step of a config costs: ``{max_steps, tokens_per_step, flops_per_token}``
Cost = Callable[[DictConfig], dict[str, float]]


class SweepError(Exception):
    """A sweep that cannot run, found before anything trained; the message says why."""


class ComposedOnce:
    """Hydra's config loader, composing each job once (``load_sweep_config``): the plan composes
    a job to validate it (a job of each variant: the others are copies, ``Planner.compose``), and the
    launcher composes the same job again to run it; in the
    launching process (``hydra/launcher=basic``) the launcher is handed the plan's composition
    instead (one composition costs ~0.17 CPU-s). The planner keeps its own copy (without the
    ``hydra`` node), so the launcher may change the one it is handed. The other launchers compose in
    their job processes, so the sweeper uses this for the basic launcher only (a pickled copy holds
    nothing)."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader
        self._composed: dict[tuple[int, tuple[str, ...]], DictConfig] = {}

    def load_sweep_config(self, master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        key = (id(master_config), tuple(sweep_overrides))
        composed = self._composed.pop(key, None)  # handed over once: a second request composes anew
        if composed is None:
            composed = self._loader.load_sweep_config(master_config, list(sweep_overrides))
            self._composed[key] = composed
            return copy.deepcopy(composed)  # the first request's (the plan's): the launcher's is kept
        return composed

    def __getattr__(self, name: str) -> Any:  # the rest of Hydra's ConfigLoader, unchanged
        return getattr(self.__dict__["_loader"], name)

    def __getstate__(self) -> dict[str, Any]:
        return {"_loader": self._loader, "_composed": {}}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


def share_compositions(launcher: Any) -> ComposedOnce:
    """``launcher``'s config loader (every Hydra launcher holds its ``hydra_context``), replaced by
    one that remembers what it composed: planning and launching a job compose it once."""
    context = launcher.hydra_context
    if not isinstance(context.config_loader, ComposedOnce):
        launcher.hydra_context = dataclasses.replace(context, config_loader=ComposedOnce(context.config_loader))
    return launcher.hydra_context.config_loader


def launcher_compose(config: DictConfig, loader: Any = None) -> Compose:
    """A job's config as the launcher will compose it (Hydra's ``load_sweep_config``, through
    ``loader``: Hydra's own by default), without its ``hydra`` node, shrunk to a smoke test when
    ``smoke=true``: what the job itself will validate."""
    if loader is None:
        from hydra.core.global_hydra import GlobalHydra

        loader = GlobalHydra.instance().config_loader()

    def compose(overrides: list[str]) -> DictConfig:
        cfg = loader.load_sweep_config(config, list(overrides))
        cfg = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
        apply_smoke(cfg)
        return cfg

    return compose


class Planner:
    """Plans the multirun of ``config`` (composed with its ``hydra`` node) once.

    ``sweeper``: ``ablate`` plans designs, budgets and tuning; any other (``basic``) refuses them,
    since that sweeper launches the plain product itself. ``arguments``: the command line's
    overrides (default: ``hydra.overrides.task``). ``cost``: a budget's unit
    (``ablate.measure.job_cost``, the model on the meta device)."""

    def __init__(self, config: DictConfig, compose: Compose, cost: Cost | None = None,
                 sweeper: str = "ablate", arguments: list[str] | None = None) -> None:
        self.config, self.sweeper = config, sweeper
        self.settings = RunSettings.of(config)  # the run-level settings, read once
        self.arguments = list(config.hydra.overrides.task) if arguments is None else list(arguments)
        self._compose, self._cost = compose, cost
        self._configs: dict[tuple[str, ...], DictConfig] = {}
        #: the jobs composed (not copied), by their overrides other than the copied keys: {those keys: config}
        self._composed: dict[tuple[str, ...], dict[frozenset[str], DictConfig]] = {}
        self._problems: dict[tuple[str, ...], list[str]] = {}
        self._costs: dict[tuple[str, ...], dict[str, float]] = {}
        self._codec: Any = None  # a fine-tune stage's: the pretraining's vocabulary (TextCodec)

    def compose(self, job: list[str]) -> DictConfig:
        """A job's config, composed once. A job that differs from one composed already only in its
        seed or its budget's steps (:data:`COPIED_KEYS`) is a copy of that one with its own values:
        a sweep's seeds cost one composition (~0.17 CPU-s), not one each."""
        key = job_signature(job)
        if key not in self._configs:
            copied = dict(o.split("=", 1) for o in job if _copied(o))
            same = self._composed.setdefault(job_signature(o for o in job if not _copied(o)), {})
            twin = next((cfg for keys, cfg in same.items() if keys <= copied.keys()), None)
            if twin is None:
                twin = same[frozenset(copied)] = self._compose(list(job))
                copied = {}
            cfg = twin.copy() if copied else twin
            for name, value in copied.items():
                OmegaConf.update(cfg, name, int(value), merge=False)
            self._configs[key] = cfg
        return self._configs[key]

    def cost(self, job: list[str]) -> dict[str, float]:
        """What one step of a job costs (the same for every seed of it: costed once)."""
        key = job_signature(no_seed(job))
        if key not in self._costs:
            if self._cost is None:
                from ablate.measure import job_cost

                self._cost = job_cost
            self._costs[key] = self._cost(self.compose(job))
        return self._costs[key]

    # ------------------------------------------------------------------------------ the plan

    def plan(self) -> SweepPlan:
        """The sweep: every job validated, budgets set, tuning stages laid out. Raises SweepError."""
        params = self.config.hydra.sweeper.get("params") or {}
        try:
            product = expand_sweep([f"{k}={v}" for k, v in params.items()] + self.arguments)
        except Exception as error:  # noqa: BLE001 - Hydra's parser names the override
            raise SweepError(f"this sweep cannot run: {error}. Nothing was trained.") from error
        refused = self._refused_settings()
        if refused:
            raise SweepError(f"this sweep cannot run under hydra/sweeper={self.sweeper}: {refused}. "
                             "Nothing was trained.")
        design = self._design()
        try:
            definition, rounds = self._rounds(self._design_jobs(product, design))
            named = design_keys(design) if design else []
            swept = named + [k for k in swept_keys(definition) if k != LR_KEY and k not in named]
            tune = self._tuning(definition)
            definition, finetune, self._codec = plan_finetune(self.settings.finetune, self.compose, definition, swept)
        except ValueError as error:
            raise SweepError(f"this sweep cannot run: {error}. Nothing was trained.") from error
        ladder = self._ladder_refusal(swept) or self._rounds_refusal(rounds, swept, finetune)
        if ladder:
            raise SweepError(f"this sweep cannot run: {ladder}. Nothing was trained.")
        first = tuning_jobs(definition, swept, tune) if tune else definition
        if finetune is not None:
            try:
                for note in check_finetune(self.compose, self._codec, definition, finetune):
                    print(f"[ablate] {note}", flush=True)
            except ValueError as error:
                raise SweepError(f"this sweep cannot run: {error}. Nothing was trained.") from error
        self._validate(definition + [job for job in first if job_signature(job) not in
                                     {job_signature(j) for j in definition}]
                       + (finetune_jobs(finetune, definition) if finetune is not None else []))
        if tune is not None and tune.rungs == "smallest":
            try:
                tune.transfer = self._rung_transfer(definition, swept)
            except ValueError as error:
                raise SweepError(f"this sweep cannot run: {error}. Nothing was trained.") from error
            first = tuning_jobs(definition, swept, tune)
        match = self.settings.budget.match  # steps: each its own
        budget = None
        if match != "steps" and self.config.get("smoke") is not True:  # a smoke test: few steps
            try:
                definition, budget = self.budget(definition, swept, match)
            except ValueError as error:
                raise SweepError(f"this sweep cannot run: {error}. Nothing was trained.") from error
            first = tuning_jobs(definition, swept, tune) if tune else definition
        if rounds is not None and tune is None:  # the first round; the sweeper adds the others as they are needed
            first = [job for job in first if int(job_value(job, "seed")) < rounds.looks()[0]]
        return SweepPlan(swept=swept, jobs=first, definition=definition, budget=budget, tune=tune, finetune=finetune,
                         rounds=rounds)

    def _rounds(self, jobs: list[list[str]]) -> tuple[list[list[str]], Rounds | None]:
        """``seed=auto``: each job once per seed up to ``stats.max_seeds`` (the most the rounds can run;
        the sweeper launches them round by round), and the rounds' settings; else the jobs as they are."""
        seeds = [job_value(job, "seed") for job in jobs]
        if AUTO_SEED not in seeds:
            return jobs, None
        if set(seeds) != {AUTO_SEED}:
            given = sorted({s for s in seeds if s != AUTO_SEED and s is not None})
            raise ValueError(f"seed={AUTO_SEED} lets the sweep choose the seeds, in rounds; it cannot be swept with "
                             f"explicit seeds ({', '.join(given) or 'the config seed'}): give seed={AUTO_SEED} alone, "
                             "or a list of seeds (seed=0,1,2) for a fixed design")
        stats = self.settings.stats
        if stats.mde is None:
            raise ValueError(f"seed={AUTO_SEED} decides each comparison with its baseline as different, or "
                             "equivalent within the smallest effect you care about, which it needs: set stats.mde "
                             "in accuracy points, e.g. stats.mde=1.0")
        rounds = Rounds(min_seeds=stats.min_seeds, max_seeds=stats.max_seeds, round_seeds=stats.round_seeds,
                        mde=float(stats.mde), alpha=stats.alpha, spending=stats.spending, power=stats.power, run=1)
        return [[o for o in job if override_key(o) != "seed"] + [f"seed={seed}"]
                for job in jobs for seed in range(rounds.max_seeds)], rounds

    def _rounds_refusal(self, rounds: Rounds | None, swept: list[str], finetune: Any) -> str | None:
        """What seed rounds cannot decide: a sweep of one variant (nothing to compare), a scale ladder
        (its answer is a compute multiplier per rung and a trend, not one paired difference), a
        fine-tune stage (not yet: it would decide on the downstream average, per pretraining seed)."""
        if rounds is None:
            return None
        if not [k for k in swept if k != "seed"]:
            return (f"seed={AUTO_SEED} decides comparisons of variants with a baseline, and this sweep has one "
                    "variant; sweep a key with two values or more (e.g. qkv_sharing=independent,qk_shared)")
        if self.settings.experiment.ladder != "off" and any(k in swept for k in SIZE_KEYS):
            return (f"seed={AUTO_SEED} decides paired differences row by row, but a sweep over model size is a scale "
                    "ladder, whose answer is each rung's compute multiplier and its trend (with bootstrap intervals "
                    "over seeds); run a ladder with fixed seeds (seed=0,1,2), or set experiment.ladder=off to decide "
                    "each size's rows as a flat table")
        if finetune is not None:
            return (f"seed={AUTO_SEED} with finetune.tasks is not supported yet (the rounds would be pretraining seeds, "
                    "decided on the downstream average); give fixed seeds (seed=0,1,2) for a pretrain-then-fine-tune "
                    "sweep")
        return None

    def _refused_settings(self) -> str | None:
        if self.sweeper == "ablate":
            return None
        return sweeper_refusal(self.config, self.sweeper)

    def _ladder_refusal(self, swept: list[str]) -> str | None:
        """``experiment.ladder=on`` asks for the table as a scale ladder, whose rungs are the values of a
        swept size key; a sweep without one would train every job and then have no table to save."""
        if self.settings.experiment.ladder != "on" or any(k in swept for k in SIZE_KEYS):
            return None
        others = ", ".join(k for k in swept if k != "seed") or "no key but the seed"
        return (f"experiment.ladder=on lays the table out as a scale ladder, whose rungs are the values of a swept "
                f"model size key ({', '.join(SIZE_KEYS)}), but this sweep sweeps {others}; sweep a size key "
                "(e.g. model.size=3xs,2xs,xs), or set experiment.ladder=auto or off")

    def _design(self) -> dict | None:
        return self.settings.experiment.design or None

    @staticmethod
    def _design_jobs(jobs: list[list[str]], design: dict | None) -> list[list[str]]:
        """Each job of the product once per row of ``experiment.design`` (rows first, so that in a
        table of rows x seeds every row keeps its place)."""
        if not design:
            return jobs
        rows = design_rows(design)
        keys = {k for _, row in rows for k in row}
        clash = sorted({override_key(o) for job in jobs for o in job} & keys)
        if clash:
            raise ValueError(f"{', '.join(clash)}: set by experiment.design's rows; the command line cannot also "
                             "set or sweep it (remove it, or change the design)")
        return [[f"{k}={v}" for k, v in row.items()] + job for _, row in rows for job in jobs]

    def _tuning(self, definition: list[list[str]]) -> Tuning | None:
        tune = self.settings.tune
        grid = [float(x) for x in tune.lr]
        if not grid:
            return None
        if any(override_key(o) == LR_KEY for job in definition for o in job):
            raise ValueError(f"tune.lr chooses {LR_KEY} per variant; the command line cannot also set or sweep "
                             f"{LR_KEY} (remove it, or drop tune.lr)")
        default = float(self.config.optim.lr)
        seeds = [int(job_value(job, "seed")) for job in definition if job_value(job, "seed") is not None]
        return Tuning(lr=sorted(set(grid) | {default}), default_lr=default,
                      seeds=[int(s) for s in tune.seeds], metric=tune.metric,
                      final_seeds=sorted(set(seeds)) or [int(self.config.seed)], rungs=tune.rungs)

    def _rung_transfer(self, definition: list[list[str]], swept: list[str]) -> dict[str, str]:
        """``tune.rungs=smallest``: each variant of a larger model size -> the variant of the same row
        (the same settings but the size keys) with the fewest parameters, whose tuned lr it reuses.
        μP is what makes that lr right at the larger widths, so every job must run under it."""
        size = [k for k in SIZE_KEYS if k in swept]
        if not size:
            raise ValueError(f"tune.rungs=smallest tunes the smallest model size and reuses its lr at the larger "
                             f"ones, but this sweep sweeps no model size ({', '.join(SIZE_KEYS)}); use tune.rungs=all")
        standard = list(dict.fromkeys(job_variant(job, swept) or "defaults" for job in definition
                                      if self.compose(job).model.parametrization != "mup"))
        if standard:
            raise ValueError(f"tune.rungs=smallest reuses the smallest model's lr at larger widths, which holds under "
                             f"μP only, but {', '.join(standard[:3])}{' ...' if len(standard) > 3 else ''} run "
                             "model.parametrization=standard; set model.parametrization=mup (and "
                             "model.mup_base_width), or tune.rungs=all")
        rows: dict[str, dict[str, float]] = {}
        for job in definition:
            rest = job_variant([o for o in job if override_key(o) not in size], swept)
            rows.setdefault(rest, {})[job_variant(job, swept)] = self.cost(job)["params"]
        transfer = {}
        for params in rows.values():
            smallest = min(params, key=params.get)
            transfer |= {variant: smallest for variant in params if variant != smallest}
        return transfer

    # ------------------------------------------------------------------------------ validation

    def job_problems(self, job: list[str]) -> list[str]:
        """Every problem of one job's composed config (empty when it can run); the seeds of a job are
        checked once."""
        key = job_signature(o for o in job if not _valid_seed(o))
        if key not in self._problems:
            self._problems[key] = self._job_problems(job)
        return self._problems[key]

    def _job_problems(self, job: list[str]) -> list[str]:
        try:
            cfg = self.compose(job)
        except Exception as error:  # noqa: BLE001 - a composition error is a problem of this job
            return [str(error)]
        problems = config_problems(cfg)
        launcher = launcher_kind(str(self.config.hydra.launcher.get("_target_", "")))
        if str(cfg.trainer.get("strategy", "auto")).startswith("ddp") and launcher != "submitit_slurm":
            # Lightning starts DDP ranks by re-running the command line: in a local multirun every rank
            # would re-launch the whole sweep. SLURM starts the ranks itself (one task per GPU).
            problems.append(f"trainer.strategy={cfg.trainer.strategy} in a multirun needs "
                            "hydra/launcher=submitit_slurm with hydra.launcher.tasks_per_node=<GPUs>; "
                            "or run the job alone: ablate trainer=ddp ...")
        if self.sweeper != "ablate":  # a sweep over budget.match or an experiment with a design
            refusal = sweeper_refusal(cfg, self.sweeper)
            if refusal:
                problems.append(refusal)
        return problems

    def _validate(self, jobs: list[list[str]]) -> None:
        bad = {" ".join(job) or "(defaults)": problems for job in jobs if (problems := self.job_problems(job))}
        if bad:
            lines = [f"{len(bad)} job(s) of this sweep have an invalid config; nothing was trained:"]
            for job, problems in bad.items():
                lines += [f"  {job}:"] + [f"    - {p}" for p in problems]
            raise SweepError("\n".join(lines))

    # ------------------------------------------------------------------------------ budgets

    def budget(self, definition: list[list[str]], swept: list[str], match: str) -> tuple[list[list[str]], Budget]:
        """Each job with ``trainer.max_steps`` set so that it trains on as many tokens (``match=tokens``)
        or training FLOPs (``match=flops``) as its baseline does in the baseline's ``trainer.max_steps``
        (rounded to the nearest step, so within half a step's worth). The baseline of a job is the job
        with the baseline's values in place of its own, its other values kept: in a sweep over task x
        variant, the baseline variant on the same task. The baseline's values are
        ``experiment.baseline``'s; else a design's base row's; else the first value of the one key
        the sweep varies. A sweep of several keys without ``experiment.baseline`` is refused: which
        of them names the baseline, and which are conditions each value of which gets its own, only
        the user can say."""
        if STEPS_KEY in swept:
            raise ValueError(f"budget.match={match} sets {STEPS_KEY} per job; it cannot also be swept "
                             f"(sweep it with budget.match=steps)")
        if match == "tokens_per_param":
            return self._ladder_budget(definition, swept)
        jobs, budget = [], Budget(match=match)
        base_values = self._budget_baseline(definition, swept, match)
        for job in definition:
            base_job = [o for o in job if override_key(o) not in base_values]
            base_job += [f"{k}={v}" for k, v in base_values.items() if v is not None]
            own, base = self.cost(job), self.cost(base_job)
            base_tokens = base["max_steps"] * base["tokens_per_step"]
            base_total = base_tokens * (base["flops_per_token"] if match == "flops" else 1)
            per_step = own["tokens_per_step"] * (own["flops_per_token"] if match == "flops" else 1)
            steps = max(1, round(base_total / per_step))
            jobs.append([o for o in job if override_key(o) != STEPS_KEY] + [f"{STEPS_KEY}={steps}"])
            variant = job_variant(job, swept)
            budget.steps[variant] = steps
            budget.baseline_of[variant] = job_variant(base_job, swept)
            budget.baseline_tokens[variant] = int(base_tokens)  # what the caption says was matched
            budget.baseline_train_flops[variant] = float(base_tokens * base["flops_per_token"])
        return jobs, budget

    def _ladder_budget(self, definition: list[list[str]], swept: list[str]) -> tuple[list[list[str]], Budget]:
        """``budget.match=tokens_per_param``: each job trains on ``budget.tokens_per_param`` tokens per
        parameter of its own model (a scale ladder's rule: Hoffmann et al. 2022's compute-optimal
        ratio is about 20), i.e. ``round(ratio * params / tokens per step)`` steps, at least 1."""
        ratio = float(self.settings.budget.tokens_per_param)
        jobs, budget = [], Budget(match="tokens_per_param", tokens_per_param=ratio)
        for job in definition:
            cost = self.cost(job)
            steps = max(1, round(ratio * cost["params"] / cost["tokens_per_step"]))
            jobs.append([o for o in job if override_key(o) != STEPS_KEY] + [f"{STEPS_KEY}={steps}"])
            budget.steps[job_variant(job, swept)] = steps
        return jobs, budget

    def _budget_baseline(self, definition: list[list[str]], swept: list[str], match: str) -> dict[str, str | None]:
        """The values that make a job its own baseline (see :meth:`budget`); None: the key's
        override is dropped (a design key its base row leaves at the config's value)."""
        spec = self.settings.experiment.baseline
        if spec and "=" in str(spec):
            return split_override_string(str(spec))
        design = self._design()
        if design:
            base_row = design_rows(design)[0][1]
            return {k: base_row.get(k) for k in design_keys(design)}
        keys = [k for k in swept if k != "seed"]
        if len(keys) > 1:
            first = split_override_string(" ".join(definition[0]))
            raise ValueError(
                f"budget.match={match} gives every job its baseline's {match}, but this sweep varies "
                f"{', '.join(keys)} and nothing says which of them names the baseline; set experiment.baseline "
                f"to the baseline's value of the key being ablated, e.g. experiment.baseline='{keys[0]}="
                f"{first.get(keys[0])}' (each job then gets the budget of that value at its own "
                f"{', '.join(keys[1:])})")
        return {keys[0]: split_override_string(" ".join(definition[0]))[keys[0]]} if keys else {}


def variant_configs(planner: Planner, plan: SweepPlan, jobs: list[list[str]] | None = None) -> dict[str, DictConfig]:
    """One config per variant of ``jobs`` (default: the definition), the first job of each as
    composed: what ``ablate-bench`` times (``--plan`` keeps a config per step time it looks up, a
    fine-tune's per task too: ``preview._estimate``)."""
    configs: dict[str, DictConfig] = {}
    for job in plan.definition if jobs is None else jobs:
        key = plan.variant(job)
        if key not in configs:
            configs[key] = planner.compose(job)
    return configs
