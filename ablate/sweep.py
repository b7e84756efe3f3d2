"""A sweep's jobs and variants: the one definition of both.

A *job* is one list of Hydra overrides (``qkv_sharing=qk_shared seed=1 ...``). A *variant* is
what a job's overrides say once the seed is set aside: the job's overrides of the sweep's swept
keys, without ``seed``, ``experiment=`` and ``hydra...`` keys. The swept keys are those recorded
in the sweep's ``sweep.json`` at its start; where there is none (records copied out of their
sweep, another sweeper), the keys whose values vary across the records. A single run outside a
sweep has no swept keys to go by: all its overrides but those three make its variant.

Every consumer names a variant by :func:`variant_key` (sorted ``key=value`` pairs joined by
``,``): the wandb config key ``variant`` of a job (``ablate.run``), the rows of the table
(``ablate.report``) and the keys of ``bench.json`` (``ablate.bench``), so the three always agree.

A sweep's plan is one typed object, :class:`SweepPlan`, which is also its file ``sweep.json``
(:meth:`SweepPlan.write`, :meth:`SweepPlan.read`): the sweeper writes it, each job reads it once,
the table reads it back. This module imports nothing of the training, report or entry-point
modules.
"""

from __future__ import annotations

import json
import re
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

from ablate.record import Record, from_fields, load_records, sort_records
from ablate.results import write_json_atomic

SWEEP_FILE = "sweep.json"
NOT_VARIANT_KEYS = frozenset({"seed", "experiment"})


# ---------------------------------------------------------------------------------------------
# Overrides
# ---------------------------------------------------------------------------------------------

def override_key(override: str) -> str:
    """The key an override sets, without Hydra's ``+``/``++``/``~`` prefix: ``+a.b=1`` -> ``a.b``."""
    return str(override).split("=", 1)[0].strip().lstrip("+~")


def is_variant_key(key: str) -> bool:
    """False for the keys that never tell variants apart: the seed, the experiment, Hydra's own."""
    return key not in NOT_VARIANT_KEYS and key != "hydra" and not key.startswith(("hydra/", "hydra."))


def parse_overrides(overrides: Iterable[str] | None) -> dict[str, str]:
    """Hydra overrides -> ``{key: value}`` in their order, without ``seed``, ``experiment=`` and ``hydra...``.

    Overrides without a value (``~key``) set nothing a variant can be named by and are skipped."""
    out: dict[str, str] = {}
    for item in overrides or []:
        item = str(item).strip()
        if "=" not in item:
            continue
        key, value = override_key(item), item.split("=", 1)[1].strip()
        if is_variant_key(key):
            out[key] = value
    return out


#: the swept keys that make model size vary: a preset or the model's dimensions (a scale ladder's rungs;
#: ``tune.rungs=smallest`` tunes on the smallest)
SIZE_KEYS = ("model.size", "model.d_model", "model.n_layers", "model.n_heads")
#: ``model.size``'s presets from the smallest (``ablate.model.SIZES``, which tests hold equal), so the
#: records' sizes can be ordered without importing the model
SIZE_PRESETS = ("3xs", "2xs", "xs", "s", "m", "l")

def split_override_string(text: str) -> dict[str, str]:
    """``"a=1,b=2"`` or ``"a=1 b=2"`` -> ``{"a": "1", "b": "2"}`` (values may hold commas: ``[16,32]``)."""
    parts = re.split(r"[,\s]+(?=[+~]*[\w./-]+=)", text.strip())
    return parse_overrides(p for p in parts if p)


def variant_key(overrides: dict[str, Any]) -> str:
    """The canonical name of a variant: sorted ``key=value`` pairs joined by ``,``.

    Sorted, so that the order keys were given in on the command line never splits one variant in
    two. ``bench.json`` is keyed by it, and so is an experiment's ``labels`` map.
    """
    return ",".join(f"{k}={v}" for k, v in sorted(overrides.items()))


def variant_overrides(overrides: Iterable[str] | None, swept: Iterable[str] | None = None) -> dict[str, str]:
    """A job's variant as ``{key: value}`` (in the overrides' order): its overrides of the ``swept``
    keys (all keys when ``swept`` is None), without ``seed``, ``experiment=`` and ``hydra...``."""
    parsed = parse_overrides(overrides)
    if swept is None:
        return parsed
    keys = {override_key(k) for k in swept}
    return {k: v for k, v in parsed.items() if k in keys}


