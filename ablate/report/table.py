"""Sweep records -> one row per variant: the table's numbers, before any format.

* accuracy: mean ± sample std (ddof=1) over the ``ok`` runs of the variant, and its difference to
  the baseline (Δ, with a 95% confidence interval) from a test against the baseline's runs
  (``ablate.report.stats``): by default the paired t-test over seeds (seed s gives every variant
  the same data order and held-out data, so runs are paired by ``config.seed``), or Welch's test
  (``test="welch"``). The p-values of the table's comparisons are Holm–Bonferroni-corrected and the
  marks (``*`` p<0.05, ``**`` p<0.01) use the corrected p;
* one ``acc@L`` column per evaluated length for length-extrapolation sweeps (more than one
  length evaluated);
* the metric: what "accuracy" means is the task's (``metrics.metric``); a sweep across tasks
  whose metrics differ says which metric each row has;
* speed: tokens/s and its ratio to the baseline, from the runs' own per-run medians or, when a
  ``bench.json`` (``ablate-bench``) is given, from the interleaved benchmark;
* memory: peak bytes per training step (MiB and ratio to the baseline); params; run status;
* where the records have them: training FLOPs (absolute and ratio to the baseline), the
  validation loss at 25% of training and at the end (Narang et al. 2021), the steps, and the
  budget the sweep matched (steps, tokens or training FLOPs: ``record["budget"]``);
* a tuned sweep (``sweep.json``'s ``tune`` block): each variant's rows are its runs at its chosen
  lr, with that lr and a second Δ: the one at the shared default lr (the tuning runs there).

A table can be pivoted (``columns="task"``: one accuracy column per value of that key, the rows
the variants without it, plus ``avg``; each cell is compared with the baseline in its column) and
its rows chosen and ordered (``rows=[...]``); both default to the experiment's
``columns`` / ``rows``.

Diverged and failed runs are counted in ``status`` and excluded from every mean. The rows are
the variants of ``ablate.sweep`` (one definition of a variant for the table, wandb and bench.json).
The caption also says when the records come from a smoke test (``smoke: true`` in their config)
and when jobs ran at once on the same cores (their ``metrics.concurrent_jobs``), since the speeds
of such runs come from runs competing for the CPU.
"""

from __future__ import annotations

import math
import re
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from ablate.report.records import bench_speeds, load_bench, sort_records
from ablate.report.stats import (SIGNIFICANCE_TESTS, TEST_NAMES, TESTS, Comparison, finite, holm, mark, mean,
                                 paired_test, ratio, std, welch_test)
from ablate.sweep import (group_by_variant, job_variant, override_key, read_sweep_tune, records_swept_keys,
                          split_override_string, variant_key, variants)

STATUSES = ("ok", "diverged", "failed", "interrupted", "running")


