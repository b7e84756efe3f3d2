"""A job's record, ``result.json``, as one typed family: :class:`Record` with its :class:`Metrics`,
:class:`BudgetEntry`, :class:`TuneEntry` and :class:`JobEntry`.

A job fills a ``Record`` as it goes (``ablate.run``; training fills its ``Metrics``: ``ablate.train``)
and writes it (:meth:`Record.write`: atomically); the table, ``--plan`` and a relaunch read it back
(:meth:`Record.read`, :func:`ablate.results.load_records`) and use its attributes. ``read`` is
where a record is checked: a file edited by hand, copied from elsewhere or written by a broken
component must not turn into wrong statistics or a traceback, so a record whose status, overrides
or numbers cannot be what a job wrote raises :class:`RecordError`, naming each field, its value and
what was expected. Absent fields are fine (records of any age: ``schema`` 1 is every record from
before the field existed); present ones must be of their kind.

The JSON keys are the field names; docs/internals.md shows the file, and a test keeps that block
and these classes in step.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from ablate.results import write_json_atomic

#: this version's records; a record without ``schema`` is version 1 (before it was written)
SCHEMA = 2
RESULT_FILE = "result.json"
STATUSES = ("ok", "diverged", "failed", "interrupted")
#: headline metrics that are not fractions in [0, 1] (``ablate.lit.CONFUSION_METRICS``): their range
SIGNED_METRICS = {"matthews_corr": (-1.0, 1.0)}


class RecordError(ValueError):
    """A record that cannot be what a job wrote: ``problems`` names each field, value and expectation."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


# ---------------------------------------------------------------------------------------------
# The family
# ---------------------------------------------------------------------------------------------

@dataclass
class Score:
    """One evaluation (``metrics.eval[length]``, ``metrics.val``): the headline metric and the loss."""

    accuracy: float | None = None
    loss: float | None = None
    count: int | None = None              # scored positions
    label_accuracy: float | None = None   # plain accuracy where ``accuracy`` is a confusion metric
    bytes_per_token: float | None = None  # text tasks: UTF-8 bytes per scored target token
    bits_per_byte: float | None = None


@dataclass
class CurvePoint:
    """One point of the learning curve on the validation split (``metrics.history``)."""

    step: int
    tokens: int | None = None
    flops: float | None = None
    loss: float | None = None
    accuracy: float | None = None


@dataclass
class Metrics:
    """What training measured (docs/internals.md, "Records"); None where a run never got that far."""

    metric: str | None = None             # what "accuracy" means for this task
    accuracy: float | None = None         # the test split at the training length (the headline)
    loss: float | None = None
    eval: dict[str, Score] = field(default_factory=dict)    # test, every length ("16" -> Score)
    val: Score | None = None              # the validation split at the end (model selection)
    history: list[CurvePoint] = field(default_factory=list)
    early_loss: float | None = None
    early_loss_step: int | None = None
    final_loss: float | None = None
    flops_per_token: float | None = None
    train_flops: float | None = None
    tokens: int | None = None
    lr: float | None = None
    bytes_per_token: float | None = None
    bits_per_byte: float | None = None
    resumed_from_step: int | None = None
    mfu: float | None = None
    peak_flops: float | None = None
    device: str | None = None
    utilisation: str | None = None
    mfu_note: str | None = None
    tokens_per_s: float | None = None
    step_time_s: dict[str, float] | None = None   # min, median, max
    timed_steps: int | None = None
    peak_memory_bytes: float | None = None
    memory_source: str | None = None
    memory: dict[str, float] | None = None        # parameters, gradients, optimizer, activations, peak
    params: int | None = None
    wall_time_s: float | None = None
    steps: int | None = None
    time_s: dict[str, float] = field(default_factory=dict)  # validate, wandb_init, setup, memory, fit, steps, test
    torch_threads: int | None = None
    concurrent_jobs: int | None = None
    cpu_cores: int | None = None
    early_stopped: dict[str, Any] | None = None     # an EarlyStopping callback's stop: step, monitor, reason
    model_checkpoint: dict[str, Any] | None = None  # the user's ModelCheckpoint: where its best weights are

    def update(self, **values: Any) -> None:
        """Set several figures at once; a name that is no field is a TypeError (every figure a job
        records is one of these fields)."""
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise TypeError(f"Metrics has no field {', '.join(unknown)}")
        for name, value in values.items():
            setattr(self, name, value)

    def flat(self) -> dict[str, Any]:
        """The scalar metrics with each length's test figures as ``accuracy@L``/``loss@L`` (a run
        summary's keys)."""
        out = {k: v for k, v in _json(self).items() if isinstance(v, (int, float, str)) and not isinstance(v, bool)}
        for length, score in self.eval.items():
            out[f"accuracy@{length}"], out[f"loss@{length}"] = score.accuracy, score.loss
        return out


