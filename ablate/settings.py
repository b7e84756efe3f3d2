"""The settings classes of the config's plain run nodes (``logger``, ``experiment``, ``eval``,
``budget``, ``checkpoint``, ``tune``, ``finetune``, ``stats``; ``model``'s, ``optim``'s and ``measure``'s live beside their code),
and what a smoke test (:func:`apply_smoke`) and an optimising sweeper (:func:`optimized_value`) read
of a config. ``ablate.config`` checks a config against them.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Mapping, TypeVar

from omegaconf import DictConfig, OmegaConf

from ablate.components import NonNegativeInt, PositiveFloat, PositiveInt, Range
from ablate.record import from_fields

Seed = Annotated[int, Range(0, 2**32 - 1)]  # what Lightning's seed_everything accepts


@dataclass
class LoggerSettings:
    """The ``logger`` node. wandb's ``entity`` (None: ``WANDB_ENTITY`` or your default), ``tags`` added
    to every job run's own (experiment, ``smoke``, code version) and ``notes`` put before its command line."""

    name: Literal["wandb", "csv", "tensorboard", "mlflow", "none"]  # the last of several (use: all of them)
    project: str | None = None
    entity: str | None = None
    tags: list[str] = field(default_factory=list)
    notes: str | None = None
    use: dict | None = None          # {logger: true} per option chosen: logger=[wandb,tensorboard] (loggers.logger_names)
    tensorboard: dict | None = None  # {save_dir}
    mlflow: dict | None = None       # {tracking_uri, experiment, tags}

    @classmethod
    def problems(cls, settings: Mapping[str, Any], context: Any = None) -> list[str]:
        from ablate.loggers import logger_problems, uses_wandb

        tags = settings.get("tags")
        out = [f"logger.tags: {tag!r} must be 1 to 64 characters (wandb's limit)" for tag in
               (tags if isinstance(tags, list) else []) if isinstance(tag, str) and not 0 < len(tag) <= 64]
        out += logger_problems(settings)
        mode = os.environ.get("WANDB_MODE")
        if uses_wandb(settings) and mode and mode not in WANDB_MODES:
            out.append(f"the environment's WANDB_MODE={mode!r} is not a wandb mode; valid: {', '.join(WANDB_MODES)} "
                       "(or unset: online with credentials, else offline)")
        return out


#: what wandb accepts in WANDB_MODE (``dryrun`` is its old name for offline)
WANDB_MODES = ("online", "offline", "disabled", "dryrun")


DESIGNS = ("one_at_a_time", "leave_one_out")


@dataclass
class ExperimentSettings:
    """The ``experiment`` node a named experiment fills in."""

    name: str | None = None
    baseline: str | None = None
    labels: dict = field(default_factory=dict)
    columns: str | None = None          # a swept key pivoted into the table's columns
    rows: list[str] | None = None       # the rows shown, in order (variant keys or labels)
    design: dict | None = None          # rows generated from a base (ablate.sweep.design_rows)
    # the table of a sweep that sweeps a size key: "auto" a ladder (compute multipliers, scaling.png),
    # "off" the flat table (widths as rows, e.g. experiment=lr_transfer); ablate-table --ladder overrides
    ladder: Literal["auto", "on", "off"] = "auto"

    @classmethod
    def problems(cls, settings: Mapping[str, Any], context: Any = None) -> list[str]:
        design = settings.get("design")
        if design is None or not isinstance(design, Mapping):
            return []
        out = [f"experiment.design.{k}: not a key of a design; valid keys: kind, base, changes"
               for k in design if k not in ("kind", "base", "changes", "base_label")]
        if design.get("kind") not in DESIGNS:
            out.append(f"experiment.design.kind={design.get('kind')!r}; valid choices: {', '.join(DESIGNS)}")
        base, changes = design.get("base", {}), design.get("changes")
        if not isinstance(base, Mapping):
            out.append(f"experiment.design.base must map config keys to values, got {base!r}")
        if not isinstance(changes, Mapping) or not changes:
            out.append(f"experiment.design.changes must map each row's label to the overrides that make it "
                       f"({{label: {{key: value}}}}), got {changes!r}")
            return out
        for row, overrides in changes.items():
            if not isinstance(overrides, Mapping) or not overrides:
                out.append(f"experiment.design.changes.{row} must map config keys to values, got {overrides!r}")
            elif isinstance(base, Mapping) and all(base.get(k) == v for k, v in overrides.items()):
                out.append(f"experiment.design.changes.{row} changes nothing of the base ({dict(overrides)})")
        return out