@dataclass
class Row:
    """One variant: its runs summarised (accuracy as a fraction 0-1; None when unknown).

    In a pivoted table a shown row is the variant without the columns key; its ``cells`` are the
    full variants (one per column), each a Row of its own; its accuracy is their ``avg``."""

    key: str                                   # variant_key of its overrides
    label: str
    overrides: dict[str, str]
    is_baseline: bool = False
    counts: dict[str, int] = field(default_factory=dict)   # status -> number of runs
    accuracies: list[float] = field(default_factory=list)  # of the ok runs
    by_seed: dict[Any, float] = field(default_factory=dict)  # seed -> accuracy (ok runs; a seed's runs averaged)
    accuracy_mean: float | None = None
    accuracy_std: float | None = None
    loss_mean: float | None = None
    tokens_per_s: float | None = None
    speed_ratio: float | None = None
    memory_bytes: float | None = None
    memory_ratio: float | None = None
    params: int | None = None
    eval: dict[int, tuple[float | None, float | None]] = field(default_factory=dict)  # L -> (mean, std)
    metric: str | None = None                  # what its accuracy is (its records' metrics.metric)
    tasks: list[str] = field(default_factory=list)         # its runs' task names
    # the comparison with its baseline (None for the baseline itself)
    delta: float | None = None                 # accuracy - baseline's (fraction)
    delta_ci_low: float | None = None
    delta_ci_high: float | None = None
    p_value: float | None = None               # the test's own p
    p_corrected: float | None = None           # Holm–Bonferroni across the table's comparisons
    n_paired: int | None = None                # seeds both rows have (paired test)
    # from the newer record keys, where present
    steps: float | None = None                 # mean metrics.steps of the ok runs
    flops_per_token: float | None = None
    train_flops: float | None = None
    flops_ratio: float | None = None
    early_loss: float | None = None            # validation loss at 25% of training
    final_loss: float | None = None            # validation loss at the end
    histories: list[list[dict]] = field(default_factory=list)  # ok runs' metrics.history
    # tuned sweeps
    lr: float | None = None                    # the chosen lr (its rows' runs trained at it)
    delta_default_lr: float | None = None      # Δ to the baseline at the shared default lr
    by_seed_default: dict[Any, float] = field(default_factory=dict)  # ... its runs there: seed -> accuracy
    accuracies_default: list[float] = field(default_factory=list)
    # pivoted tables
    cells: dict[str, "Row"] = field(default_factory=dict)  # column value -> that variant's row
    column: str | None = None                  # a cell: its value of the columns key

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
        """``*``/``**`` from the corrected p-value (none for the baseline)."""
        return "" if self.is_baseline else mark(self.p_corrected)

    @property
    def avg(self) -> float | None:
        """A pivoted row: the mean of its cells' means (None while a cell has none)."""
        means = [c.accuracy_mean for c in self.cells.values()]
        return None if not means or None in means else sum(means) / len(means)

    def compare(self, cmp: Comparison) -> None:
        self.delta, self.delta_ci_low, self.delta_ci_high = cmp.delta, cmp.ci_low, cmp.ci_high
        self.p_value, self.n_paired = cmp.p_value, cmp.n


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
    # runs trained at several lengths (task.seq_len swept): each row's accuracy is at its own
    # training length, and only the lengths some run was evaluated at beyond its own get a column
    beyond_lengths: list[int] | None = None
    experiment: str | None = None
    memory_source: str | None = None
    bench_rounds: int | None = None
    wandb_group: str | None = None
    wandb_project: str | None = None
    n_records: int = 0
    test: str = "paired"               # "paired" | "welch"
    n_comparisons: int = 0             # p-values the Holm correction ran over
    smoke: dict[str, list[int]] | None = None   # {"steps": [...], "seeds": [...]} of a smoke test's records
    sharing: dict[str, Any] | None = None        # how jobs shared the cores, when some ran at once (_sharing)
    columns_key: str | None = None     # pivoted: the swept key whose values are the columns
    column_values: list[str] = field(default_factory=list)
    column_labels: dict[str, str] = field(default_factory=dict)
    budget: dict[str, Any] | None = None         # record["budget"] of the runs (what was matched)
    tune: dict[str, Any] | None = None           # sweep.json's tune block, for a tuned sweep
    baseline_shown: bool = True                  # False when the rows chosen leave the baseline out

    @property
    def significance_test(self) -> str:
        return SIGNIFICANCE_TESTS[self.test]

    @property
    def pivoted(self) -> bool:
        return self.columns_key is not None

    @property
    def flat(self) -> list[Row]:
        """The variants shown, each once: the rows, or in a pivoted table their cells."""
        if not self.pivoted:
            return list(self.rows)
        return [r.cells[v] for r in self.rows for v in self.column_values if v in r.cells]

    @property
    def extra_lengths(self) -> list[int]:
        """Evaluated lengths shown besides the accuracy column (the training length is that column)."""
        if len(self.eval_lengths) < 2 or self.pivoted:
            return []
        if self.beyond_lengths is not None:
            return list(self.beyond_lengths)
        return [L for L in self.eval_lengths if L != self.train_length]

    @property
    def length_columns(self) -> list[int]:
        """The lengths of the CSV's ``acc@L`` columns: every evaluated length, when there are several."""
        return list(self.eval_lengths) if len(self.eval_lengths) > 1 and not self.pivoted else []

    @property
    def has_flops(self) -> bool:
        return any(r.train_flops is not None for r in self.flat)

    @property
    def has_losses(self) -> bool:
        return any(r.early_loss is not None or r.final_loss is not None for r in self.flat)

    @property
    def steps_differ(self) -> bool:
        return len({round(r.steps) for r in self.flat if r.steps is not None}) > 1

    @property
    def tuned(self) -> bool:
        return self.tune is not None

    @property
    def has_histories(self) -> bool:
        return any(r.histories for r in self.flat)

    @property
    def metrics(self) -> list[str]:
        """The rows' metrics, in row order, each once (one name unless the tasks' metrics differ)."""
        return list(dict.fromkeys(r.metric for r in self.flat if r.metric)) or [self.metric]

    def column_label(self, value: str) -> str:
        return self.column_labels.get(value, value)

    def metric_note(self) -> str:
        """What the accuracy column holds: the metric, or which metric each task (row) uses."""
        if len(self.metrics) < 2:
            return f"{self.metric} on the test split (%)"
        uses = []
        for metric in self.metrics:
            rows = [r for r in self.flat if r.metric == metric]
            tasks = list(dict.fromkeys(t for r in rows for t in r.tasks))
            by_task = tasks and not any(set(r.tasks) & set(tasks) for r in self.flat if r.metric != metric)
            uses.append(f"{metric} for {'task ' if by_task else ''}"
                        + ", ".join(tasks if by_task else [r.label for r in rows]))
        return (f"accuracy: each task's own metric on the test split (%), not comparable across metrics "
                f"({'; '.join(uses)})")

    def test_note(self) -> str:
        """The caption's sentence on the marks and the Δ column."""
        n = self.n_comparisons
        marks = (f"* p<0.05, ** p<0.01: {TEST_NAMES[self.test]}, Holm–Bonferroni-corrected across "
                 f"{n} comparison{'s' if n != 1 else ''} (two-sided, accuracy vs the baseline"
                 + (" in the same column" if self.pivoted else "") + ")")
        if self.pivoted:
            return marks
        how = ("mean of the differences over the seeds both rows have" if self.test == "paired"
               else "difference of the means")
        return f"{marks}; Δ: accuracy minus the baseline's in points, {how}, [95% CI]"

    def budget_note(self) -> str | None:
        """Which training budget the variants shared (``record["budget"]["match"]``), if recorded."""
        b = self.budget
        if not b or not b.get("match"):
            return None
        match = b["match"]
        if match == "steps":
            steps = sorted(b.get("steps_all") or ([b["steps"]] if b.get("steps") else []))
            if steps:
                return f"budget: every variant trained for {_span(steps)} steps"
            return "budget: every variant trained for the same number of steps"
        if match == "tokens":
            of = f" ({_count(b['baseline_tokens'])} tokens)" if b.get("baseline_tokens") else ""
            return f"budget: training tokens matched to the baseline's{of}"
        if match == "flops":
            flops = b.get("baseline_train_flops")
            of = f": {flops:.2g} per run".replace("e+", "e") if flops else ""
            return f"budget: training FLOPs matched to the baseline's (±1 step){of}"
        return f"budget: {match} matched"

    def tune_note(self) -> str | None:
        t = self.tune
        if not t:
            return None
        grid = ", ".join(_lr_text(lr) for lr in t.get("lr") or [])
        seeds = t.get("seeds") or []
        on = f", tuning seed{'s' if len(seeds) != 1 else ''} {', '.join(map(str, seeds))}" if seeds else ""
        note = (f"lr tuned per variant on the validation split (grid {grid}; best validation "
                f"{t.get('metric') or 'loss'}{on}); the rows are the runs at each variant's chosen lr")
        if t.get("default_lr") is not None:
            note += f"; Δ @ default lr: the same comparison at the shared default lr {_lr_text(t['default_lr'])}"
        missing = [r.label for r in self.flat if r.lr is None]
        if missing:
            note += f"; not tuned yet (runs at the default lr shown): {', '.join(missing)}"
        return note

    def caption(self) -> str:
        ns = sorted({r.n for r in self.flat}) or [0]
        n = f"n = {ns[0]}" if len(ns) == 1 else f"n = {ns[0]}–{ns[-1]}"
        baseline = f"baseline: {self.baseline}" + ("" if self.baseline_shown else " (row not shown)")
        parts = [f"{self.metric_note()}, mean ± sample std over seeds ({n} ok runs per variant)"]
        if self.pivoted:
            parts.append(f"columns: {self.columns_key}; avg: mean of the row's per-{self.columns_key} means")
        parts.append(self.test_note())
        if not self.pivoted:
            parts.append(self.speed_note)
            parts.append("memory: peak bytes per training step"
                         + (f" ({self.memory_source})" if self.memory_source else "") + ", ratio to baseline")
            if self.has_flops:
                parts.append("FLOPs: training FLOPs of a run (forward + backward: matmuls and attention "
                             "scores), mean over seeds, ratio to baseline")
            if self.has_losses:
                parts.append("early/final loss: validation loss at 25% of training and at its end "
                             "(Narang et al. 2021), mean over seeds")
        for note in (self.budget_note(), self.tune_note()):
            if note:
                parts.append(note)
        parts += [baseline, "diverged/failed runs are counted in status and excluded from means"]
        if self.sharing and self.speed_source == "records" and not self.pivoted:
            parts.insert(parts.index(self.speed_note) + 1, self.sharing_note())
        if self.beyond_lengths is not None:
            parts.insert(1, "each run's accuracy at its own training length (task.seq_len)")
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