@dataclass
class BudgetEntry:
    """What was matched (``budget.match``), the steps this job was given, and its baseline's budget."""

    match: str
    steps: int | None = None
    baseline: str | None = None           # the variant whose budget this job was given
    tokens_per_param: float | None = None  # match=tokens_per_param: the ratio
    baseline_tokens: int | None = None     # match=tokens|flops: the baseline's training tokens
    baseline_train_flops: float | None = None  # match=tokens|flops: the baseline's training FLOPs


@dataclass
class TuneEntry:
    """A tuned sweep's job: where its learning rate was chosen (its own variant, or under
    ``tune.rungs=smallest`` the smallest rung's variant whose rate it reuses)."""

    rungs: str = "all"
    tuned_on: str | None = None


@dataclass
class WandbEntry:
    project: str | None = None
    group: str | None = None
    name: str | None = None
    dir: str | None = None
    id: str | None = None


@dataclass
class JobEntry:
    """Where and how the job ran (``ablate.job.Job.record_fields``)."""

    num: int | None = None
    dir: str | None = None
    sweep_dir: str | None = None
    launcher: str | None = None
    started_at: float | None = None
    slot_wait_s: float | None = None
    process_started_at: float | None = None
    slurm: dict[str, Any] | None = None


@dataclass
class Record:
    """One job's ``result.json``. ``path`` and ``sweep_dir`` say where it was read from (not written)."""

    status: str = "failed"
    overrides: list[str] = field(default_factory=list)
    choices: dict[str, str] = field(default_factory=dict)
    experiment: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    metrics: Metrics = field(default_factory=Metrics)
    error: str | None = None
    diverged_step: int | None = None
    traceback: str | None = None
    wandb: WandbEntry | None = None
    budget: BudgetEntry | None = None
    tune: TuneEntry | None = None
    job: JobEntry = field(default_factory=JobEntry)
    schema: int = SCHEMA
    path: Path | None = field(default=None, compare=False)
    sweep_dir: Path | None = field(default=None, compare=False)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def seed(self) -> Any:
        return self.config.get("seed")

    def to_json(self) -> dict[str, Any]:
        """The record as ``result.json`` holds it (``metrics`` with the flat ``accuracy@L`` keys a
        dashboard reads)."""
        out = _json(self)
        out.pop("path", None)
        out.pop("sweep_dir", None)
        out["metrics"] = {**out["metrics"], **{k: v for k, v in self.metrics.flat().items() if "@" in k}}
        return out

    def write(self, job_dir: str | Path) -> Path:
        """``job_dir/result.json``, atomically (a temporary file renamed over it)."""
        path = Path(job_dir) / RESULT_FILE
        write_json_atomic(path, self.to_json())
        return path

    @classmethod
    def read(cls, path: str | Path) -> "Record":
        """The record in ``path`` (a ``result.json`` or its job directory). Raises ``OSError`` or
        ``ValueError`` for a file that is not a JSON object, :class:`RecordError` (a ValueError) for
        one that cannot be what a job wrote."""
        path = Path(path)
        path = path / RESULT_FILE if path.is_dir() else path
        data = json.loads(path.read_text())
        record = cls.from_json(data)
        record.path = path
        return record

    @classmethod
    def from_json(cls, data: Any) -> "Record":
        """A record from its JSON form, checked (:class:`RecordError` names every problem)."""
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        problems = record_problems(data)
        if problems:
            raise RecordError(problems)
        return _record(data)


# ---------------------------------------------------------------------------------------------
# A sweep's records
# ---------------------------------------------------------------------------------------------

def read_record(job_dir: str | Path) -> Record | None:
    """The job's record, or None when there is none or it cannot be trusted (not JSON, or not what a
    job writes: :class:`RecordError`)."""
    try:
        return Record.read(Path(job_dir) / RESULT_FILE)
    except (OSError, ValueError):
        return None


def _natural_key(path: Path) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(path))]


def sort_records(records: Iterable[Record]) -> list[Record]:
    """Records in sweep order: by ``job.num`` where known, then by path."""
    def key(record: Record) -> tuple:
        num = record.job.num
        return (num if isinstance(num, (int, float)) else math.inf, _natural_key(record.path or Path()))
    return sorted(records, key=key)


def load_records(sweep_dir: str | Path) -> list[Record]:
    """Every ``result.json`` under ``sweep_dir`` (recursively), in job order, each with its ``path``
    and the ``sweep_dir`` searched (so that readers can find the sweep's other files: ``sweep.json``,
    ``bench.json``).

    A file that does not parse is skipped with a warning (a job may be writing it, or may have
    died), and so is a record that cannot be what a job wrote (:class:`RecordError`, each field
    named); jobs without a record are simply absent."""
    sweep_dir = Path(sweep_dir)
    records = []
    for path in sorted(sweep_dir.rglob(RESULT_FILE), key=_natural_key):
        try:
            record = Record.read(path)
        except RecordError as err:
            warnings.warn(f"skipping {path}: implausible record: {err}", stacklevel=2)
            continue
        except (OSError, ValueError) as err:
            warnings.warn(f"skipping {path}: {err}", stacklevel=2)
            continue
        record.sweep_dir = sweep_dir
        records.append(record)
    return sort_records(records)