@dataclass
class EvalSettings:
    """The ``eval`` node: evaluation on the validation split during training (learning curves)."""

    every: NonNegativeInt = 100  # conf/config.yaml's default: a learning curve (16 points in 1500 steps)
    # Where "early loss" is read: the evaluation at this fraction of the run's optimizer steps, in the
    # same run (its learning rate still on its schedule). 0.25, not Narang et al. 2021's 1/8: in the
    # short runs ablate is built for (250-1500 steps) 1/8 falls inside or at the end of the default
    # 100-step warm-up, where the loss measures the warm-up more than the variant.
    early_fraction: Annotated[float, Range(0, 1, low_open=True, high_open=True)] = 0.25


@dataclass
class BudgetSettings:
    """The ``budget`` node: what every variant of a sweep gets as much of as the baseline, or (a
    scale ladder) how many training tokens each job gets per parameter of its own model."""

    match: Literal["steps", "tokens", "flops", "tokens_per_param"] = "steps"
    # tokens_per_param: each job trains on this many tokens per (trainable) parameter; Hoffmann et al.
    # 2022's compute-optimal ratio is about 20, smaller values keep a CPU ladder short
    tokens_per_param: PositiveFloat = 20.0


@dataclass
class CheckpointSettings:
    """The ``checkpoint`` node: saving a job's training state, so that a relaunch resumes it."""

    every_n_steps: NonNegativeInt = 0
    keep: bool = False


@dataclass
class TuneSettings:
    """The ``tune`` node: per-variant learning-rate tuning on the validation split."""

    lr: list[PositiveFloat] = field(default_factory=list)
    seeds: list[Seed] = field(default_factory=lambda: [0])
    metric: Literal["loss", "accuracy"] = "loss"
    # "smallest": in a sweep over model size, tune on the smallest rung only and reuse its lr at the
    # larger ones (needs model.parametrization=mup, under which the optimum does not move with width)
    rungs: Literal["all", "smallest"] = "all"

    @classmethod
    def problems(cls, settings: Mapping[str, Any], context: Any = None) -> list[str]:
        seeds = settings.get("seeds")
        if isinstance(seeds, list) and not seeds and settings.get("lr"):
            return ["tune.seeds=[] gives the tuning runs no seed; e.g. tune.seeds=[0]"]
        return []


#: ``seed=auto``: the sweep chooses its seeds, in rounds (``stats.*``)
AUTO_SEED = "auto"


@dataclass
class StatsSettings:
    """The ``stats`` node: seeds in rounds (``seed=auto``: a first round for every row, then more
    seeds only for the comparisons still undecided, up to a cap; ``ablate.sequential``) and the power
    ``--plan`` states. ``mde``: the smallest effect of interest, in accuracy points (1.0 = one point)."""

    mde: PositiveFloat | None = None
    min_seeds: Annotated[int, Range(2)] = 3        # the first round's seeds (a paired spread needs two)
    max_seeds: Annotated[int, Range(2, 1000)] = 10  # the cap: at most this many seeds for any row
    round_seeds: PositiveInt = 2                   # seeds each later round adds
    alpha: Annotated[float, Range(0, 0.5, low_open=True)] = 0.05   # family-wise, two-sided
    power: Annotated[float, Range(0, 1, low_open=True, high_open=True)] = 0.8  # --plan's seeds for this power
    spending: Literal["obrien_fleming", "pocock"] = "obrien_fleming"  # the alpha-spending function of the rounds

    @classmethod
    def problems(cls, settings: Mapping[str, Any], context: Any = None) -> list[str]:
        low, high = settings.get("min_seeds"), settings.get("max_seeds")
        if isinstance(low, int) and isinstance(high, int) and high < low:
            return [f"stats.max_seeds={high} is below stats.min_seeds={low} (the first round); the cap must be at "
                    f"least the first round, e.g. stats.max_seeds={max(low, 10)}"]
        return []