def _count(value: float) -> str:
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= div:
            return f"{value / div:.3g}{unit}"
    return f"{value:.0f}"


def _lr_text(lr: float) -> str:
    return f"{float(lr):g}"


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


def _budget(records: list[dict]) -> dict[str, Any] | None:
    """The budget the runs matched (their ``record["budget"]``), with every ``steps`` value seen."""
    budgets = [r["budget"] for r in records if isinstance(r.get("budget"), dict) and r["budget"].get("match")]
    if not budgets:
        return None
    out = dict(budgets[0])
    out["steps_all"] = sorted({int(s) for s in finite(b.get("steps") for b in budgets)})
    return out


def _task(record: dict) -> str | None:
    task = (record.get("config") or {}).get("task")
    name = task.get("name") if isinstance(task, dict) else None
    return str(name) if name else (record.get("choices") or {}).get("task")


def _metric(record: dict, name: str) -> Any:
    return (record.get("metrics") or {}).get(name)


def _seed(record: dict) -> Any:
    """The seed a run was paired by: ``config.seed``, else its ``seed=`` override (None when unknown)."""
    seed = (record.get("config") or {}).get("seed")
    if seed is None:
        for o in record.get("overrides") or []:
            if override_key(str(o)) == "seed" and "=" in str(o):
                seed = str(o).split("=", 1)[1].strip()
    if isinstance(seed, str) and seed.lstrip("-").isdigit():
        seed = int(seed)
    return seed


