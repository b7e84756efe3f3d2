"""A scale ladder's table: model size swept as *rungs*, every variant trained at every rung.

A sweep is a ladder when its swept keys include a size key (``SIZE_KEYS``: ``model.size`` or the
model's dimensions; several swept together make one rung of each combination). The rung is the
size key's value(s), the variant the rest of the variant key. ``build_ladder`` reads each ok
record's training FLOPs (``metrics.train_flops``), final validation loss (``metrics.val.loss``,
else ``metrics.final_loss``) and seed, and hands them to ``scaling.scale_ladder``, which fits the
baseline's loss-compute curve and computes every compute multiplier (CM), its bootstrap CI, each
variant's scale trend and the rank agreement across rungs. This module only arranges them:

* ``LadderTable``: the rungs (ordered by their mean training FLOPs), one ``LadderRow`` per variant
  (per rung its loss mean ± std over seeds and its ``Multiplier``; its ``Trend``), the ``Ladder``;
* its caption (``caption.LadderCaptionText``); its columns and CSV (``formats``), its picture
  (``plot.scaling_plot``: ``scaling.png``).

``ablate-table --ladder off`` gives the flat table instead; ``--ladder on`` insists on a ladder.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ablate.report.caption import LadderCaptionText
from ablate.report.layout import Figure, RunPlace
from ablate.report.ladder_view import (ladder_columns, ladder_fields, ladder_figures, ladder_wandb_config,
                                       ladder_wandb_summary)
from ablate.record import Record
from ablate.report.record_fields import (EarlyStops, SweepBudget, budget_of, early_stops_of, experiment_of,
                                         first_value, seed_of, smoke_of, val_loss, where)
from ablate.report.rows import Row, label_of, resolve_baseline
from ablate.report.scaling import Ladder, Multiplier, Trend, scale_ladder
from ablate.report.stats import finite, mean, std
from ablate.sweep import SIZE_KEYS, Tuning, split_override_string, variant_key, variant_overrides

if TYPE_CHECKING:
    from ablate.report.records import LoadedSweep
    from ablate.report.table_columns import Column, Field

LADDER_MODES = ("auto", "on", "off")
N_BOOT = 1000


class NotALadder(ValueError):
    """The records cannot make a ladder (no size key swept, no run with both FLOPs and a loss)."""


@dataclass
class LadderCell:
    """One variant at one rung: its seeds' final validation loss summarised, and its CM."""

    loss_mean: float | None = None
    loss_std: float | None = None
    n: int = 0
    flops: float | None = None          # mean training FLOPs over its seeds
    loss_min: float | None = None       # its lowest and highest seed's loss
    loss_max: float | None = None
    multiplier: Multiplier | None = None


@dataclass
class LadderRow:
    """A variant (the variant key without the size keys) across the rungs."""

    key: str
    label: str
    overrides: dict[str, str]
    is_baseline: bool = False
    cells: dict[str, LadderCell] = field(default_factory=dict)   # rung -> cell
    trend: Trend | None = None
    counts: dict[str, int] = field(default_factory=dict)          # status -> runs
    stopped_early: list[int | None] = field(default_factory=list)  # ok runs an EarlyStopping ended: their steps

    n = Row.n                # ok runs
    status = Row.status      # the run counts, as in a flat table's runs column


@dataclass
class LadderTable(LadderCaptionText):
    """A ladder's rows, rungs and statistics (``build_ladder``)."""

    rows: list[LadderRow]
    rungs: list[str]                     # smallest (least mean training FLOPs) first
    rung_flops: dict[str, float]         # rung -> mean training FLOPs of its runs
    size_keys: list[str]
    ladder: Ladder
    baseline: str
    baseline_key: str
    n_boot: int = N_BOOT
    loss_source: str = "metrics.val.loss"
    experiment: str | None = None
    smoke: dict[str, list[int]] | None = None
    budget: SweepBudget | None = None
    early_stops: EarlyStops = field(default_factory=EarlyStops)  # ok runs an EarlyStopping ended early
    wandb_group: str | None = None
    wandb_project: str | None = None
    n_records: int = 0
    n_left_out: int = 0                  # ok runs without usable training FLOPs or validation loss
    tune: Tuning | None = None           # sweep.json's tune block, for a tuned ladder
    layout: str = "ladder"
    shows_speed: ClassVar[bool] = False    # loss and compute multipliers per rung: no speed column
    sweep: LoadedSweep | None = field(default=None, repr=False, compare=False)  # what it was built from

    @property
    def pivoted(self) -> bool:           # for code that asks any table
        return False

    # --- TableLayout (ablate.report.layout): how a ladder shows (ladder_view) ----------------------

    def columns(self) -> list[Column]:
        return ladder_columns(self)

    def csv_fields(self) -> list[Field]:
        return ladder_fields(self)

    def figures(self) -> list[Figure]:
        return ladder_figures(self)

    def image_key(self, name: str) -> str:
        return "scaling" if name == "png" else name

    def wandb_config(self) -> dict[str, Any]:
        return ladder_wandb_config(self)

    def wandb_summary(self) -> dict[str, Any]:
        return ladder_wandb_summary(self)

    def run_place(self, variant: dict[str, str]) -> RunPlace:
        key = variant_key({k: v for k, v in variant.items() if k not in self.size_keys})
        labels = {r.key: r.label for r in self.rows}
        return RunPlace(key, labels.get(key, key), rung_name(variant, self.size_keys))


