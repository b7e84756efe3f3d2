"""Sweep records -> one row per variant: the table's numbers, before any format.

* accuracy: mean ± sample std (ddof=1) over the ``ok`` runs of the variant, with a Welch
  t-test (``scipy.stats.ttest_ind(equal_var=False)``, two-sided) against the baseline's
  accuracies: ``*`` p<0.05, ``**`` p<0.01;
* one ``acc@L`` column per evaluated length for length-extrapolation sweeps (more than one
  length evaluated);
* the metric: what "accuracy" means is the task's (``metrics.metric``); a sweep across tasks
  whose metrics differ says which metric each row has;
* speed: tokens/s and its ratio to the baseline, from the runs' own per-run medians or, when a
  ``bench.json`` (``ablate-bench``) is given, from the interleaved benchmark;
* memory: peak bytes per training step (MiB and ratio to the baseline); params; run status.

Diverged and failed runs are counted in ``status`` and excluded from every mean. The rows are
the variants of ``ablate.sweep`` (one definition of a variant for the table, wandb and bench.json).
The caption also says when the records come from a smoke test (``smoke: true`` in their config)
and when jobs ran at once on the same cores (their ``metrics.concurrent_jobs``), since the speeds
of such runs come from runs competing for the CPU.
"""

from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ablate.report.records import bench_speeds, load_bench, sort_records
from ablate.report.stats import SIGNIFICANCE_TEST, finite, mean, ratio, std, welch_p
from ablate.sweep import group_by_variant, records_swept_keys, split_override_string, variant_key, variants

STATUSES = ("ok", "diverged", "failed", "interrupted", "running")


@dataclass
class Row:
    """One variant: its runs summarised (accuracy as a fraction 0-1; None when unknown)."""

    key: str                                   # variant_key of its overrides
    label: str
    overrides: dict[str, str]
    is_baseline: bool = False
    counts: dict[str, int] = field(default_factory=dict)   # status -> number of runs
    accuracies: list[float] = field(default_factory=list)  # of the ok runs
    accuracy_mean: float | None = None
    accuracy_std: float | None = None
    loss_mean: float | None = None
    tokens_per_s: float | None = None
    speed_ratio: float | None = None
    memory_bytes: float | None = None
    memory_ratio: float | None = None
    params: int | None = None
    p_value: float | None = None
    eval: dict[int, tuple[float | None, float | None]] = field(default_factory=dict)  # L -> (mean, std)
    metric: str | None = None                  # what its accuracy is (its records' metrics.metric)
    tasks: list[str] = field(default_factory=list)         # its runs' task names

    @property
    def n(self) -> int:
        return self.counts.get("ok", 0)

    @property
    def memory_mib(self) -> float | None:
        return None if self.memory_bytes is None else self.memory_bytes / 2**20

    @property
    def status(self) -> str:
        order = [s for s in STATUSES if self.counts.get(s)] + sorted(set(self.counts) - set(STATUSES))
        return ", ".join(f"{self.counts[s]} {s}" for s in order) or "no runs"

    @property
    def mark(self) -> str:
        if self.p_value is None or self.is_baseline:
            return ""
        return "**" if self.p_value < 0.01 else "*" if self.p_value < 0.05 else ""