def _lr(record: dict) -> float | None:
    """The lr a run trained at: ``metrics.lr``, else ``config.optim.lr``."""
    lr = _metric(record, "lr")
    if lr is None:
        lr = ((record.get("config") or {}).get("optim") or {}).get("lr")
    try:
        return float(lr)
    except (TypeError, ValueError):
        return None


def _same_lr(a: float | None, b: Any) -> bool:
    try:
        return a is not None and math.isclose(a, float(b), rel_tol=1e-6)
    except (TypeError, ValueError):
        return False


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


def _find_row(spec: str, rows: list[Row]) -> Row | None:
    """The row an override string (``qkv_sharing=independent``), a label or a value names, or None."""
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
    return None


def _valid(rows: list[Row]) -> str:
    return "\n  ".join(f"{r.key or '(no overrides)'}  [{r.label}]" for r in rows)


def resolve_baseline(spec: str, rows: list[Row]) -> Row:
    """A row named by an override string (``qkv_sharing=independent``), a label, or a value."""
    found = _find_row(spec, rows)
    if found is None:
        raise ValueError(f"unknown baseline {spec.strip()!r}; valid variants (override string [label]):\n  "
                         + _valid(rows))
    return found


def resolve_rows(specs: Iterable[str], rows: list[Row], strict: bool = True) -> list[Row]:
    """The rows named by ``specs`` (variant keys, override strings, labels or values), in that order.

    An unknown name raises ValueError listing the valid ones (``strict``), else is left out with a warning."""
    out: list[Row] = []
    for spec in specs:
        spec = str(spec).strip()
        if not spec:
            continue
        found = _find_row(spec, rows)
        if found is None:
            msg = f"unknown row {spec!r}; valid rows (override string [label]):\n  {_valid(rows)}"
            if strict:
                raise ValueError(msg)
            warnings.warn(f"experiment.rows: {msg}", stacklevel=3)
        elif found not in out:
            out.append(found)
    return out


