"""What a sweep's records say, read field by field: one record's seed, lr, task and history, and
the sweep as a whole (its experiment node, evaluated lengths, smoke test, shared cores, matched
budget, runs stopped early).

The records are :class:`ablate.record.Record`s (``records`` loads them): their metrics, budget and
job entries are read by attribute. Their ``config``, ``experiment`` and ``choices`` are the job's
configuration, plain dicts, and the readers here tolerate any age of it: a missing or malformed
config key reads as None (or empty), so a table of old records still builds.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

from ablate.record import BudgetEntry, CurvePoint, Record
from ablate.report.stats import finite
from ablate.sweep import override_key


# ---------------------------------------------------------------------------------------------
# One record's fields
# ---------------------------------------------------------------------------------------------

def config_value(record: Record, *keys: str) -> Any:
    """``record.config[k1][k2]...`` (None where a key is missing or a node is not a mapping)."""
    node: Any = record.config
    for key in keys:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node


def task_of(record: Record) -> str | None:
    """The task's name: ``config.task.name``, else the ``task`` config group chosen."""
    name = config_value(record, "task", "name")
    return str(name) if name else record.choices.get("task")


def seed_of(record: Record) -> Any:
    """The seed a run was paired by: ``config.seed``, else its ``seed=`` override (None when unknown)."""
    seed = record.seed
    if seed is None:
        for o in record.overrides:
            if override_key(str(o)) == "seed" and "=" in str(o):
                seed = str(o).split("=", 1)[1].strip()
    if isinstance(seed, str) and seed.lstrip("-").isdigit():
        seed = int(seed)
    return seed


def lr_of(record: Record) -> float | None:
    """The lr a run trained at: ``metrics.lr``, else ``config.optim.lr``."""
    lr = record.metrics.lr
    if lr is None:
        lr = config_value(record, "optim", "lr")
    try:
        return float(lr)
    except (TypeError, ValueError):
        return None


def history_of(record: Record) -> list[CurvePoint]:
    """The run's ``metrics.history`` points that have a finite loss."""
    return [p for p in record.metrics.history if finite([p.loss])]


def val_loss(record: Record) -> float | None:
    """``metrics.val.loss`` (None without a validation score)."""
    return record.metrics.val.loss if record.metrics.val is not None else None


def _seq_len(record: Record) -> int | None:
    value = config_value(record, "task", "seq_len")
    return value if isinstance(value, int) else None


def where(record: Record) -> str:
    """A record named in a message: its file, else its job number."""
    return str(record.path) if record.path else f"job {record.job.num if record.job.num is not None else '?'}"


# ---------------------------------------------------------------------------------------------
# What the records say about the sweep as a whole
# ---------------------------------------------------------------------------------------------

def first_value(records: list[Record], getter: Callable[[Record], Any]) -> Any:
    """The first non-empty ``getter(record)``; a record without the field (an entry that is None)
    is skipped."""
    for r in records:
        try:
            v = getter(r)
        except (AttributeError, KeyError, TypeError):
            v = None
        if v not in (None, ""):
            return v
    return None


def experiment_of(records: list[Record]) -> dict:
    """The experiment node of the records (``record.experiment``, else ``config.experiment``)."""
    exp: dict = {}
    labels: dict = {}
    for r in records:
        for e in (r.experiment, r.config.get("experiment")):
            if isinstance(e, dict):
                for k, v in e.items():
                    if v is not None:
                        exp.setdefault(k, v)
                found = e.get("labels")
                labels.update({k: v for k, v in (found if isinstance(found, dict) else {}).items() if k not in labels})
    exp["labels"] = labels
    return exp


def beyond_lengths(records: list[Record]) -> list[int] | None:
    """Where the runs trained at several lengths: the lengths some run was evaluated at besides its
    own training length (None where they all trained at one length)."""
    if len({_seq_len(r) for r in records} - {None}) < 2:
        return None
    return sorted({int(L) for r in records for L in r.metrics.eval
                   if str(L).isdigit() and int(L) != _seq_len(r)})