@dataclass
class SweepTable:
    rows: list[Row]
    baseline: str                      # the baseline's label
    baseline_key: str                  # ... and its variant_key
    metric: str                        # what "accuracy" means (records' metrics.metric)
    speed_source: str                  # "records" | "bench"
    speed_note: str                    # the caption's sentence on speed
    eval_lengths: list[int] = field(default_factory=list)  # training length first
    train_length: int | None = None
    experiment: str | None = None
    memory_source: str | None = None
    bench_rounds: int | None = None
    wandb_group: str | None = None
    wandb_project: str | None = None
    n_records: int = 0
    significance_test: str = SIGNIFICANCE_TEST
    smoke: dict[str, list[int]] | None = None   # {"steps": [...], "seeds": [...]} of a smoke test's records
    sharing: dict[str, Any] | None = None        # how jobs shared the cores, when some ran at once (_sharing)

    @property
    def extra_lengths(self) -> list[int]:
        """Evaluated lengths shown besides the accuracy column (the training length is that column)."""
        if len(self.eval_lengths) < 2:
            return []
        return [L for L in self.eval_lengths if L != self.train_length]

    @property
    def length_columns(self) -> list[int]:
        """The lengths of the CSV's ``acc@L`` columns: every evaluated length, when there are several."""
        return list(self.eval_lengths) if len(self.eval_lengths) > 1 else []

    @property
    def metrics(self) -> list[str]:
        """The rows' metrics, in row order, each once (one name unless the tasks' metrics differ)."""
        return list(dict.fromkeys(r.metric for r in self.rows if r.metric)) or [self.metric]

    def metric_note(self) -> str:
        """What the accuracy column holds: the metric, or which metric each task (row) uses."""
        if len(self.metrics) < 2:
            return f"{self.metric} on held-out data (%)"
        uses = []
        for metric in self.metrics:
            rows = [r for r in self.rows if r.metric == metric]
            tasks = list(dict.fromkeys(t for r in rows for t in r.tasks))
            by_task = tasks and not any(set(r.tasks) & set(tasks) for r in self.rows if r.metric != metric)
            uses.append(f"{metric} for {'task ' if by_task else ''}"
                        + ", ".join(tasks if by_task else [r.label for r in rows]))
        return (f"accuracy: each task's own metric on held-out data (%), not comparable across metrics "
                f"({'; '.join(uses)})")

    def caption(self) -> str:
        ns = sorted({r.n for r in self.rows}) or [0]
        n = f"n = {ns[0]}" if len(ns) == 1 else f"n = {ns[0]}–{ns[-1]}"
        parts = [
            f"{self.metric_note()}, mean ± sample std over seeds ({n} ok runs per variant)",
            f"* p<0.05, ** p<0.01: {self.significance_test}",
            self.speed_note,
            "memory: peak bytes per training step"
            + (f" ({self.memory_source})" if self.memory_source else "") + ", ratio to baseline",
            f"baseline: {self.baseline}",
            "diverged/failed runs are counted in status and excluded from means",
        ]
        if self.sharing and self.speed_source == "records":
            parts.insert(3, self.sharing_note())
        if self.extra_lengths:
            trained = f"trained at length {self.train_length}; " if self.train_length else ""
            metric = self.metric if len(self.metrics) < 2 else "accuracy"
            parts.insert(1, f"{trained}acc@L: {metric} at evaluation length L")
        if self.smoke:
            parts.insert(0, f"SMOKE TEST ({self.smoke_note()}), not a result")
        return "; ".join(parts) + "."

    def smoke_note(self) -> str:
        """``20 steps, seed 0``: what the smoke test's runs were."""
        if not self.smoke:
            return ""
        steps, seeds = self.smoke.get("steps") or [], self.smoke.get("seeds") or []
        out = []
        if steps:
            out.append(f"{_span(steps)} step{'s' if steps[-1] != 1 else ''}")
        if seeds:
            out.append(f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}")
        return ", ".join(out) or "smoke=true"

    def sharing_note(self) -> str:
        """The caption's sentence on jobs that ran at once on the same cores."""
        s = self.sharing or {}
        threads = s.get("threads") or []
        each = f", {_span(threads)} torch thread{'s' if threads and threads[-1] != 1 else ''} each" if threads else ""
        cores = f" on {s['cores']} cores" if s.get("cores") else ""
        over = (" (more threads than cores)" if threads and s.get("cores")
                and threads[-1] * s["jobs"] > s["cores"] else "")
        return (f"jobs shared the machine: up to {s['jobs']} ran at once{cores}{each}{over}, so the speed "
                "ratios come from runs competing for the CPU (`ablate-table --bench` re-times the "
                "variants interleaved)")


def _span(values: list[int]) -> str:
    return str(values[0]) if values[0] == values[-1] else f"{values[0]}–{values[-1]}"


def _smoke(records: list[dict]) -> dict[str, list[int]] | None:
    """Steps and seeds of the records, when any of them is a smoke test (``smoke: true``)."""
    smoke = [r for r in records if isinstance(r.get("config"), dict) and r["config"].get("smoke") is True]
    if not smoke:
        return None
    steps = finite(_metric(r, "steps") for r in smoke) or finite(
        ((r["config"].get("trainer") or {}).get("max_steps") for r in smoke))
    seeds = finite(r["config"].get("seed") for r in smoke)
    return {"steps": sorted({int(s) for s in steps}), "seeds": sorted({int(s) for s in seeds})}


def _sharing(records: list[dict]) -> dict[str, Any] | None:
    """How the ok runs' jobs shared the cores, when some ran at once (``metrics.concurrent_jobs``)."""
    ok = [r for r in records if r.get("status") == "ok"]
    jobs = finite(_metric(r, "concurrent_jobs") for r in ok)
    if not jobs or max(jobs) <= 1:
        return None
    cores = finite(_metric(r, "cpu_cores") for r in ok)
    return {"jobs": int(max(jobs)), "threads": sorted({int(t) for t in finite(_metric(r, "torch_threads") for r in ok)}),
            "cores": int(max(cores)) if cores else None}