def split_rows(text: str, rows: list[Row]) -> list[str]:
    """``"a,b,c"`` -> the row names in it. Commas also sit inside names (a variant key
    ``norm=rmsnorm,pos_enc=rope``, a label ``Q=K, V separate``), so at each position the longest
    run of comma-separated parts that names a row is one name."""
    def names_one(name: str) -> bool:  # exactly: a part of a longer name is no name of its own
        pairs = [p for p in re.split(r",\s*", name) if p]
        parsed = split_override_string(name) if all("=" in p for p in pairs) else {}
        return any(r.label == name or r.key == name or ",".join(r.overrides.values()) == name
                   or (len(parsed) == len(pairs) and parsed == r.overrides) for r in rows)

    parts = text.split(",")
    out, i = [], 0
    while i < len(parts):
        for j in range(len(parts), i, -1):
            name = ",".join(parts[i:j]).strip()
            if j == i + 1 or names_one(name):
                break
        if name:
            out.append(name)
        i = j
    return out


def _seq_len(record: dict) -> int | None:
    try:
        value = record["config"]["task"]["seq_len"]
    except (KeyError, TypeError):
        return None
    return value if isinstance(value, int) else None


def _beyond_lengths(records: list[dict]) -> list[int] | None:
    """Where the runs trained at several lengths: the lengths some run was evaluated at besides its
    own training length (None where they all trained at one length)."""
    if len({_seq_len(r) for r in records} - {None}) < 2:
        return None
    return sorted({int(L) for r in records for L in (_metric(r, "eval") or {})
                   if str(L).isdigit() and int(L) != _seq_len(r)})


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


def _by_seed(runs: list[dict]) -> dict[Any, float]:
    """``{seed: accuracy}`` of the ok runs with a finite accuracy (a seed's runs averaged)."""
    seen: dict[Any, list[float]] = {}
    for r in runs:
        acc = finite([_metric(r, "accuracy")])
        seed = _seed(r)
        if acc and seed is not None:
            seen.setdefault(seed, []).append(acc[0])
    return {s: sum(v) / len(v) for s, v in seen.items()}


def _history(record: dict) -> list[dict]:
    hist = _metric(record, "history")
    if not isinstance(hist, list):
        return []
    return [h for h in hist if isinstance(h, dict) and finite([h.get("loss")])]


def _row(key: str, ov: dict[str, str], runs: list[dict], labels: dict, lengths: list[int]) -> Row:
    """A variant's runs summarised."""
    ok = [r for r in runs if r.get("status") == "ok"]
    row = Row(key=key, label=_label(ov, labels), overrides=ov,
              counts=dict(Counter(str(r.get("status") or "unknown") for r in runs)))
    row.accuracies = finite(_metric(r, "accuracy") for r in ok)
    row.by_seed = _by_seed(ok)
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
    row.steps = mean(finite(_metric(r, "steps") for r in ok))
    row.flops_per_token = mean(finite(_metric(r, "flops_per_token") for r in ok))
    row.train_flops = mean(finite(_metric(r, "train_flops") for r in ok))
    row.early_loss = mean(finite(_metric(r, "early_loss") for r in ok))
    row.final_loss = mean(finite(_metric(r, "final_loss") for r in ok))
    row.histories = [h for h in map(_history, ok) if h]
    return row