FINETUNE_MODES = ("full", "probe")


@dataclass
class FinetuneSettings:
    """The ``finetune`` node: a sweep that pretrains, then fine-tunes every pretrained checkpoint on
    each of ``tasks`` (``conf/task/<name>.yaml``) with its own steps, learning rate and seeds
    (``ablate.finetune``). ``from_job`` and ``seed`` are set by the sweep on a fine-tune job."""

    tasks: list[str] = field(default_factory=list)
    steps: PositiveInt = 200
    lr: PositiveFloat = 1.0e-3
    tune_lr: list[PositiveFloat] = field(default_factory=list)  # a grid: each task at each, the best on validation kept
    batch_size: PositiveInt | None = None   # null: the downstream task's own
    seq_len: PositiveInt | None = None      # null: the downstream task's own
    seeds: list[Seed] = field(default_factory=lambda: [0])
    mode: Literal["full", "probe"] = "full"
    settings: dict = field(default_factory=dict)  # task name -> {task key: value}
    per_task: dict = field(default_factory=dict)  # task name -> {steps, lr}: that task's, instead of the two above
    from_job: str | None = None             # a fine-tune job's pretraining job directory (its name in the sweep)
    seed: Seed = 0                          # a fine-tune job's fine-tune seed

    @classmethod
    def problems(cls, settings: Mapping[str, Any], context: Any = None) -> list[str]:
        out = []
        if isinstance(settings.get("seeds"), list) and not settings["seeds"] and settings.get("tasks"):
            out.append("finetune.seeds=[] gives the fine-tunes no seed; e.g. finetune.seeds=[0]")
        tasks, per_task = settings.get("tasks"), settings.get("settings")
        if isinstance(tasks, list) and len(set(map(str, tasks))) < len(tasks):
            out.append(f"finetune.tasks={list(tasks)} names a task twice; name each once")
        if isinstance(per_task, Mapping) and isinstance(tasks, list):
            out += [f"finetune.settings.{name}: not one of finetune.tasks ({', '.join(map(str, tasks)) or 'none'})"
                    for name in per_task if name not in tasks]
            out += [f"finetune.settings.{name} must map task keys to values, got {value!r}"
                    for name, value in per_task.items() if not isinstance(value, Mapping)]
        own = settings.get("per_task")
        if isinstance(own, Mapping) and isinstance(tasks, list):
            out += cls._per_task_problems(own, tasks)
        elif own is not None and not isinstance(own, Mapping):
            out.append(f"finetune.per_task must map a task to its steps and lr, e.g. "
                       f"+finetune.per_task.py_tokens.steps=100; got {own!r}")
        return out

    @staticmethod
    def _per_task_problems(own: Mapping[str, Any], tasks: list) -> list[str]:
        out = []
        for name, keys in own.items():
            where = f"finetune.per_task.{name}"
            if name not in tasks:
                out.append(f"{where}: not one of finetune.tasks ({', '.join(map(str, tasks)) or 'none'})")
            elif not isinstance(keys, Mapping):
                out.append(f"{where} must map steps and lr to values, got {keys!r}")
            else:
                for key, value in keys.items():
                    if key not in PER_TASK_KEYS:
                        out.append(f"{where}.{key}: not a per-task key; valid: {', '.join(PER_TASK_KEYS)}")
                    elif isinstance(value, bool) or not isinstance(value, PER_TASK_KEYS[key]) or value <= 0:
                        kind = "integer" if key == "steps" else "number"
                        out.append(f"{where}.{key}={value!r} must be a positive {kind}")
        return out