def _task(record: dict) -> str | None:
    task = (record.get("config") or {}).get("task")
    name = task.get("name") if isinstance(task, dict) else None
    return str(name) if name else (record.get("choices") or {}).get("task")


def _metric(record: dict, name: str) -> Any:
    return (record.get("metrics") or {}).get(name)


def _first(records: list[dict], getter) -> Any:
    for r in records:
        try:
            v = getter(r)
        except (AttributeError, KeyError, TypeError):
            v = None
        if v not in (None, ""):
            return v
    return None


def _experiment(records: list[dict]) -> dict:
    exp: dict = {}
    labels: dict = {}
    for r in records:
        e = r.get("experiment")
        if isinstance(e, dict):
            for k, v in e.items():
                exp.setdefault(k, v)
            labels.update({k: v for k, v in (e.get("labels") or {}).items() if k not in labels})
    exp["labels"] = labels
    return exp


def _label(ov: dict[str, str], labels: dict[str, str]) -> str:
    if not ov:
        return "default"
    pairs = [f"{k}={v}" for k, v in ov.items()]
    for candidate in (variant_key(ov), ",".join(pairs), " ".join(pairs)):
        if candidate in labels:
            return str(labels[candidate])
    if len(ov) == 1:
        (pair, value), = zip(pairs, ov.values())
        return str(labels.get(pair, value))
    return " ".join(str(labels.get(p, p)) for p in pairs)


def resolve_baseline(spec: str, rows: list[Row]) -> Row:
    """A row named by an override string (``qkv_sharing=independent``), a label, or a value."""
    spec = spec.strip()
    wanted = split_override_string(spec) if "=" in spec else {}
    if wanted:
        exact = [r for r in rows if r.overrides == wanted or r.key == variant_key(wanted)]
        if exact:
            return exact[0]
        subset = [r for r in rows if wanted.items() <= r.overrides.items()]
        if len(subset) == 1:
            return subset[0]
    for match in (lambda r: r.label == spec,
                  lambda r: r.key == spec,
                  lambda r: " ".join(r.overrides.values()) == spec or ",".join(r.overrides.values()) == spec,
                  lambda r: r.label.lower() == spec.lower()):
        found = [r for r in rows if match(r)]
        if len(found) == 1:
            return found[0]
    valid = "\n  ".join(f"{r.key or '(no overrides)'}  [{r.label}]" for r in rows)
    raise ValueError(f"unknown baseline {spec!r}; valid variants (override string [label]):\n  {valid}")


def _train_length(records: list[dict], lengths: list[int]) -> int | None:
    seq_len = _first(records, lambda r: r["config"]["task"]["seq_len"])
    if isinstance(seq_len, int) and seq_len in lengths:
        return seq_len
    for r in records:  # the evaluated length whose accuracy is the headline accuracy
        acc, ev = _metric(r, "accuracy"), _metric(r, "eval") or {}
        for L, m in ev.items():
            if isinstance(m, dict) and acc is not None and m.get("accuracy") == acc:
                try:
                    return int(L)
                except ValueError:
                    pass
    return None