def _sweep_dirs(records: list[dict]) -> set[Path | None]:
    """The directories the records' job directories sit in (their sweeps', holding ``sweep.json``)."""
    return {Path(r["_path"]).parent.parent if r.get("_path") else None for r in records}


def _tune_block(records: list[dict]) -> dict | None:
    """The ``tune`` block of the records' one ``sweep.json`` (None for untuned sweeps)."""
    dirs = _sweep_dirs(records)
    if len(dirs) != 1 or None in dirs:
        return None
    tune = read_sweep_tune(dirs.pop())
    return tune if isinstance(tune, dict) and tune.get("lr") else None


def _tuned_runs(records: list[dict], swept: set[str], tune: dict) -> tuple[list[dict], list[dict]]:
    """A tuned sweep's records -> (the final runs: each variant's at its chosen lr and the sweep's
    seeds; the runs at the shared default lr and the tuning seeds)."""
    chosen = tune.get("chosen") or {}
    default = tune.get("default_lr")
    final_seeds = tune.get("final_seeds")  # when the sweep records them; else every seed at the chosen lr
    tuning_seeds = tune.get("seeds")
    final, at_default = [], []
    for r in records:
        lr, seed = _lr(r), _seed(r)
        key = job_variant(r.get("overrides"), swept)
        if key in chosen:
            if _same_lr(lr, chosen[key]) and (not isinstance(final_seeds, list) or seed in final_seeds):
                final.append(r)
        elif _same_lr(lr, default):  # tuning not finished for this variant: its default-lr runs
            final.append(r)
        if _same_lr(lr, default) and (not isinstance(tuning_seeds, list) or seed in tuning_seeds):
            at_default.append(r)
    return final, at_default


def _compare(row: Row, base: Row, test: str) -> Comparison:
    if test == "paired":
        return paired_test(row.by_seed, base.by_seed)
    return welch_test(row.accuracies, base.accuracies)