def size_keys(swept: set[str] | list[str]) -> list[str]:
    """The swept keys that are size keys, in ``SIZE_KEYS`` order."""
    return [k for k in SIZE_KEYS if k in set(swept)]


def is_ladder(swept: set[str] | list[str], mode: str = "auto") -> bool:
    """Whether to lay the table out as a ladder: ``on``, or ``auto`` with a size key swept."""
    if mode not in LADDER_MODES:
        raise ValueError(f"unknown ladder mode {mode!r}; valid: {', '.join(LADDER_MODES)}")
    return mode == "on" or (mode == "auto" and bool(size_keys(swept)))


def rung_name(ov: dict[str, str], keys: list[str]) -> str:
    """A rung's name: the size preset (``s``), else ``d_model=64,n_layers=4``."""
    if keys == ["model.size"]:
        return str(ov.get("model.size", "default"))
    return ",".join(f"{k.split('.')[-1]}={ov.get(k, 'default')}" for k in keys)


def loss_of(record: Record) -> float | None:
    """A run's final validation loss: ``metrics.val.loss``, else ``metrics.final_loss``."""
    found = finite([val_loss(record)]) or finite([record.metrics.final_loss])
    return found[0] if found else None


#: the values a ladder can fit and invert (logs, powers, squares of them stay finite in float64); a
#: loss of cross-entropy or MSE and a run's FLOPs outside them are a broken record, not a result
LOSS_RANGE = (1e-9, 1e6)
FLOPS_RANGE = (1.0, 1e35)


def ladder_inputs(record: Record) -> tuple[float, float] | str | None:
    """An ok run's (training FLOPs, final validation loss) for the ladder; a one-line problem (the
    file, the field, its value and what was expected) when one is recorded but the ladder cannot
    use it; None when either is not recorded (an older record: counted, not named)."""
    val = val_loss(record)
    has_val = val is not None
    fields = (("metrics.train_flops", record.metrics.train_flops, FLOPS_RANGE),
              ("metrics.val.loss" if has_val else "metrics.final_loss",
               val if has_val else record.metrics.final_loss, LOSS_RANGE))
    if any(value is None for _, value, _ in fields):
        return None
    for name, value, (low, high) in fields:
        number = value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        if number is None or not finite([number]) or not low <= number <= high:
            return (f"{where(record)}: {name}={value!r} (a ladder needs a finite number in [{low:g}, {high:g}]); "
                    "run left out of the ladder")
    return float(fields[0][1]), float(fields[1][1])