def train_length(records: list[Record], lengths: list[int]) -> int | None:
    """The length the runs trained at, when it is one of the evaluated ``lengths``."""
    seq_len = first_value(records, _seq_len)
    if isinstance(seq_len, int) and seq_len in lengths:
        return seq_len
    for r in records:  # the evaluated length whose accuracy is the headline accuracy
        acc = r.metrics.accuracy
        for L, score in r.metrics.eval.items():
            if score is not None and acc is not None and score.accuracy == acc:
                try:
                    return int(L)
                except ValueError:
                    pass
    return None


def smoke_of(records: list[Record]) -> dict[str, list[int]] | None:
    """Steps and seeds of the records, when any of them is a smoke test (``smoke: true``)."""
    smoke = [r for r in records if r.config.get("smoke") is True]
    if not smoke:
        return None
    steps = finite(r.metrics.steps for r in smoke) or finite(config_value(r, "trainer", "max_steps") for r in smoke)
    seeds = finite(r.seed for r in smoke)
    return {"steps": sorted({int(s) for s in steps}), "seeds": sorted({int(s) for s in seeds})}


def sharing_of(records: list[Record]) -> dict[str, Any] | None:
    """How the ok runs' jobs shared the cores, when some ran at once (``metrics.concurrent_jobs``)."""
    ok = [r for r in records if r.ok]
    jobs = finite(r.metrics.concurrent_jobs for r in ok)
    if not jobs or max(jobs) <= 1:
        return None
    cores = finite(r.metrics.cpu_cores for r in ok)
    return {"jobs": int(max(jobs)),
            "threads": sorted({int(t) for t in finite(r.metrics.torch_threads for r in ok)}),
            "cores": int(max(cores)) if cores else None}


def early_fraction_of(records: list[Record]) -> float | None:
    """The ``eval.early_fraction`` the runs read their early loss at (records from before the
    setting: 0.25, what it always was); None when the runs differ."""
    fractions = set()
    for r in records:
        value = config_value(r, "eval", "early_fraction")
        fractions.add(float(value) if finite([value]) else 0.25)
    return fractions.pop() if len(fractions) == 1 else None


@dataclass
class SweepBudget(BudgetEntry):
    """The budget the runs matched: the first run's ``record.budget``, with every ``steps`` value
    the runs were given (``steps_all``)."""

    steps_all: list[int] = field(default_factory=list)


def budget_of(records: list[Record]) -> SweepBudget | None:
    """The budget the runs matched (their ``record.budget``), with every ``steps`` value seen."""
    budgets = [r.budget for r in records if r.budget is not None and r.budget.match]
    if not budgets:
        return None
    steps_all = sorted({int(s) for s in finite(b.steps for b in budgets)})
    return SweepBudget(**dataclasses.asdict(budgets[0]), steps_all=steps_all)


@dataclass
class EarlyStops:
    """The ok runs an ``EarlyStopping`` callback ended before ``max_steps`` (their
    ``metrics.early_stopped``): the step each stopped at and the steps it was given."""

    steps: list[int | None] = field(default_factory=list)
    max_steps: list[int | None] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.steps)

    def __bool__(self) -> bool:
        return bool(self.steps)


def stopped_early(record: Record) -> dict[str, Any] | None:
    """A run's ``metrics.early_stopped`` (``{step, max_steps, monitor, best, reason}``), or None
    when no EarlyStopping ended it."""
    stop = record.metrics.early_stopped
    return stop if isinstance(stop, dict) else None


def early_stops_of(records: list[Record]) -> EarlyStops:
    """The ok runs among ``records`` that an EarlyStopping ended early, in the records' order."""
    out = EarlyStops()
    for r in records:
        stop = stopped_early(r)
        if r.ok and stop is not None:
            step, max_steps = stop.get("step"), stop.get("max_steps")
            out.steps.append(int(step) if finite([step]) else None)
            out.max_steps.append(int(max_steps) if finite([max_steps]) else None)
    return out