def build_table(records: list[dict], baseline: str | None = None, bench: dict | None = None,
                test: str = "paired", columns: str | None = None,
                rows: str | Iterable[str] | None = None) -> SweepTable:
    """Summarise records (``load_records``) into one row per variant, in sweep order.

    Baseline: ``baseline`` (an override string, a label or a value) > the records'
    ``experiment.baseline`` > the first variant. Speed: ``bench`` (``bench.json`` format), else a
    ``bench.json`` in the records' sweep directory, else the records' own tokens/s.
    ``test``: ``paired`` (paired t-test over seeds) or ``welch``; either is Holm-corrected across
    the table's comparisons. ``columns``: a swept key pivoted into columns (``""``/``"none"``: no
    pivot; default: ``experiment.columns``). ``rows``: the rows shown, in order (variant keys,
    labels or values; a list or a comma-separated string; default: ``experiment.rows``, else all).
    A tuned sweep (``sweep.json`` with a ``tune`` block) shows each variant's runs at its chosen lr.
    Raises ValueError for an unknown ``baseline``, ``columns`` key or ``rows`` entry (listing the
    valid ones), an unknown ``test``, or no records.
    """
    if test not in TESTS:
        raise ValueError(f"unknown test {test!r}; valid: {', '.join(TESTS)}")
    records = sort_records(records)
    if not records:
        raise ValueError("no records")
    n_records = len(records)
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
    tune = _tune_block(records)
    at_default: list[dict] = []
    if tune is not None:
        records, at_default = _tuned_runs(records, swept, tune)
        if not records:
            raise ValueError("no records at the chosen (or default) lr of this tuned sweep")
    by_key = group_by_variant(records, swept)

    lengths = sorted({int(L) for r in records for L in (_metric(r, "eval") or {}) if str(L).isdigit()})
    beyond = _beyond_lengths(records)
    train_len = _train_length(records, lengths) if beyond is None else None  # several: none heads the table
    if train_len is not None:
        lengths = [train_len] + [L for L in lengths if L != train_len]

    flat = [_row(key, ov, by_key[key], exp["labels"], lengths) for key, ov in variants(records, swept).items()]
    if tune is not None:
        chosen = tune.get("chosen") or {}
        default_runs = group_by_variant(at_default, swept) if at_default else {}
        for row in flat:
            row.lr = float(chosen[row.key]) if row.key in chosen else None
            row.by_seed_default = _by_seed([r for r in default_runs.get(row.key, []) if r.get("status") == "ok"])
            row.accuracies_default = finite(_metric(r, "accuracy") for r in default_runs.get(row.key, [])
                                            if r.get("status") == "ok")

    # the rows shown: the variants, or pivoted the variants without the columns key
    col_key = _columns_key(columns, exp.get("columns"), flat)
    shown = _pivot(flat, col_key, exp["labels"]) if col_key else flat
    values = list(dict.fromkeys(c for r in shown for c in r.cells)) if col_key else []

    spec = baseline or exp.get("baseline")
    if spec and col_key:  # the baseline is a row: the columns key is every column's
        spec = ",".join(f"{k}={v}" for k, v in split_override_string(str(spec)).items() if k != col_key) or \
            (None if "=" in str(spec) else spec)
    base, base_of = _baselines(str(spec) if spec else None, shown, strict=bool(baseline))
    base.is_baseline = True
    for row in base_of.values():
        row.is_baseline = True
    for row in shown:
        if row.is_baseline:
            for cell in row.cells.values():
                cell.is_baseline = True

    # each variant against its baseline: the pairs (row, its baseline's row) of the flat variants
    pairs: list[tuple[Row, Row | None]] = []
    for row in shown:
        row_base = base_of.get(row.key, base)
        if col_key:
            pairs += [(cell, row_base.cells.get(v)) for v, cell in row.cells.items()]
        else:
            pairs.append((row, row_base))

    speed_source, rounds = "records", None
    speed_note = "speed: per-run median tokens/s (separate runs), mean over seeds, ratio to baseline"
    if bench is not None:
        speeds = bench_speeds(bench, swept)
        if not speeds.keys() & {r.key for r in flat}:
            warnings.warn("bench.json names none of this sweep's variants; using the runs' own speeds",
                          stacklevel=2)
        else:
            speed_source, rounds = "bench", bench.get("rounds")
            of = f", median of {rounds} rounds" if rounds else ", median over rounds"
            speed_note = f"speed: interleaved benchmark (ablate-bench){of}, ratio to baseline"
            for row in flat:
                row.tokens_per_s = speeds.get(row.key)

    for row, row_base in pairs:
        if row_base is None:
            continue
        row.speed_ratio = ratio(row.tokens_per_s, row_base.tokens_per_s)
        row.memory_ratio = ratio(row.memory_bytes, row_base.memory_bytes)
        row.flops_ratio = ratio(row.train_flops, row_base.train_flops)
        if row is not row_base and not row.is_baseline:
            row.compare(_compare(row, row_base, test))
            if tune is not None:
                default = (paired_test(row.by_seed_default, row_base.by_seed_default) if test == "paired"
                           else welch_test(row.accuracies_default, row_base.accuracies_default))
                row.delta_default_lr = default.delta
    if col_key:  # a pivoted row's accuracy: the mean of its cells' means
        for row in shown:
            row.accuracy_mean = row.avg

    # the rows chosen, in the order given; the correction runs over the comparisons shown
    wanted = rows if rows is not None else exp.get("rows")
    if isinstance(wanted, str):
        wanted = split_rows(wanted, shown)
    if wanted:
        chosen_rows = resolve_rows(wanted, shown, strict=rows is not None)
        shown = chosen_rows or shown
    shown_flat = [c for r in shown for c in r.cells.values()] if col_key else shown
    compared = [r for r in shown_flat if not r.is_baseline and r.p_value is not None]
    for row, p in zip(compared, holm([r.p_value for r in compared])):
        row.p_corrected = p

    per_group = len(set(map(id, base_of.values()))) > 1
    row_metrics = list(dict.fromkeys(r.metric for r in flat if r.metric))
    return SweepTable(
        rows=shown, baseline=f"{spec} (per {', '.join(_other_keys(base_of, spec))})" if per_group else base.label,
        baseline_key=base.key,
        metric=" / ".join(row_metrics) or str(_first(records, lambda r: r["metrics"]["metric"]) or "accuracy"),
        speed_source=speed_source, speed_note=speed_note, eval_lengths=lengths, train_length=train_len,
        beyond_lengths=beyond,
        experiment=exp.get("name"), memory_source=_first(records, lambda r: r["metrics"]["memory_source"]),
        bench_rounds=rounds, wandb_group=_first(records, lambda r: r["wandb"]["group"]),
        wandb_project=_first(records, lambda r: r["wandb"]["project"]), n_records=n_records,
        smoke=_smoke(records), sharing=_sharing(records), test=test, n_comparisons=len(compared),
        columns_key=col_key, column_values=values,
        column_labels={v: _label({col_key: v}, exp["labels"]) for v in values} if col_key else {},
        budget=_budget(records), tune=tune, baseline_shown=any(r.is_baseline for r in shown),
    )