def job_variant(overrides: Iterable[str] | None, swept: Iterable[str] | None = None) -> str:
    """A job's variant by name (:func:`variant_key`), ``""`` for the defaults."""
    return variant_key(variant_overrides(overrides, swept))


# ---------------------------------------------------------------------------------------------
# The jobs of a sweep and sweep.json
# ---------------------------------------------------------------------------------------------

def expand_sweep(arguments: list[str]) -> list[list[str]]:
    """The overrides of every job that Hydra's basic sweeper makes of ``arguments`` (sweep
    params first, then the command line's overrides), in its order."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    loader = GlobalHydra.instance().config_loader() if GlobalHydra.instance().is_initialized() else None
    parser = OverridesParser.create(config_loader=loader)
    batches = BasicSweeper.split_arguments(parser.parse_overrides(arguments), max_batch_size=None)
    return [job for batch in batches for job in batch]


def swept_keys(jobs: list[list[str]]) -> list[str]:
    """The keys that take more than one value across the jobs, in command-line order
    (``seed`` included: ``sweep.json`` records what was swept; variants leave the seed out)."""
    values: dict[str, set[str]] = {}
    for job in jobs:
        for override in job:
            key, _, value = str(override).partition("=")
            values.setdefault(override_key(key), set()).add(value)
    return [key for key, seen in values.items() if len(seen) > 1]


@dataclass
class Budget:
    """How a sweep's steps were set (``budget.match=tokens|flops|tokens_per_param``): each variant's
    ``trainer.max_steps`` and the variant whose budget it was given (none under tokens_per_param:
    each job's budget follows from its own parameters)."""

    match: str                                              # tokens | flops | tokens_per_param
    steps: dict[str, int] = field(default_factory=dict)     # variant -> trainer.max_steps
    baseline_of: dict[str, str] = field(default_factory=dict)  # variant -> its baseline variant
    tokens_per_param: float | None = None                   # match=tokens_per_param: budget.tokens_per_param
    baseline_tokens: dict[str, int] = field(default_factory=dict)         # variant -> its baseline's tokens
    baseline_train_flops: dict[str, float] = field(default_factory=dict)  # variant -> its baseline's FLOPs


@dataclass
class Tuning:
    """A sweep's per-variant learning-rate tuning (``tune.lr``): the grid and, once the tuning
    runs have ended, each variant's chosen rate and every rate's validation score."""

    lr: list[float]                 # the grid, optim.lr included
    default_lr: float | None = None  # optim.lr: what an untuned sweep would have used
    seeds: list[int] = field(default_factory=list)        # the tuning runs' seeds
    final_seeds: list[int] | None = None  # the seeds the definition runs at the chosen rate (None: unrecorded)
    metric: str = "loss"            # loss | accuracy (tune.metric)
    # tune.rungs=smallest: variant -> the variant at the smallest rung whose chosen lr it reuses (μP);
    # those variants have no tuning runs of their own
    transfer: dict[str, str] = field(default_factory=dict)
    rungs: str = "all"              # all | smallest (tune.rungs)
    chosen: dict[str, float] = field(default_factory=dict)                    # variant -> lr
    scores: dict[str, dict[str, float | None]] = field(default_factory=dict)  # variant -> lr text -> score


@dataclass
class FineTune:
    """A sweep's fine-tune stage (``finetune.tasks``): the definition's jobs pretrain, then each
    pretraining job is fine-tuned on every task x fine-tune seed (``ablate.finetune.finetune_jobs``)."""

    tasks: list[str]                # the downstream tasks (conf/task/<name>.yaml)
    seeds: list[int] = field(default_factory=lambda: [0])  # fine-tune seeds per pretrained checkpoint
    steps: int = 200                # each fine-tune's trainer.max_steps
    lr: float = 1e-3                # each fine-tune's optim.lr
    lrs: list[float] = field(default_factory=list)  # finetune.tune_lr: every task at each rate (empty: lr)
    mode: str = "full"              # full | probe (a linear probe on the frozen body)
    causal: bool = False            # the pretrained model's attention, unless a job sets model.causal
    # task -> the overrides its fine-tune jobs add (the pretraining's tokenizer, batch size, seq_len, settings)
    task_overrides: dict[str, list[str]] = field(default_factory=dict)
    # task -> its own steps and lr (finetune.per_task), where they are not the two above
    per_task: dict[str, dict[str, float]] = field(default_factory=dict)

    def steps_of(self, task: str) -> int:
        return int(self.per_task.get(task, {}).get("steps", self.steps))

    def lr_of(self, task: str) -> float:
        return float(self.per_task.get(task, {}).get("lr", self.lr))

    def lrs_of(self, task: str) -> list[float]:
        """The rates ``task`` is fine-tuned at: its own ``per_task`` lr, else the grid, else ``lr``."""
        if "lr" in self.per_task.get(task, {}) or not self.lrs:
            return [self.lr_of(task)]
        return [float(lr) for lr in self.lrs]


@dataclass
class Rounds:
    """``seed=auto``: a sweep's seeds run in rounds (``stats.*``). Every row runs the first round
    (seeds ``0 .. min_seeds-1``); after each round each comparison with its baseline is decided
    (``ablate.sequential.decide``), and the next round (``round_seeds`` more seeds, up to
    ``max_seeds``) runs only the rows still undecided and their baselines. ``mde`` is the smallest
    effect of interest in the headline metric's points (accuracy: 1.0 is one point, 0.01 as a
    fraction). ``run``: rounds launched so far; ``verdicts``: after each round, what was decided
    (variant -> ``{"verdict", "n", "round"}``), as the sweeper saw it."""

    min_seeds: int
    max_seeds: int
    round_seeds: int
    mde: float
    alpha: float = 0.05
    spending: str = "obrien_fleming"
    power: float = 0.8
    run: int = 0
    verdicts: dict[str, dict[str, Any]] = field(default_factory=dict)

    def looks(self) -> tuple[int, ...]:
        """The seeds a comparison has after each round: ``(min, min + r, ..., max)``."""
        looks = list(range(self.min_seeds, self.max_seeds, self.round_seeds)) + [self.max_seeds]
        return tuple(dict.fromkeys(looks))

    def round_of(self, seed: int) -> int:
        """The round (1-based) that runs ``seed``."""
        return next(k for k, n in enumerate(self.looks(), 1) if seed < n)

    def design(self) -> Any:
        """The statistical design of the rounds (``ablate.sequential.Design``), with ``mde`` as a
        fraction (the records' accuracies are fractions)."""
        from ablate.sequential import Design

        return Design(looks=self.looks(), mde=self.mde / 100.0, alpha=self.alpha, spending=self.spending)


@dataclass
class SweepPlan:
    """A multirun, planned: what ``ablate.planner`` makes of a command line and ``sweep.json`` holds.

    ``definition`` is every job the command line defines (design rows and budget steps
    included): what a relaunch must define again to resume. ``jobs`` is every job launched so far:
    the first stage (a tuned sweep's tuning runs, else the definition), then a tuned sweep's final
    runs, then a fine-tune stage's jobs. ``swept`` are the keys that name variants (``seed`` included;
    never a budget's ``trainer.max_steps`` or a tuned ``optim.lr``). ``budget``, ``tune`` and
    ``finetune`` are None when off."""

    swept: list[str]
    jobs: list[list[str]]
    definition: list[list[str]]
    budget: Budget | None = None
    tune: Tuning | None = None
    finetune: FineTune | None = None
    rounds: Rounds | None = None

    def variant(self, overrides: Iterable[str] | None) -> str:
        """A job's variant by name (``""`` for the defaults)."""
        return job_variant(overrides, self.swept)

    def write(self, sweep_dir: str | Path) -> Path:
        """``<sweep_dir>/sweep.json``, written atomically (docs/internals.md, "sweep.json")."""
        data = asdict(self)
        if self.tune is None:
            del data["tune"]  # an untuned sweep's file has no tune entry
        if self.finetune is None:
            del data["finetune"]  # nor a sweep without a fine-tune stage a finetune entry
        if self.rounds is None:
            del data["rounds"]  # nor a fixed-seed sweep a rounds entry
        path = Path(sweep_dir) / SWEEP_FILE
        write_json_atomic(path, data)
        return path

    @classmethod
    def read(cls, sweep_dir: str | Path | None) -> "SweepPlan | None":
        """The plan in ``<sweep_dir>/sweep.json``; None when there is none or it cannot be read
        (:meth:`unreadable` says why). Files written before ``definition`` was recorded give their
        ``jobs`` as the definition."""
        if sweep_dir is None:
            return None
        try:
            return cls._load(Path(sweep_dir) / SWEEP_FILE)
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return None

    @classmethod
    def unreadable(cls, sweep_dir: str | Path) -> str | None:
        """Why ``<sweep_dir>/sweep.json`` exists but cannot be read as a plan; None when it reads
        or there is none."""
        path = Path(sweep_dir) / SWEEP_FILE
        if not path.exists() and not path.is_symlink():
            return None
        try:
            cls._load(path)
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as error:
            return f"{path} cannot be read as a sweep plan ({type(error).__name__}: {error})"
        return None

    @classmethod
    def _load(cls, path: Path) -> "SweepPlan":
        data = json.loads(path.read_text())
        jobs = _job_lists(data["jobs"])
        definition = _job_lists(data.get("definition")) if data.get("definition") is not None else jobs
        swept = [override_key(k) for k in data.get("swept") or swept_keys(definition)]
        budget, tune, finetune = data.get("budget"), data.get("tune"), data.get("finetune")
        rounds = data.get("rounds")
        return cls(swept=swept, jobs=jobs, definition=definition,
                   budget=from_fields(Budget, budget) if isinstance(budget, dict) else None,
                   tune=from_fields(Tuning, tune) if isinstance(tune, dict) else None,
                   finetune=from_fields(FineTune, finetune) if isinstance(finetune, dict) else None,
                   rounds=from_fields(Rounds, rounds) if isinstance(rounds, dict) else None)


def _job_lists(value: Any) -> list[list[str]]:
    if not isinstance(value, list) or not all(isinstance(job, list) for job in value):
        raise ValueError("not a list of override lists")
    return [[str(o) for o in job] for job in value]


# ---------------------------------------------------------------------------------------------
# Designs: rows generated from a base (experiment.design)
# ---------------------------------------------------------------------------------------------

def override_value(value: Any) -> str:
    """A config value as Hydra override text: ``True`` -> ``true``, ``[1, 2]`` -> ``[1,2]``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(override_value(v) for v in value) + "]"
    return str(value)


def design_rows(design: Any) -> list[tuple[str, dict[str, str]]]:
    """The rows of ``experiment.design``: ``[(label, {key: value}), ...]``, the base first.

    Both kinds change one thing at a time from ``base``; they differ in what the base is and so
    in how a row reads. ``one_at_a_time``: the base is the reference (e.g. the 2017 Transformer) and
    each row adds one change to it. ``leave_one_out``: the base has every change already (e.g. a
    modern "Transformer++"), and each row reverts one of them to the older choice, so the table
    shows what each choice buys in the company of the others. Every row sets every key of the
    design (the base's value where the row does not change it), so the rows differ only in the
    keys they change and their variants are named by those keys."""
    if not design:
        return []
    base = {str(k): override_value(v) for k, v in dict(design.get("base") or {}).items()}
    changes = {str(label): {str(k): override_value(v) for k, v in dict(ov).items()}
               for label, ov in dict(design["changes"]).items()}
    keys = list(base) + [k for ov in changes.values() for k in ov if k not in base]
    # a key only some rows change takes, in the others, its value in the base or else the config's
    rows = [(str(design.get("base_label") or "base"), dict(base))]
    rows += [(label, {**base, **ov}) for label, ov in changes.items()]
    return [(label, {k: row[k] for k in keys if k in row}) for label, row in rows]


def design_keys(design: Any) -> list[str]:
    """The keys that tell a design's rows apart: set to different values, or set by some rows only
    (``norm.placement=post`` in one row, the config's own value in the others). They name its
    variants, so they are swept keys of its sweep even when only one row sets them."""
    rows = design_rows(design)
    keys = list(dict.fromkeys(k for _, row in rows for k in row))
    return [k for k in keys if len({r.get(k) for _, r in rows}) > 1]


def design_labels(design: Any) -> dict[str, str]:
    """``{variant_key: label}`` of a design's rows (named by :func:`design_keys`)."""
    varying = set(design_keys(design))
    return {variant_key({k: v for k, v in row.items() if k in varying}): label for label, row in design_rows(design)}


def job_value(job: Iterable[str], key: str) -> str | None:
    """The value a job's overrides give ``key`` (None when they do not set it)."""
    return next((o.split("=", 1)[1] for o in job if override_key(o) == key), None)


def job_signature(overrides: Iterable[str] | None) -> tuple[str, ...]:
    """A job's identity within a sweep: its overrides, order aside."""
    return tuple(sorted(str(o) for o in overrides or []))


def same_jobs(a: Iterable[Iterable[str]], b: Iterable[Iterable[str]]) -> bool:
    """Whether two sweep definitions make the same jobs."""
    return {job_signature(j) for j in a} == {job_signature(j) for j in b}


def sweep_records(records: list[Record], jobs: Iterable[Iterable[str]] | None) -> list[Record]:
    """The records that are jobs of the sweep definition ``jobs`` (all of them when it is unknown):
    a directory reused with ``--redefine`` may hold records of an earlier definition."""
    if jobs is None:
        return records
    wanted = {job_signature(j) for j in jobs}
    return [r for r in records if job_signature(r.overrides) in wanted]


class SeveralSweeps(ValueError):
    """A directory holds the records of more than one sweep (each with its own ``sweep.json``)."""


def read_sweep(sweep_dir: str | Path) -> tuple[list[Record], SweepPlan | None]:
    """A sweep directory's records and its plan, each read once: the records that belong to the
    sweep its ``sweep.json`` defines (others, left by an earlier definition, are named in a warning
    and left out), and that plan (None when there is none). ``sweep_dir`` may be a directory above
    the sweep's. Raises :class:`SeveralSweeps` when the records come from several sweeps, one of
    them at least with a ``sweep.json``: their variants differ in kind (a flat sweep and a ladder), so
    a table of them all would mix them unseen; the message names the sweeps found."""
    records = load_records(sweep_dir)
    dirs = list(dict.fromkeys(_record_sweep_dir(r) for r in records))
    planned = [d for d in dirs if d is not None and ((d / SWEEP_FILE).exists() or (d / SWEEP_FILE).is_symlink())]
    if len(dirs) > 1 and planned:
        found = ", ".join(str(d) for d in dirs[:6]) + (f" and {len(dirs) - 6} more" if len(dirs) > 6 else "")
        raise SeveralSweeps(f"{sweep_dir} holds {len(dirs)} sweeps ({found}): a table is of one sweep; "
                            "point at one of these directories")
    plan = SweepPlan.read(dirs[0]) if len(dirs) == 1 else None
    kept = sweep_records(records, plan.jobs if plan else None)
    if len(kept) < len(records):
        warnings.warn(f"{sweep_dir}: leaving out {len(records) - len(kept)} record(s) of jobs that are not in "
                      f"this sweep's definition ({SWEEP_FILE}): they come from an earlier sweep in this directory",
                      stacklevel=3)
    return kept, plan


def load_sweep_records(sweep_dir: str | Path) -> list[Record]:
    """A sweep directory's records (:func:`read_sweep`, which says which are left out and when
    the directory holds several sweeps)."""
    return read_sweep(sweep_dir)[0]


# ---------------------------------------------------------------------------------------------
# Variants of a set of records (the table's rows, the benchmark's variants)
# ---------------------------------------------------------------------------------------------

def varying_keys(records: list[Record]) -> set[str]:
    """The variant keys whose value differs between some of the records (absent counts as a value)."""
    parsed = [parse_overrides(r.overrides) for r in records]
    keys = set().union(*parsed) if parsed else set()
    return {k for k in keys if len({p.get(k) for p in parsed}) > 1}


def _record_sweep_dir(record: Record) -> Path | None:
    """The directory a record's job directory sits in: its sweep's, which holds ``sweep.json``."""
    return record.path.parent.parent if record.path is not None else None


def records_swept_keys(records: list[Record]) -> set[str]:
    """The swept keys of the sweep(s) the records come from: those of their ``sweep.json`` where
    every record's sweep directory has one, else the keys whose values vary across the records."""
    dirs = {_record_sweep_dir(r) for r in records}
    found = [SweepPlan.read(d) for d in dirs if d is not None]
    if records and None not in dirs and all(plan is not None for plan in found):
        return {k for plan in found for k in plan.swept}
    return varying_keys(records)


def variants(records: list[Record], swept: Iterable[str] | None = None) -> dict[str, dict[str, str]]:
    """The variants of the records in sweep order: ``{variant_key: {key: value}}``.

    ``swept`` defaults to :func:`records_swept_keys`."""
    swept = records_swept_keys(records) if swept is None else set(swept)
    out: dict[str, dict[str, str]] = {}
    for record in sort_records(records):
        variant = variant_overrides(record.overrides, swept)
        out.setdefault(variant_key(variant), variant)
    return out


def group_by_variant(records: list[Record], swept: Iterable[str] | None = None) -> dict[str, list[Record]]:
    """``{variant_key: [its records]}`` in sweep order (the table's rows, the benchmark's variants)."""
    swept = records_swept_keys(records) if swept is None else set(swept)
    groups: dict[str, list[Record]] = {key: [] for key in variants(records, swept)}
    for record in sort_records(records):
        groups[job_variant(record.overrides, swept)].append(record)
    return groups