#: what ``finetune.per_task.<task>`` may set, with the type of its value
PER_TASK_KEYS: dict[str, type | tuple[type, ...]] = {"steps": int, "lr": (int, float)}


T = TypeVar("T")


def read_settings(cls: type[T], node: Any) -> T:
    """A config node (validated) as its settings class: the keys the class names, each absent one at
    the class's default (the one default of that key: ``tests/test_settings.py`` holds it to
    ``conf/config.yaml``'s); other keys (a user's additions to an experiment) are not its business."""
    return from_fields(cls, OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig)
                       else dict(node or {}))


@dataclass
class RunSettings:
    """The run-level nodes that the planner and a job read (``experiment``, ``eval``, ``budget``,
    ``checkpoint``, ``tune``, ``finetune``), read once from a config: what crosses from the config into the
    planner, the job and its record is these objects, not the raw config with defaults of its own."""

    experiment: ExperimentSettings = field(default_factory=ExperimentSettings)
    eval: EvalSettings = field(default_factory=EvalSettings)
    budget: BudgetSettings = field(default_factory=BudgetSettings)
    checkpoint: CheckpointSettings = field(default_factory=CheckpointSettings)
    tune: TuneSettings = field(default_factory=TuneSettings)
    finetune: FinetuneSettings = field(default_factory=FinetuneSettings)
    stats: StatsSettings = field(default_factory=StatsSettings)

    @classmethod
    def of(cls, cfg: Any) -> "RunSettings":
        return cls(experiment=read_settings(ExperimentSettings, cfg.get("experiment")),
                   eval=read_settings(EvalSettings, cfg.get("eval")),
                   budget=read_settings(BudgetSettings, cfg.get("budget")),
                   checkpoint=read_settings(CheckpointSettings, cfg.get("checkpoint")),
                   tune=read_settings(TuneSettings, cfg.get("tune")),
                   finetune=read_settings(FinetuneSettings, cfg.get("finetune")),
                   stats=read_settings(StatsSettings, cfg.get("stats")))


#: what a job may return to the sweeper (``optimized_metric``): a validation metric at the end of
#: training (``metrics.val`` of its record), so an optimising sweeper never selects on the test split
OPTIMIZED_METRICS = ("val/loss", "val/accuracy")


def optimized_value(metrics: Mapping[str, Any], name: str) -> float:
    """The value of ``optimized_metric`` in a record's metrics (NaN when the run has none, e.g. it
    diverged or failed: an optimiser then counts the trial as failed, not as a result)."""
    value = (metrics.get("val") or {}).get(name.split("/", 1)[1])
    return float(value) if isinstance(value, (int, float)) else math.nan


#: what a smoke test keeps of a run (``smoke=true``, ``ablate --smoke``): enough steps to pass
#: through warm-up, evaluation and the table, a small held-out set
SMOKE = {"trainer.max_steps": 20, "measure.warmup_steps": 5, "optim.warmup_steps": 5, "task.n_test": 64,
         "task.n_val": 64}


def apply_smoke(cfg: DictConfig) -> None:
    """Shrink ``cfg`` in place to a smoke test when ``cfg.smoke`` is true: each of ``SMOKE``'s keys
    that the config has is capped at its value (an experiment's own budget included)."""
    if cfg.get("smoke") is not True:
        return
    for key, cap in SMOKE.items():
        value = OmegaConf.select(cfg, key)
        if isinstance(value, int) and not isinstance(value, bool) and value > cap:
            OmegaConf.update(cfg, key, cap, merge=False)