def _columns_key(given: str | None, default: Any, flat: list[Row]) -> str | None:
    """The key to pivot into columns: ``given`` (strict) else the experiment's ``columns`` (a
    warning when it names no swept key); None for no pivot."""
    spec = given if given is not None else default
    if not spec or not isinstance(spec, str) or spec.strip().lower() in ("none", "null"):
        return None
    key = override_key(spec.strip())
    keys = list(dict.fromkeys(k for r in flat for k in r.overrides))
    if key in keys and len(keys) > 1:
        return key
    why = (f"{key!r} is the only swept key: pivoting it would leave no rows" if key in keys
           else f"{key!r} is not a swept key of these records; swept keys: {', '.join(keys) or '(none)'}")
    if given is not None:
        raise ValueError(f"--columns {why}")
    warnings.warn(f"experiment.columns: {why}; the table is not pivoted", stacklevel=3)
    return None


def _pivot(flat: list[Row], key: str, labels: dict) -> list[Row]:
    """The variants without ``key``, each with one cell per value of ``key`` (in sweep order)."""
    rows: dict[str, Row] = {}
    for cell in flat:
        rest = {k: v for k, v in cell.overrides.items() if k != key}
        rkey = variant_key(rest)
        if rkey not in rows:
            rows[rkey] = Row(key=rkey, label=_label(rest, labels), overrides=rest)
        row = rows[rkey]
        cell.column = cell.overrides.get(key, "default")
        row.cells[cell.column] = cell
        for status, n in cell.counts.items():
            row.counts[status] = row.counts.get(status, 0) + n
        row.tasks += [t for t in cell.tasks if t not in row.tasks]
        if cell.metric:
            row.metric = " / ".join(m for m in dict.fromkeys([*(row.metric or "").split(" / "), cell.metric]) if m)
    return list(rows.values())


def _baselines(spec: str | None, rows: list[Row], strict: bool) -> tuple[Row, dict[str, Row]]:
    """The baseline row, and for sweeps over several keys each row's own baseline.

    A baseline that names only some swept keys (``qkv_sharing=independent`` in a sweep of
    task x qkv_sharing) matches several rows: each row is then compared with the matching row
    that has its other values (independent QKV on the same task)."""
    if not spec:
        return rows[0], {}
    wanted = split_override_string(spec) if "=" in spec else {}
    matches = [r for r in rows if wanted and wanted.items() <= r.overrides.items()]
    exact = [r for r in matches if r.overrides == wanted]
    if exact and len({frozenset(r.overrides) for r in matches}) > 1:
        # a design's rows: one row is the baseline exactly, the others set keys it leaves at the
        # config's value (norm.placement=post): they are compared with it, not with themselves
        return exact[0], {}
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
