"""A job's record, ``result.json``, as one typed family: :class:`Record` with its :class:`Metrics`,
:class:`BudgetEntry`, :class:`TuneEntry`, :class:`FinetuneEntry` and :class:`JobEntry`.

A job fills a ``Record`` as it goes (``ablate.run``; training fills its ``Metrics``: ``ablate.train``)
and writes it (:meth:`Record.write`: atomically); the table, ``--plan`` and a relaunch read it back
(:meth:`Record.read`, a sweep's: :func:`load_records`) and use its attributes. ``read`` is where a
record is checked (``ablate.record_checks``): one whose status, overrides or numbers cannot be what
a job wrote raises :class:`RecordError`, naming each field, its value and what was expected.
Absent fields are fine (records of any age: ``schema`` 1 is every record from before the field
existed); present ones must be of their kind.

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
from typing import Any, Iterable, Mapping

from ablate.record_checks import record_problems
from ablate.results import write_json_atomic

#: this version's records (3: ``stage`` and ``finetune``); a record without ``schema`` is version 1
SCHEMA = 3
RESULT_FILE = "result.json"


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
    token_accuracy: float | None = None   # seq2seq: teacher-forced token accuracy; ``accuracy`` is exact match
    bleu: float | None = None             # a text seq2seq task's corpus BLEU and chrF of greedy decoding (0-100)
    chrf: float | None = None
    f1: float | None = None               # F1 of class 1 where the metric is built on it (MRPC, QQP)
    pearson: float | None = None          # a regression's (STS-B) correlations, whose mean is ``accuracy``
    spearman: float | None = None
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
class Sample:
    """One test row of a seq2seq task as the trained model decodes it greedily (``metrics.samples``)."""

    source: str = ""
    target: str = ""
    decoded: str = ""


@dataclass
class Metrics:
    """What training measured (docs/internals.md, "Records"); None where a run never got that far."""

    metric: str | None = None             # what "accuracy" means for this task
    accuracy: float | None = None         # the test split at the training length (the headline)
    loss: float | None = None
    eval: dict[str, Score] = field(default_factory=dict)    # test, every length ("16" -> Score)
    eval_extra: dict[str, Score] = field(default_factory=dict)  # other dev sets at the training length (MNLI "mismatched")
    val: Score | None = None              # the validation split at the end (model selection)
    history: list[CurvePoint] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)  # seq2seq: the first test rows, decoded greedily
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
    # the conditions the steps were timed under: CPU seconds of the timed steps over their wall time and
    # torch's threads (~1 when the run had its cores; CPU runs), the 1-minute load average at the end
    # of training, the CPU's model
    cpu_share: float | None = None
    load_1m: float | None = None
    cpu_model: str | None = None
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
class FinetuneEntry:
    """A job of a sweep with a fine-tune stage. A fine-tune's: its task, mode and fine-tune seed, and the
    pretraining it started from (job directory, variant, seed, the weights file and its SHA-256). A
    pretraining's: the weights file it left for its fine-tunes and its SHA-256 (the rest None)."""

    task: str | None = None
    mode: str | None = None               # full | probe
    seed: int | None = None               # the fine-tune seed
    from_job: str | None = None           # the pretraining job's directory
    from_variant: str | None = None
    from_seed: int | None = None
    checkpoint: str | None = None         # the pretrained weights (ablate.finetune.PRETRAINED)
    sha256: str | None = None             # of that file
    artifact: str | None = None           # those weights in wandb: a pretraining's logged artifact, a fine-tune's used one


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
    stage: str | None = None              # pretrain | finetune in a sweep with a fine-tune stage; else None
    finetune: FinetuneEntry | None = None
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


def from_fields(cls: type, data: Mapping[str, Any]) -> Any:
    """A dataclass from a mapping: the keys ``cls`` names, each absent one at its default; keys it
    does not name (a newer file's, a user's additions to a node) are not its business. How a record,
    a sweep's plan and a config node's settings are read back."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})


def _entry(cls: type, value: Any) -> Any:
    """An entry of the record as its class (None when absent); a later version's extra keys left out."""
    return from_fields(cls, value) if isinstance(value, dict) else None


def _metrics(data: dict[str, Any]) -> Metrics:
    metrics = from_fields(Metrics, data)
    metrics.eval = {str(k): _entry(Score, v) for k, v in (data.get("eval") or {}).items()}
    metrics.eval_extra = {str(k): _entry(Score, v) for k, v in (data.get("eval_extra") or {}).items()}
    metrics.val = _entry(Score, data.get("val"))
    metrics.history = [from_fields(CurvePoint, p) for p in data.get("history") or []]
    metrics.samples = [from_fields(Sample, p) for p in data.get("samples") or [] if isinstance(p, dict)]
    metrics.time_s = dict(data.get("time_s") or {})
    return metrics


def _record(data: dict[str, Any]) -> Record:
    budget = data.get("budget")
    return Record(
        status=data.get("status", "failed"), overrides=list(data.get("overrides") or []),
        choices=dict(data.get("choices") or {}), experiment=dict(data.get("experiment") or {}),
        config=dict(data.get("config") or {}), metrics=_metrics(data.get("metrics") or {}), error=data.get("error"),
        diverged_step=data.get("diverged_step"), traceback=data.get("traceback"),
        wandb=_entry(WandbEntry, data.get("wandb")),
        budget=_entry(BudgetEntry, budget) if isinstance(budget, dict) and budget.get("match") else None,
        tune=_entry(TuneEntry, data.get("tune")), stage=data.get("stage"),
        finetune=_entry(FinetuneEntry, data.get("finetune")), job=_entry(JobEntry, data.get("job")) or JobEntry(),
        schema=int(data.get("schema", 1)))