def jobs_at_once(records: Iterable[Record]) -> int:
    """The most jobs that trained at the same moment: each job's training lies within
    [job.started_at, job.started_at + metrics.wall_time_s] (started_at: when it got its share of
    the cores); records without those two figures are left out."""
    events = []
    for r in records:
        start, wall = r.job.started_at, r.metrics.wall_time_s
        if start is not None and wall is not None:
            events += [(start, 1), (start + wall, -1)]
    running = most = 0
    for _, step in sorted(events):  # at equal times an end (-1) sorts before a start
        running += step
        most = max(most, running)
    return most


# ---------------------------------------------------------------------------------------------
# JSON in and out
# ---------------------------------------------------------------------------------------------

def _json(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _json(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): _json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj


def _known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    """The keys of ``data`` that are fields of ``cls`` (a later version's extra keys are not this one's)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def _score(data: Any) -> Score | None:
    return Score(**_known(Score, data)) if isinstance(data, dict) else None


def _metrics(data: dict[str, Any]) -> Metrics:
    kept = _known(Metrics, data)
    kept["eval"] = {str(k): _score(v) for k, v in (data.get("eval") or {}).items()}
    kept["val"] = _score(data.get("val"))
    kept["history"] = [CurvePoint(**_known(CurvePoint, p)) for p in data.get("history") or []]
    kept["time_s"] = dict(data.get("time_s") or {})
    return Metrics(**kept)


def _record(data: dict[str, Any]) -> Record:
    def entry(cls: type, value: Any) -> Any:
        return cls(**_known(cls, value)) if isinstance(value, dict) else None

    budget = data.get("budget")
    return Record(
        status=data.get("status", "failed"), overrides=list(data.get("overrides") or []),
        choices=dict(data.get("choices") or {}), experiment=dict(data.get("experiment") or {}),
        config=dict(data.get("config") or {}), metrics=_metrics(data.get("metrics") or {}), error=data.get("error"),
        diverged_step=data.get("diverged_step"), traceback=data.get("traceback"),
        wandb=entry(WandbEntry, data.get("wandb")),
        budget=entry(BudgetEntry, budget) if isinstance(budget, dict) and budget.get("match") else None,
        tune=entry(TuneEntry, data.get("tune")), job=entry(JobEntry, data.get("job")) or JobEntry(),
        schema=int(data.get("schema", 1)))


# ---------------------------------------------------------------------------------------------
# What a record read back must be
# ---------------------------------------------------------------------------------------------

#: record entries that are mappings when present (null allowed: an entry a job had nothing for)
MAPPING_ENTRIES = ("metrics", "config", "choices", "experiment", "job", "budget", "tune", "wandb")
#: the ``metrics`` keys checked by kind (each may be null or absent: records of any age)
_NON_NEGATIVE_INTS = ("params", "steps", "tokens", "timed_steps", "early_loss_step")
_NON_NEGATIVE_NUMBERS = ("peak_memory_bytes", "flops_per_token", "train_flops", "wall_time_s", "lr")
_POSITIVE_INTS = ("torch_threads", "concurrent_jobs", "cpu_cores")
_LOSSES = ("loss", "early_loss", "final_loss")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _score_problem(value: Any, low: float, high: float, ok: bool) -> str | None:
    """A headline score: a number in [low, high]; NaN only where the run did not end ok."""
    if value is None:
        return None
    if not _is_number(value):
        return f"expected a number in [{low:g}, {high:g}]"
    if math.isnan(value):
        return None if not ok else f"expected a number in [{low:g}, {high:g}] for a run that ended ok"
    return None if low <= value <= high else f"expected a number in [{low:g}, {high:g}]"


def _history_problem(history: Any) -> str | None:
    if not isinstance(history, list):
        return "expected a list of {step, loss, ...} entries"
    steps = [h.get("step") if isinstance(h, dict) else None for h in history]
    if not all(_is_int(s) and s >= 0 for s in steps):
        return "expected entries each with a step (an integer >= 0)"
    back = next((i for i in range(1, len(steps)) if steps[i] <= steps[i - 1]), None)
    return None if back is None else f"steps go backwards ({steps[back - 1]} then {steps[back]}); expected increasing steps"


def record_problems(record: dict[str, Any]) -> list[str]:
    """What in a record's JSON cannot be what a job wrote: each problem names the field, its value
    and what was expected. Absent fields are fine (records of any age); present ones must be of
    their kind: a status among :data:`STATUSES`, overrides a list of strings, scores within their
    metric's range, counts non-negative integers, a speed a positive number where the run ended ok,
    a history whose steps increase."""
    def show(value: Any) -> str:
        text = repr(value)
        return text if len(text) <= 60 else text[:57] + "..."

    problems: list[str] = []

    def bad(field: str, value: Any, expected: str | None) -> None:
        if expected:
            problems.append(f"{field}={show(value)} ({expected})")

    status = record.get("status")
    bad("status", status, None if status in STATUSES else f"expected one of {', '.join(STATUSES)}")
    overrides = record.get("overrides")
    if overrides is not None and not (isinstance(overrides, list) and all(isinstance(o, str) for o in overrides)):
        bad("overrides", overrides, "expected a list of override strings")
    for entry in MAPPING_ENTRIES:
        if record.get(entry) is not None and not isinstance(record[entry], dict):
            bad(entry, record[entry], "expected a mapping")
    schema = record.get("schema")
    if schema is not None and not (_is_int(schema) and schema >= 1):
        bad("schema", schema, "expected an integer >= 1")
    config = record.get("config") if isinstance(record.get("config"), dict) else {}
    seed = config.get("seed")
    if seed is not None and not _is_int(seed):
        bad("config.seed", seed, "expected an integer")
    metrics = record.get("metrics") if isinstance(record.get("metrics"), dict) else {}
    ok = status == "ok"
    low, high = SIGNED_METRICS.get(str(metrics.get("metric")), (0.0, 1.0))
    for key, value in metrics.items():
        if key == "accuracy" or key.startswith("accuracy@"):
            bad(f"metrics.{key}", value, _score_problem(value, low, high, ok))
    evals = metrics.get("eval")
    if evals is not None and not (isinstance(evals, dict) and all(isinstance(e, dict) for e in evals.values())):
        bad("metrics.eval", evals, "expected a mapping of length -> {accuracy, loss}")
    elif evals:
        for length, e in evals.items():
            if not str(length).isdigit():
                bad("metrics.eval", length, "expected lengths as integers")
            bad(f"metrics.eval.{length}.accuracy", e.get("accuracy"), _score_problem(e.get("accuracy"), low, high, ok))
    val = metrics.get("val")
    if val is not None and not isinstance(val, dict):
        bad("metrics.val", val, "expected a mapping {loss, accuracy}")
    elif val:
        bad("metrics.val.accuracy", val.get("accuracy"), _score_problem(val.get("accuracy"), low, high, ok))
    for key in _NON_NEGATIVE_INTS:
        value = metrics.get(key)
        if value is not None and not (_is_int(value) and value >= 0):
            bad(f"metrics.{key}", value, "expected an integer >= 0")
    for key in _POSITIVE_INTS:
        value = metrics.get(key)
        if value is not None and not (_is_int(value) and value > 0):
            bad(f"metrics.{key}", value, "expected an integer > 0")
    for key in _NON_NEGATIVE_NUMBERS:
        value = metrics.get(key)
        if value is not None and not (_is_number(value) and math.isfinite(value) and value >= 0):
            bad(f"metrics.{key}", value, "expected a finite number >= 0")
    for key in _LOSSES:  # a diverged run's loss may be NaN or infinite; never negative (cross-entropy)
        value = metrics.get(key)
        if value is not None and not (_is_number(value) and not value < 0 and (math.isfinite(value) or not ok)):
            bad(f"metrics.{key}", value, "expected a number >= 0" + (", finite for a run that ended ok" if ok else ""))
    tps = metrics.get("tokens_per_s")  # the speed of a run that ended ok; of others it is not shown
    if tps is not None and not (_is_number(tps) and (math.isfinite(tps) and tps > 0 or not ok and not tps < 0)):
        bad("metrics.tokens_per_s", tps, "expected a finite number > 0" + (" for a run that ended ok" if ok else ""))
    if "history" in metrics and metrics["history"] is not None:
        bad("metrics.history", metrics["history"], _history_problem(metrics["history"]))
    for key in ("time_s", "step_time_s", "memory"):
        value = metrics.get(key)
        if value is not None and not (isinstance(value, dict) and all(_is_number(v) for v in value.values())):
            bad(f"metrics.{key}", value, "expected a mapping of names to numbers")
    for key, kinds in (("budget", {"steps": _is_int}), ("tune", {"tuned_on": lambda v: isinstance(v, str)})):
        entry = record.get(key) if isinstance(record.get(key), dict) else {}
        for name, kind in kinds.items():
            if entry.get(name) is not None and not kind(entry[name]):
                bad(f"{key}.{name}", entry[name], "expected an integer" if kind is _is_int else "expected a string")
    return problems
