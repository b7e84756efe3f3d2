"""The per-job record, ``result.json``: what tables and resumed sweeps are built from.

Jobs write their record here (``write_record``) and read it back to resume (``read_record``); the
table and the benchmark load a sweep's records (``load_records``) in sweep order.

Records are written to a temporary file in the job directory, flushed to disk and renamed over
``result.json`` (``os.replace`` is atomic on POSIX), so a job killed at any moment leaves either
its previous record or none: never a partial one.

A record read back is checked for plausibility (``record_problems``): a file edited by hand, copied
from elsewhere or written by a broken component must not turn into wrong statistics or a traceback,
so ``load_records`` leaves out, with a warning naming its file, each field and what was expected,
a record whose status, overrides or numbers cannot be what a job wrote.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import tempfile
import warnings
from pathlib import Path
from typing import Any, Iterable, Iterator

RESULT_FILE = "result.json"
STATUSES = ("ok", "diverged", "failed", "interrupted")


def _umask_mode() -> int:
    """The mode a plain ``open()`` would give a new file (0o666 less the umask)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


@contextlib.contextmanager
def atomic_file(path: str | Path) -> Iterator[Path]:
    """A temporary path beside ``path`` to write; on success it is flushed to disk, given the
    mode the umask asks for (``mkstemp`` alone would leave 0600) and renamed over ``path``, so
    readers see the old file or the new one, whole; on failure it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, _umask_mode())
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_file`)."""
    with atomic_file(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def write_json_atomic(path: str | Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` so that readers see the old file or the new one, whole."""
    write_text_atomic(path, json.dumps(data, indent=2, default=str))


def write_record(job_dir: str | Path, record: dict[str, Any]) -> Path:
    path = Path(job_dir) / RESULT_FILE
    write_json_atomic(path, record)
    return path


def read_record(job_dir: str | Path) -> dict[str, Any] | None:
    """The job's record, or None when there is none (or it cannot be read)."""
    try:
        return json.loads((Path(job_dir) / RESULT_FILE).read_text())
    except (OSError, ValueError):
        return None


def _natural_key(path: Path) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(path))]


def sort_records(records: Iterable[dict]) -> list[dict]:
    """Records in sweep order: by ``job.num`` where known, then by path."""
    def key(record: dict) -> tuple:
        num = (record.get("job") or {}).get("num")
        num = num if isinstance(num, (int, float)) else math.inf
        return (num, _natural_key(Path(record.get("_path", ""))))
    return sorted(records, key=key)


def load_records(sweep_dir: str | Path) -> list[dict]:
    """Every ``result.json`` under ``sweep_dir`` (recursively), in job order.

    A file that does not parse is skipped with a warning (a job may be writing it, or may have
    died), and so is a record that :func:`record_problems` finds implausible; jobs without a
    record are simply absent. Each record gets ``_path`` (its file) and
    ``_sweep_dir`` (the directory searched), so that readers can find the sweep's other files
    (``sweep.json``, ``bench.json``).
    """
    sweep_dir = Path(sweep_dir)
    records = []
    for path in sorted(sweep_dir.rglob(RESULT_FILE), key=_natural_key):
        try:
            record = json.loads(path.read_text())
            if not isinstance(record, dict):
                raise ValueError(f"expected a JSON object, got {type(record).__name__}")
        except (OSError, ValueError) as err:
            warnings.warn(f"skipping {path}: {err}", stacklevel=2)
            continue
        problems = record_problems(record)
        if problems:
            warnings.warn(f"skipping {path}: implausible record: {'; '.join(problems)}", stacklevel=2)
            continue
        record["_path"] = str(path)
        record["_sweep_dir"] = str(sweep_dir)
        records.append(record)
    return sort_records(records)


# ---------------------------------------------------------------------------------------------
# Plausibility of a record read back
# ---------------------------------------------------------------------------------------------

#: headline metrics that are not fractions in [0, 1] (``ablate.lit.CONFUSION_METRICS``): their range
SIGNED_METRICS = {"matthews_corr": (-1.0, 1.0)}
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


def _metric_range(metrics: dict) -> tuple[float, float]:
    return SIGNED_METRICS.get(str(metrics.get("metric")), (0.0, 1.0))


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
    """What in a record read back cannot be what a job wrote: each problem names the field, its
    value and what was expected. Absent fields are fine (records of any age); present ones must be
    of their kind: a status among :data:`STATUSES`, overrides a list of strings, scores within their
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
    config = record.get("config") if isinstance(record.get("config"), dict) else {}
    seed = config.get("seed")
    if seed is not None and not _is_int(seed):
        bad("config.seed", seed, "expected an integer")
    metrics = record.get("metrics") if isinstance(record.get("metrics"), dict) else {}
    ok = status == "ok"
    low, high = _metric_range(metrics)
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
    return problems


def jobs_at_once(records: Iterable[dict]) -> int:
    """The most jobs that trained at the same moment: each job's training lies within
    [job.started_at, job.started_at + metrics.wall_time_s] (started_at: when it got its share of
    the cores); records without those two figures are left out."""
    events = []
    for r in records:
        start, wall = (r.get("job") or {}).get("started_at"), (r.get("metrics") or {}).get("wall_time_s")
        if start is not None and wall is not None:
            events += [(start, 1), (start + wall, -1)]
    running = most = 0
    for _, step in sorted(events):  # at equal times an end (-1) sorts before a start
        running += step
        most = max(most, running)
    return most
