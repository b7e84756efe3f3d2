"""What a sweep's records say, read field by field: one record's ``metrics.*``, seed, lr, task and
history, and the sweep as a whole (its experiment node, evaluated lengths, smoke test, shared
cores, matched budget).

The readers tolerate records of any age: a missing or malformed field reads as None (or empty),
so a table of old records still builds. The records themselves are loaded by ``records``.
"""

from __future__ import annotations

from typing import Any, Callable

from ablate.report.stats import finite
from ablate.sweep import override_key


# ---------------------------------------------------------------------------------------------
# One record's fields
# ---------------------------------------------------------------------------------------------

def metric_of(record: dict, name: str) -> Any:
    """``record["metrics"][name]`` (None when absent)."""
    return (record.get("metrics") or {}).get(name)


def task_of(record: dict) -> str | None:
    """The task's name: ``config.task.name``, else the ``task`` config group chosen."""
    task = (record.get("config") or {}).get("task")
    name = task.get("name") if isinstance(task, dict) else None
    return str(name) if name else (record.get("choices") or {}).get("task")


def seed_of(record: dict) -> Any:
    """The seed a run was paired by: ``config.seed``, else its ``seed=`` override (None when unknown)."""
    seed = (record.get("config") or {}).get("seed")
    if seed is None:
        for o in record.get("overrides") or []:
            if override_key(str(o)) == "seed" and "=" in str(o):
                seed = str(o).split("=", 1)[1].strip()
    if isinstance(seed, str) and seed.lstrip("-").isdigit():
        seed = int(seed)
    return seed


def lr_of(record: dict) -> float | None:
    """The lr a run trained at: ``metrics.lr``, else ``config.optim.lr``."""
    lr = metric_of(record, "lr")
    if lr is None:
        lr = ((record.get("config") or {}).get("optim") or {}).get("lr")
    try:
        return float(lr)
    except (TypeError, ValueError):
        return None


def history_of(record: dict) -> list[dict]:
    """The run's ``metrics.history`` entries that have a finite loss."""
    hist = metric_of(record, "history")
    if not isinstance(hist, list):
        return []
    return [h for h in hist if isinstance(h, dict) and finite([h.get("loss")])]


def _seq_len(record: dict) -> int | None:
    try:
        value = record["config"]["task"]["seq_len"]
    except (KeyError, TypeError):
        return None
    return value if isinstance(value, int) else None


# ---------------------------------------------------------------------------------------------
# What the records say about the sweep as a whole
# ---------------------------------------------------------------------------------------------

def first_value(records: list[dict], getter: Callable[[dict], Any]) -> Any:
    """The first non-empty ``getter(record)``; a record without the field is skipped."""
    for r in records:
        try:
            v = getter(r)
        except (AttributeError, KeyError, TypeError):
            v = None
        if v not in (None, ""):
            return v
    return None


def experiment_of(records: list[dict]) -> dict:
    """The experiment node of the records (``record["experiment"]``, else ``config.experiment``)."""
    exp: dict = {}
    labels: dict = {}
    for r in records:
        for e in (r.get("experiment"), (r.get("config") or {}).get("experiment")):
            if isinstance(e, dict):
                for k, v in e.items():
                    if v is not None:
                        exp.setdefault(k, v)
                labels.update({k: v for k, v in (e.get("labels") or {}).items() if k not in labels})
    exp["labels"] = labels
    return exp


def beyond_lengths(records: list[dict]) -> list[int] | None:
    """Where the runs trained at several lengths: the lengths some run was evaluated at besides its
    own training length (None where they all trained at one length)."""
    if len({_seq_len(r) for r in records} - {None}) < 2:
        return None
    return sorted({int(L) for r in records for L in (metric_of(r, "eval") or {})
                   if str(L).isdigit() and int(L) != _seq_len(r)})


def train_length(records: list[dict], lengths: list[int]) -> int | None:
    """The length the runs trained at, when it is one of the evaluated ``lengths``."""
    seq_len = first_value(records, lambda r: r["config"]["task"]["seq_len"])
    if isinstance(seq_len, int) and seq_len in lengths:
        return seq_len
    for r in records:  # the evaluated length whose accuracy is the headline accuracy
        acc, ev = metric_of(r, "accuracy"), metric_of(r, "eval") or {}
        for L, m in ev.items():
            if isinstance(m, dict) and acc is not None and m.get("accuracy") == acc:
                try:
                    return int(L)
                except ValueError:
                    pass
    return None


def smoke_of(records: list[dict]) -> dict[str, list[int]] | None:
    """Steps and seeds of the records, when any of them is a smoke test (``smoke: true``)."""
    smoke = [r for r in records if isinstance(r.get("config"), dict) and r["config"].get("smoke") is True]
    if not smoke:
        return None
    steps = finite(metric_of(r, "steps") for r in smoke) or finite(
        ((r["config"].get("trainer") or {}).get("max_steps") for r in smoke))
    seeds = finite(r["config"].get("seed") for r in smoke)
    return {"steps": sorted({int(s) for s in steps}), "seeds": sorted({int(s) for s in seeds})}


def sharing_of(records: list[dict]) -> dict[str, Any] | None:
    """How the ok runs' jobs shared the cores, when some ran at once (``metrics.concurrent_jobs``)."""
    ok = [r for r in records if r.get("status") == "ok"]
    jobs = finite(metric_of(r, "concurrent_jobs") for r in ok)
    if not jobs or max(jobs) <= 1:
        return None
    cores = finite(metric_of(r, "cpu_cores") for r in ok)
    return {"jobs": int(max(jobs)),
            "threads": sorted({int(t) for t in finite(metric_of(r, "torch_threads") for r in ok)}),
            "cores": int(max(cores)) if cores else None}


def early_fraction_of(records: list[dict]) -> float | None:
    """The ``eval.early_fraction`` the runs read their early loss at (records from before the
    setting: 0.25, what it always was); None when the runs differ."""
    fractions = {float(((r.get("config") or {}).get("eval") or {}).get("early_fraction", 0.25)) for r in records}
    return fractions.pop() if len(fractions) == 1 else None


def budget_of(records: list[dict]) -> dict[str, Any] | None:
    """The budget the runs matched (their ``record["budget"]``), with every ``steps`` value seen."""
    budgets = [r["budget"] for r in records if isinstance(r.get("budget"), dict) and r["budget"].get("match")]
    if not budgets:
        return None
    out = dict(budgets[0])
    out["steps_all"] = sorted({int(s) for s in finite(b.get("steps") for b in budgets)})
    return out