def build_ladder(records: list[Record], swept: set[str], baseline: str | None = None, n_boot: int = N_BOOT,
                 seed: int = 0, tune: Tuning | None = None) -> LadderTable:
    """The ladder table of ``records`` (sorted, one sweep) whose swept keys ``swept`` include a size
    key. Baseline: ``baseline`` > ``experiment.baseline`` > the first variant, its size keys dropped.
    Raises ValueError when no size key is swept, or no ok run has both training FLOPs and a loss."""
    keys = size_keys(swept)
    if not keys:
        raise NotALadder(f"no size key ({', '.join(SIZE_KEYS)}) among the swept keys: not a ladder")
    exp = experiment_of(records)
    rows: dict[str, LadderRow] = {}
    runs: list[tuple[str, str, Any, float, float]] = []
    rung_compute: dict[str, list[float]] = {}
    left_out = 0
    for rec in records:
        ov = variant_overrides(rec.overrides, swept)
        rest = {k: v for k, v in ov.items() if k not in keys}
        row = rows.setdefault(variant_key(rest), LadderRow(variant_key(rest), label_of(rest, exp["labels"]), rest))
        status = str(rec.status or "unknown")
        row.counts[status] = row.counts.get(status, 0) + 1
        if status != "ok":
            continue
        row.stopped_early += early_stops_of([rec]).steps
        inputs = ladder_inputs(rec)
        if not isinstance(inputs, tuple):
            if inputs is not None:
                warnings.warn(inputs, stacklevel=3)
            left_out += 1
            continue
        flops, loss = inputs
        rung = rung_name(ov, keys)
        runs.append((row.key, rung, seed_of(rec), flops, loss))
        rung_compute.setdefault(rung, []).append(flops)
    if not runs:
        raise NotALadder("no ok run records both metrics.train_flops and a validation loss "
                         "(metrics.val.loss or metrics.final_loss): no ladder to lay out")
    rungs = sorted(rung_compute, key=lambda r: mean(rung_compute[r]))
    base = _baseline(baseline or exp.get("baseline"), keys, [r for r in rows.values() if r.n],
                     strict=bool(baseline))
    base.is_baseline = True
    runs = _one_per_seed(runs)
    ladder = scale_ladder(runs, base.key, rungs, n_boot=n_boot, seed=seed)
    _fill(rows, runs, ladder)
    return LadderTable(
        rows=list(rows.values()), rungs=rungs, rung_flops={r: mean(c) for r, c in rung_compute.items()},
        size_keys=keys, ladder=ladder, baseline=base.label, baseline_key=base.key, n_boot=n_boot,
        experiment=exp.get("name"), smoke=smoke_of(records), budget=budget_of(records),
        early_stops=early_stops_of(records),
        wandb_group=first_value(records, lambda r: r.wandb.group),
        wandb_project=first_value(records, lambda r: r.wandb.project),
        n_records=len(records), n_left_out=left_out, tune=tune,
        loss_source="metrics.val.loss" if all(r.metrics.val is not None for r in records if r.ok)
        else "metrics.val.loss / final_loss",
    )


def _baseline(spec: Any, keys: list[str], rows: list[LadderRow], strict: bool) -> LadderRow:
    """The baseline variant: ``spec`` (override string, label or value) without its size keys."""
    if not rows:
        raise ValueError("no variant has an ok run")
    if spec and "=" in str(spec):
        rest = {k: v for k, v in split_override_string(str(spec)).items() if k not in keys}
        spec = ",".join(f"{k}={v}" for k, v in rest.items()) or None
    if not spec:
        return rows[0]
    as_rows = [Row(key=r.key, label=r.label, overrides=r.overrides) for r in rows]
    try:
        found = resolve_baseline(str(spec), as_rows)
    except ValueError:
        if strict:
            raise
        warnings.warn(f"experiment baseline {spec!r} has no records; using the first variant", stacklevel=3)
        return rows[0]
    return rows[as_rows.index(found)]


def _one_per_seed(runs: list[tuple]) -> list[tuple]:
    """Runs for ``scale_ladder``: one per (variant, rung, seed) (a repeated seed: its first run, a
    warning); an unknown seed gets a number of its own."""
    seen: set[tuple] = set()
    out = []
    for i, (variant, rung, s, c, l) in enumerate(runs):
        s = s if s is not None else f"run{i}"
        if (variant, rung, s) in seen:
            warnings.warn(f"two runs of {variant or 'default'} at rung {rung} with seed {s}: using the first",
                          stacklevel=3)
            continue
        seen.add((variant, rung, s))
        out.append((variant, rung, s, c, l))
    return out


def _fill(rows: dict[str, LadderRow], runs: list[tuple], ladder: Ladder) -> None:
    """Each row's cells (loss mean ± std, FLOPs, CM) and trend."""
    for row in rows.values():
        for rung in dict.fromkeys(r for v, r, *_ in runs if v == row.key):
            mine = [(c, l) for v, r, _, c, l in runs if v == row.key and r == rung]
            losses = [l for _, l in mine]
            row.cells[rung] = LadderCell(mean(losses), std(losses), len(losses), mean([c for c, _ in mine]),
                                         min(losses), max(losses))
    for m in ladder.multipliers:
        rows[m.variant].cells[str(m.rung)].multiplier = m
    for t in ladder.trends:
        rows[t.variant].trend = t
