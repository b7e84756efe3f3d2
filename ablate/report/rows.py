"""The rows of a table: ``Row`` (one variant's runs summarised) and how rows are named.

A row is built from its variant's records (``variant_row``): accuracy mean ± sample std over the
``ok`` runs, accuracy by seed for the paired test, loss, speed, memory, params, the accuracy at
each evaluated length, and where the records have them steps, FLOPs and the early/final
validation losses. Diverged and failed runs are counted in ``counts`` and excluded from every mean.

A row is named on the command line and in ``experiment.baseline`` / ``experiment.rows`` by its
variant key, an override string, its label or its values (``resolve_baseline``, ``resolve_rows``,
``split_rows``).
"""

from __future__ import annotations

import re
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable

from ablate.record import CurvePoint, Record
from ablate.report.record_fields import early_stops_of, history_of, seed_of, task_of
from ablate.report.stats import Comparison, RoundRatios, finite, mark, mean, std
from ablate.sweep import split_override_string, variant_key

if TYPE_CHECKING:
    from ablate.sequential import Verdict

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
    speed_rounds: list[float] = field(default_factory=list)  # bench.json: its tokens/s in each interleaved round
    speed_spread: RoundRatios | None = None    # those rounds over the baseline's (speed_ratio is their median)
    run_speeds: list[float] = field(default_factory=list)   # the ok runs' own tokens/s
    cpu_shares: list[float] = field(default_factory=list)   # the ok runs' metrics.cpu_share (timing conditions)
    speed_doubt: tuple[str, str] = ("", "")    # why its speed ratio is in doubt, and its figures (speed_checks)
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
    baseline_key: str | None = None            # the variant key of the baseline it was compared with
    seed_diffs: dict[Any, float] = field(default_factory=dict)  # seed -> accuracy - the baseline's (seeds both have)
    # seed=auto (sweep.json's rounds): the group-sequential verdict of that comparison
    # (``comparisons.decide_rounds``); its Δ interval is then the verdict's repeated CI, and it has no p
    verdict: "Verdict | None" = None
    # from the newer record keys, where present
    steps: float | None = None                 # mean metrics.steps of the ok runs
    flops_per_token: float | None = None
    train_flops: float | None = None
    flops_ratio: float | None = None
    early_loss: float | None = None            # validation loss at 25% of training
    final_loss: float | None = None            # validation loss at the end
    histories: list[list[CurvePoint]] = field(default_factory=list)  # ok runs' metrics.history
    # ok runs an EarlyStopping callback ended before max_steps (metrics.early_stopped): each one's step
    stopped_early: list[int | None] = field(default_factory=list)
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
        """The run counts by status (``3 ok, 1 diverged``); ok runs an EarlyStopping ended before
        max_steps are named: ``3 ok (2 stopped early)``."""
        order = [s for s in STATUSES if self.counts.get(s)] + sorted(set(self.counts) - set(STATUSES))
        early = len(getattr(self, "stopped_early", None) or [])
        return ", ".join(f"{self.counts[s]} {s}" + (f" ({early} stopped early)" if s == "ok" and early else "")
                         for s in order) or "no runs"

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

    def decide(self, verdict: "Verdict") -> None:
        """The comparison decided in rounds of seeds: Δ and its interval become the verdict's (the
        mean paired difference where it stopped, the repeated CI), and the fixed-seed p-values go: they
        are not valid when seeds are added until a comparison is decided."""
        self.verdict = verdict
        if verdict.delta is not None:
            self.delta = verdict.delta
        self.delta_ci_low, self.delta_ci_high = verdict.ci_low, verdict.ci_high
        self.p_value = self.p_corrected = None


def label_of(ov: dict[str, str], labels: dict[str, str]) -> str:
    """A variant's label: ``experiment.labels``' entry for its variant key, override string or (one
    key swept) pair, else its values."""
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


def accuracy_by_seed(runs: list[Record]) -> dict[Any, float]:
    """``{seed: accuracy}`` of the ok runs with a finite accuracy (a seed's runs averaged)."""
    seen: dict[Any, list[float]] = {}
    for r in runs:
        acc = finite([r.metrics.accuracy])
        seed = seed_of(r)
        if acc and seed is not None:
            seen.setdefault(seed, []).append(acc[0])
    return {s: sum(v) / len(v) for s, v in seen.items()}


def variant_row(key: str, ov: dict[str, str], runs: list[Record], labels: dict, lengths: list[int]) -> Row:
    """A variant's runs summarised."""
    ok = [r for r in runs if r.ok]
    row = Row(key=key, label=label_of(ov, labels), overrides=ov,
              counts=dict(Counter(str(r.status or "unknown") for r in runs)))
    okm = [r.metrics for r in ok]
    row.accuracies = finite(m.accuracy for m in okm)
    row.by_seed = accuracy_by_seed(ok)
    named = [str(r.metrics.metric) for r in (ok or runs) if r.metrics.metric]
    row.metric = " / ".join(dict.fromkeys(named)) or None
    row.tasks = list(dict.fromkeys(t for t in map(task_of, runs) if t))
    row.accuracy_mean, row.accuracy_std = mean(row.accuracies), std(row.accuracies)
    row.loss_mean = mean(finite(m.loss for m in okm))
    row.run_speeds = finite(m.tokens_per_s for m in okm)
    row.tokens_per_s = mean(row.run_speeds)
    row.cpu_shares = finite(m.cpu_share for m in okm)
    row.memory_bytes = mean(finite(m.peak_memory_bytes for m in okm))
    params = finite(m.params for m in okm) or finite(r.metrics.params for r in runs)
    row.params = round(mean(params)) if params else None
    for L in lengths:
        accs = finite(m.eval[str(L)].accuracy for m in okm if m.eval.get(str(L)) is not None)
        row.eval[L] = (mean(accs), std(accs))
    row.steps = mean(finite(m.steps for m in okm))
    row.flops_per_token = mean(finite(m.flops_per_token for m in okm))
    row.train_flops = mean(finite(m.train_flops for m in okm))
    row.early_loss = mean(finite(m.early_loss for m in okm))
    row.final_loss = mean(finite(m.final_loss for m in okm))
    row.histories = [h for h in map(history_of, ok) if h]
    row.stopped_early = early_stops_of(ok).steps
    return row


# ---------------------------------------------------------------------------------------------
# Naming rows
# ---------------------------------------------------------------------------------------------

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

