"""What a record read back must be (``ablate.record.Record.read`` refuses the rest): a file edited
by hand, copied from elsewhere or written by a broken component must not turn into wrong statistics
or a traceback, so each problem is named in one line: the field, its value and what was expected.
Absent fields are fine (records of any age); present ones must be of their kind.
"""

from __future__ import annotations

import math
from typing import Any

STATUSES = ("ok", "diverged", "failed", "interrupted")
#: headline metrics that are not fractions in [0, 1] (``ablate.lit.CONFUSION_METRICS``): their range
SIGNED_METRICS = {"matthews_corr": (-1.0, 1.0), "pearson_spearman": (-1.0, 1.0)}
#: record entries that are mappings when present (null allowed: an entry a job had nothing for)
MAPPING_ENTRIES = ("metrics", "config", "choices", "experiment", "job", "budget", "tune", "finetune", "wandb")
#: a job's stage in a sweep with a fine-tune stage (absent or null elsewhere)
STAGES = ("pretrain", "finetune")
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
    stage = record.get("stage")
    if stage is not None and stage not in STAGES:
        bad("stage", stage, f"expected one of {', '.join(STAGES)} or null")
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
    extra = metrics.get("eval_extra")
    if extra is not None and not (isinstance(extra, dict) and all(isinstance(e, dict) for e in extra.values())):
        bad("metrics.eval_extra", extra, "expected a mapping of name -> {accuracy, loss}")
    elif extra:
        for name, e in extra.items():
            bad(f"metrics.eval_extra.{name}.accuracy", e.get("accuracy"),
                _score_problem(e.get("accuracy"), low, high, ok))
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