def build_table(records: list[dict], baseline: str | None = None, bench: dict | None = None) -> SweepTable:
    """Summarise records (``load_records``) into one row per variant, in sweep order.

    Baseline: ``baseline`` (an override string, a label or a value) > the records'
    ``experiment.baseline`` > the first variant. Speed: ``bench`` (``bench.json`` format), else a
    ``bench.json`` in the records' sweep directory, else the records' own tokens/s.
    Raises ValueError for an unknown ``baseline`` (listing the valid ones) or no records.
    """
    records = sort_records(records)
    if not records:
        raise ValueError("no records")
    if bench is None:
        sweep_dirs = {r.get("_sweep_dir") for r in records}
        if len(sweep_dirs) == 1 and None not in sweep_dirs:
            bench = load_bench(sweep_dirs.pop())
    groups = {(r.get("wandb") or {}).get("group") for r in records} - {None}
    if len(groups) > 1:
        warnings.warn(f"records come from several wandb groups ({', '.join(sorted(groups))}): "
                      "is PATH one sweep?", stacklevel=2)

    exp = _experiment(records)
    swept = records_swept_keys(records)
    by_key = group_by_variant(records, swept)

    lengths = sorted({int(L) for r in records for L in (_metric(r, "eval") or {}) if str(L).isdigit()})
    train_len = _train_length(records, lengths)
    if train_len is not None:
        lengths = [train_len] + [L for L in lengths if L != train_len]

    rows = []
    for key, ov in variants(records, swept).items():
        runs = by_key[key]
        ok = [r for r in runs if r.get("status") == "ok"]
        row = Row(key=key, label=_label(ov, exp["labels"]), overrides=ov,
                  counts=dict(Counter(str(r.get("status") or "unknown") for r in runs)))
        row.accuracies = finite(_metric(r, "accuracy") for r in ok)
        named = [str(m) for m in (_metric(r, "metric") for r in (ok or runs)) if m]
        row.metric = " / ".join(dict.fromkeys(named)) or None
        row.tasks = list(dict.fromkeys(t for t in map(_task, runs) if t))
        row.accuracy_mean, row.accuracy_std = mean(row.accuracies), std(row.accuracies)
        row.loss_mean = mean(finite(_metric(r, "loss") for r in ok))
        row.tokens_per_s = mean(finite(_metric(r, "tokens_per_s") for r in ok))
        row.memory_bytes = mean(finite(_metric(r, "peak_memory_bytes") for r in ok))
        params = finite(_metric(r, "params") for r in ok) or finite(_metric(r, "params") for r in runs)
        row.params = round(mean(params)) if params else None
        for L in lengths:
            accs = finite(((_metric(r, "eval") or {}).get(str(L)) or {}).get("accuracy") for r in ok)
            row.eval[L] = (mean(accs), std(accs))
        rows.append(row)

    spec = baseline or exp.get("baseline")
    base, base_of = _baselines(str(spec) if spec else None, rows, strict=bool(baseline))
    base.is_baseline = True
    for row in base_of.values():
        row.is_baseline = True

    speed_source, rounds = "records", None
    speed_note = "speed: per-run median tokens/s (separate runs), mean over seeds, ratio to baseline"
    if bench is not None:
        speeds = bench_speeds(bench, swept)
        if not speeds.keys() & {r.key for r in rows}:
            warnings.warn("bench.json names none of this sweep's variants; using the runs' own speeds",
                          stacklevel=2)
        else:
            speed_source, rounds = "bench", bench.get("rounds")
            of = f", median of {rounds} rounds" if rounds else ", median over rounds"
            speed_note = f"speed: interleaved benchmark (ablate-bench){of}, ratio to baseline"
            for row in rows:
                row.tokens_per_s = speeds.get(row.key)

    for row in rows:
        row_base = base_of.get(row.key, base)
        row.speed_ratio = ratio(row.tokens_per_s, row_base.tokens_per_s)
        row.memory_ratio = ratio(row.memory_bytes, row_base.memory_bytes)
        row.p_value = None if row.is_baseline else welch_p(row.accuracies, row_base.accuracies)

    per_group = len(set(map(id, base_of.values()))) > 1
    row_metrics = list(dict.fromkeys(r.metric for r in rows if r.metric))
    return SweepTable(
        rows=rows, baseline=f"{spec} (per {', '.join(_other_keys(base_of, spec))})" if per_group else base.label,
        baseline_key=base.key,
        metric=" / ".join(row_metrics) or str(_first(records, lambda r: r["metrics"]["metric"]) or "accuracy"),
        speed_source=speed_source, speed_note=speed_note, eval_lengths=lengths, train_length=train_len,
        experiment=exp.get("name"), memory_source=_first(records, lambda r: r["metrics"]["memory_source"]),
        bench_rounds=rounds, wandb_group=_first(records, lambda r: r["wandb"]["group"]),
        wandb_project=_first(records, lambda r: r["wandb"]["project"]), n_records=len(records),
        smoke=_smoke(records), sharing=_sharing(records),
    )


def _baselines(spec: str | None, rows: list[Row], strict: bool) -> tuple[Row, dict[str, Row]]:
    """The baseline row, and for sweeps over several keys each row's own baseline.

    A baseline that names only some swept keys (``qkv_sharing=independent`` in a sweep of
    task x qkv_sharing) matches several rows: each row is then compared with the matching row
    that has its other values (independent QKV on the same task)."""
    if not spec:
        return rows[0], {}
    wanted = split_override_string(spec) if "=" in spec else {}
    matches = [r for r in rows if wanted and wanted.items() <= r.overrides.items()]
    if len(matches) > 1:
        def rest(row: Row) -> dict[str, str]:
            return {k: v for k, v in row.overrides.items() if k not in wanted}
        base_of = {row.key: m for row in rows for m in matches if rest(m) == rest(row)}
        return matches[0], base_of
    try:
        return resolve_baseline(spec, rows), {}
    except ValueError:
        if strict:
            raise
        if len(rows) > 1:
            warnings.warn(f"experiment baseline {spec!r} has no records; using the first variant", stacklevel=2)
        return rows[0], {}


def _other_keys(base_of: dict[str, Row], spec: str) -> list[str]:
    wanted = split_override_string(spec)
    return sorted({k for row in base_of.values() for k in row.overrides if k not in wanted})
