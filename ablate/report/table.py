"""Sweep records -> ``SweepTable``: one row per variant, compared with its baseline.

``build_table`` runs the stages below in order; each is a function of its own:

* the inputs: a ``LoadedSweep`` (``records.load_sweep``: the records in sweep order, ``bench.json``,
  the plan in ``sweep.json`` with its swept keys and a tuned sweep's ``tune`` block), read once;
* a tuned sweep's final runs: each variant's at its chosen lr (``tuned``), the runs at the
  shared default lr kept for a second Δ;
* the evaluated lengths: one ``acc@L`` column per length for length-extrapolation sweeps;
* one ``Row`` per variant (``rows``: mean ± sample std over the ``ok`` runs, speed, memory,
  params, FLOPs, losses; diverged and failed runs counted in ``status``, excluded from means);
* a pivot (``columns="task"``: one accuracy column per value of that key, the rows the variants
  without it, plus ``avg``; each cell compared with the baseline in its column);
* the baseline(s): ``baseline`` > ``experiment.baseline`` > the first variant; a baseline naming
  only some swept keys is each row's own among the rows with its other values;
* speed: the runs' own per-run medians or, given a ``bench.json`` (``ablate-bench``), the
  interleaved benchmark;
* the comparisons: speed, memory and FLOPs ratios to the baseline, and Δ (with its 95% CI) from a
  test against the baseline's runs (``stats``): the paired t-test over seeds by default (seed s
  gives every variant the same data order and held-out data, so runs are paired by
  ``config.seed``), or Welch's test (``test="welch"``);
* the rows chosen and ordered (``rows=[...]``); the p-values of the comparisons shown are then
  Holm–Bonferroni-corrected and the marks (``*`` p<0.05, ``**`` p<0.01) use the corrected p
  (the baselines and comparisons: ``comparisons``);
* a sweep whose seeds ran in rounds (``seed=auto``: the plan's ``rounds``): instead of the
  correction, each comparison shown decided (``comparisons.decide_rounds``): different,
  equivalent within ±mde or undecided, on the seeds it used, with its repeated CI as the Δ
  interval and no p (``ablate.report.rounds.round_state`` hands the same verdicts to the sweeper).

The columns and the pivot default to the experiment's ``columns`` / ``rows``. What the table
prints in words (its caption) is ``caption``'s; the rows are the variants of ``ablate.sweep`` (one
definition of a variant for the table, wandb and bench.json).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterable

from ablate.report.caption import RECORDS_SPEED_NOTE, CaptionText, bench_speed_note
from ablate.report.comparisons import compare_with_baselines, correct, decide_rounds, mark_baselines, rounds_run
from ablate.report.finetune_rows import build_finetune_table, has_finetunes
from ablate.report.ladder import N_BOOT, NotALadder, build_ladder, is_ladder
from ablate.report.layout import Figure, RunPlace, TableLayout
from ablate.record import Record
from ablate.report.record_fields import (EarlyStops, SweepBudget, beyond_lengths, budget_of, early_fraction_of,
                                         early_stops_of, experiment_of, first_value, sharing_of, smoke_of,
                                         train_length)
from ablate.report.speed_checks import speed_doubt_note
from ablate.report.records import LoadedSweep, bench_rounds, bench_speeds, sweep_of_records
from ablate.report.rows import (STATUSES, Row, label_of, resolve_baseline, resolve_rows, split_rows,
                                variant_row)
from ablate.report.stats import SIGNIFICANCE_TESTS, TESTS
from ablate.report.table_columns import Column, Field, flat_columns, flat_fields
from ablate.report.tuned import add_default_lr_runs, final_runs
from ablate.sweep import Rounds, design_keys, group_by_variant, override_key, Tuning, variant_key, variants

#: what wandb records as a rounds table's test (``significance_test``)
ROUNDS_TEST = ("group-sequential repeated CIs of the paired differences over seeds (seeds run in rounds), "
               "Holm across the comparisons: different, equivalent within ±mde, or undecided")

# Row, STATUSES and the row lookups are ``rows``'; they are imported from here too (ablate.report, formats).
__all__ = ["STATUSES", "Row", "SweepTable", "build_table", "resolve_baseline", "resolve_rows", "split_rows"]


@dataclass
class SweepTable(CaptionText):
    """A table's rows and what its caption and formats need to know about them (``build_table``).

    Its caption and notes (``caption()``, ``metric_note()``, ...) come from ``CaptionText``."""

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
    budget: SweepBudget | None = None            # record.budget of the runs (what was matched)
    tune: Tuning | None = None                    # sweep.json's tune block, for a tuned sweep
    rounds: Rounds | None = None                  # sweep.json's rounds block: seeds run in rounds (seed=auto)
    early_fraction: float | None = 0.25           # eval.early_fraction of the runs (None: they differ)
    early_stops: EarlyStops = field(default_factory=EarlyStops)  # ok runs an EarlyStopping ended early
    baseline_shown: bool = True                  # False when the rows chosen leave the baseline out
    sweep: LoadedSweep | None = field(default=None, repr=False, compare=False)  # what it was built from
    layout: str = "flat"
    shows_speed: ClassVar[bool] = True

    @property
    def significance_test(self) -> str:
        return ROUNDS_TEST if self.has_rounds else SIGNIFICANCE_TESTS[self.test]

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
    def has_rounds(self) -> bool:
        """Whether the seeds ran in rounds: the comparisons are verdicts, with no p-values."""
        return self.rounds is not None

    @property
    def rounds_run(self) -> int | None:
        """The rounds its verdicts were decided over (``comparisons.rounds_run``); None without rounds."""
        return rounds_run(self.rounds) if self.rounds is not None else None

    @property
    def has_histories(self) -> bool:
        return any(r.histories for r in self.flat)

    @property
    def metrics(self) -> list[str]:
        """The rows' metrics, in row order, each once (one name unless the tasks' metrics differ)."""
        return list(dict.fromkeys(r.metric for r in self.flat if r.metric)) or [self.metric]

    def column_label(self, value: str) -> str:
        return self.column_labels.get(value, value)

    # --- TableLayout (ablate.report.layout): how a flat table shows --------------------------------

    def columns(self) -> list[Column]:
        return flat_columns(self)

    def csv_fields(self) -> list[Field]:
        return flat_fields(self)

    def figures(self) -> list[Figure]:
        from ablate.report.plot import flat_figures  # matplotlib's figures: imported when drawn

        return flat_figures(self)

    def image_key(self, name: str) -> str:
        return {"png": "ablation_plot", "curves": "learning_curves", "lr": "lr_sweep"}.get(name, name)

    def wandb_config(self) -> dict[str, Any]:
        config = {"speed_source": self.speed_source, "metric": self.metric,
                  "significance_test": self.significance_test, "eval_lengths": self.eval_lengths, "test": self.test,
                  "columns": self.columns_key, "tuned": self.tuned}
        if self.rounds is not None:
            config["rounds"] = rounds_config(self.rounds)
        return config

    def wandb_summary(self) -> dict[str, Any]:
        summary = {"speed_source": self.speed_source, "speed_note": self.speed_note, "metric": self.metric,
                   "significance_test": self.significance_test,
                   "concurrent_jobs": (self.sharing or {}).get("jobs", 1),
                   "n_comparisons": self.n_comparisons, "columns": self.columns_key}
        if self.rounds is not None:
            summary.update(rounds_summary(self))
        return summary

    def run_place(self, variant: dict[str, str]) -> RunPlace:
        column = variant.get(self.columns_key, "default") if self.pivoted else ""
        key = variant_key({k: v for k, v in variant.items() if not self.pivoted or k != self.columns_key})
        labels = {r.key: r.label for r in self.rows}
        return RunPlace(key, labels.get(key, key), self.column_label(column) if column else "")


def build_table(records: list[Record] | LoadedSweep, baseline: str | None = None, bench: dict | None = None,
                test: str = "paired", columns: str | None = None,
                rows: str | Iterable[str] | None = None, ladder: str = "auto",
                n_boot: int = N_BOOT) -> TableLayout:
    """Summarise a sweep (``records.load_sweep``, or its records: ``load_records``) into one row per
    variant, in sweep order: a ``SweepTable``, for a ladder a ``LadderTable``, for a sweep with
    fine-tune records (``finetune.tasks``) a ``FinetuneTable`` (``finetune_table``: the pretraining
    columns, one per downstream task and their average; ``columns`` then names the columns shown,
    ``avg,speed,memory``; ``ladder`` does not apply). All are ``TableLayout``s; the table's ``sweep``
    is what it was built from.

    Baseline: ``baseline`` (an override string, a label or a value) > the records'
    ``experiment.baseline`` > the first variant. Speed: ``bench`` (``bench.json`` format), else a
    ``bench.json`` in the records' sweep directory, else the records' own tokens/s.
    ``test``: ``paired`` (paired t-test over seeds) or ``welch``; either is Holm-corrected across
    the table's comparisons. ``columns``: a swept key pivoted into columns (``""``/``"none"``: no
    pivot; default: ``experiment.columns``). ``rows``: the rows shown, in order (variant keys,
    labels or values; a list or a comma-separated string; default: ``experiment.rows``, else all).
    A tuned sweep (``sweep.json`` with a ``tune`` block) shows each variant's runs at its chosen lr.
    ``ladder``: ``auto`` (a sweep with a size key swept is a ``LadderTable``, ``ladder``), ``on``
    (a ladder or a ValueError) or ``off`` (the flat table); ``n_boot``: a ladder's bootstrap replicates.
    Raises ValueError for an unknown ``baseline``, ``columns`` key or ``rows`` entry (listing the
    valid ones), an unknown ``test``, or no records.
    """
    if test not in TESTS:
        raise ValueError(f"unknown test {test!r}; valid: {', '.join(TESTS)}")
    sweep = records if isinstance(records, LoadedSweep) else sweep_of_records(records)
    if has_finetunes(sweep.records):  # pretrain, then fine-tune: the pretraining and per-task columns
        table = build_finetune_table(sweep, baseline=baseline, bench=bench if bench is not None else sweep.bench,
                                     test=test, columns=columns, rows=rows, tune=_tuning(sweep))
        table.sweep = sweep
        return table
    records = sweep.records
    if not records:
        raise ValueError("no records")
    n_records = len(records)
    if bench is None:
        bench = sweep.bench
    _warn_if_several_groups(records)

    exp = experiment_of(records)
    swept, tune = sweep.swept, _tuning(sweep)
    if ladder == "auto":  # the experiment's layout, unless the caller chose one
        ladder = str(exp.get("ladder") or "auto")
    # a size key that only a design's rows set (experiment=arch's half-depth row) names a variant, not a rung
    if is_ladder(swept if ladder == "on" else swept - set(design_keys(exp.get("design"))), ladder):
        try:  # a tuned ladder: the runs at each variant's chosen lr, as the flat table's rows
            table = build_ladder(final_runs(records, swept, tune)[0], swept, baseline=baseline, n_boot=n_boot,
                                 tune=tune)
            table.sweep = sweep
            return table
        except NotALadder as err:
            if ladder == "on":
                raise
            warnings.warn(f"{err}; showing the flat table", stacklevel=2)
    records, at_default = final_runs(records, swept, tune)
    lengths, train_len, beyond = _lengths(records)
    flat = _variant_rows(records, swept, exp["labels"], lengths)
    if tune is not None:
        add_default_lr_runs(flat, at_default, swept, tune)

    # the rows shown: the variants, or pivoted the variants without the columns key
    col_key = _columns_key(columns, exp.get("columns"), flat)
    shown = _pivot(flat, col_key, exp["labels"]) if col_key else flat
    values = list(dict.fromkeys(c for r in shown for c in r.cells)) if col_key else []

    base, base_of, base_label = mark_baselines(baseline, exp.get("baseline"), shown, col_key)
    speed_source, speed_note, rounds = _speeds(bench, swept, flat)
    compare_with_baselines(shown, base, base_of, col_key, test, tuned=tune is not None)
    speed_note = "; ".join(filter(None, [speed_note, speed_doubt_note(flat)]))
    if col_key:  # a pivoted row's accuracy: the mean of its cells' means
        for row in shown:
            row.accuracy_mean = row.avg

    # the rows chosen, in the order given; the correction runs over the comparisons shown
    wanted = _wanted_rows(rows, exp.get("rows"), shown)
    if wanted:
        shown = resolve_rows(wanted, shown, strict=rows is not None) or shown
    seed_rounds = _rounds(sweep)
    n_comparisons = decide_rounds(shown, col_key, seed_rounds) if seed_rounds else correct(shown, col_key)

    return SweepTable(
        rows=shown, baseline=base_label, baseline_key=base.key, metric=_table_metric(flat, records),
        speed_source=speed_source, speed_note=speed_note, eval_lengths=lengths, train_length=train_len,
        beyond_lengths=beyond, experiment=exp.get("name"),
        memory_source=first_value(records, lambda r: r.metrics.memory_source),
        bench_rounds=rounds, wandb_group=first_value(records, lambda r: r.wandb.group),
        wandb_project=first_value(records, lambda r: r.wandb.project), n_records=n_records,
        smoke=smoke_of(records), sharing=sharing_of(records), test=test, n_comparisons=n_comparisons,
        columns_key=col_key, column_values=values,
        column_labels={v: label_of({col_key: v}, exp["labels"]) for v in values} if col_key else {},
        budget=budget_of(records), tune=tune, rounds=seed_rounds, early_fraction=early_fraction_of(records),
        early_stops=early_stops_of(records), baseline_shown=any(r.is_baseline for r in shown), sweep=sweep,
    )


# ---------------------------------------------------------------------------------------------
# The inputs
# ---------------------------------------------------------------------------------------------

def _warn_if_several_groups(records: list[Record]) -> None:
    """Records of several wandb groups are likely several sweeps mixed in one table."""
    groups = {r.wandb.group for r in records if r.wandb is not None} - {None}
    if len(groups) > 1:
        warnings.warn(f"records come from several wandb groups ({', '.join(sorted(groups))}): "
                      "is PATH one sweep?", stacklevel=3)


def _tuning(sweep: LoadedSweep) -> Tuning | None:
    """The ``tune`` block of the sweep's plan (None for untuned sweeps)."""
    tune = sweep.plan.tune if sweep.plan is not None else None
    return tune if tune is not None and tune.lr else None


def _rounds(sweep: LoadedSweep) -> Rounds | None:
    """The ``rounds`` block of the sweep's plan (None for a fixed-seed sweep)."""
    return sweep.plan.rounds if sweep.plan is not None else None


def _lengths(records: list[Record]) -> tuple[list[int], int | None, list[int] | None]:
    """The evaluated lengths (the training length first, when the runs share one), that training
    length, and for runs trained at several lengths the lengths beyond their own (else None)."""
    lengths = sorted({int(L) for r in records for L in r.metrics.eval if str(L).isdigit()})
    beyond = beyond_lengths(records)
    train_len = train_length(records, lengths) if beyond is None else None  # several: none heads the table
    if train_len is not None:
        lengths = [train_len] + [L for L in lengths if L != train_len]
    return lengths, train_len, beyond


# ---------------------------------------------------------------------------------------------
# The rows
# ---------------------------------------------------------------------------------------------

def _variant_rows(records: list[Record], swept: set[str], labels: dict, lengths: list[int]) -> list[Row]:
    """One row per variant, in sweep order, summarising its runs."""
    by_key = group_by_variant(records, swept)
    return [variant_row(key, ov, by_key[key], labels, lengths) for key, ov in variants(records, swept).items()]


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
            rows[rkey] = Row(key=rkey, label=label_of(rest, labels), overrides=rest)
        row = rows[rkey]
        cell.column = cell.overrides.get(key, "default")
        row.cells[cell.column] = cell
        for status, n in cell.counts.items():
            row.counts[status] = row.counts.get(status, 0) + n
        row.stopped_early += cell.stopped_early
        row.tasks += [t for t in cell.tasks if t not in row.tasks]
        if cell.metric:
            row.metric = " / ".join(m for m in dict.fromkeys([*(row.metric or "").split(" / "), cell.metric]) if m)
    return list(rows.values())


def _wanted_rows(given: str | Iterable[str] | None, default: Any, shown: list[Row]) -> Any:
    """The names of the rows to show: ``given`` else ``experiment.rows`` (a comma-separated string
    split into row names); empty or None for every row."""
    wanted = given if given is not None else default
    if isinstance(wanted, str):
        wanted = split_rows(wanted, shown)
    return wanted


def _table_metric(flat: list[Row], records: list[Record]) -> str:
    """What "accuracy" means in this table: the rows' metrics, else the records', else accuracy."""
    row_metrics = list(dict.fromkeys(r.metric for r in flat if r.metric))
    return " / ".join(row_metrics) or str(first_value(records, lambda r: r.metrics.metric) or "accuracy")


def _speeds(bench: dict | None, swept: set[str], flat: list[Row]) -> tuple[str, str, int | None]:
    """Where the speed column comes from (``"records"`` | ``"bench"``), the caption's sentence on
    it, and the benchmark's rounds. A ``bench.json`` naming the sweep's variants replaces each
    row's tokens/s with its interleaved timing; one naming none of them is ignored, with a warning."""
    if bench is not None:
        speeds, rounds_of = bench_speeds(bench, swept), bench_rounds(bench, swept)
        if not speeds.keys() & {r.key for r in flat}:
            warnings.warn("bench.json names none of this sweep's variants; using the runs' own speeds",
                          stacklevel=3)
        else:
            rounds = bench.get("rounds")
            for row in flat:
                row.tokens_per_s, row.speed_rounds = speeds.get(row.key), rounds_of.get(row.key, [])
            return "bench", bench_speed_note(rounds), rounds
    return "records", RECORDS_SPEED_NOTE, None


# ---------------------------------------------------------------------------------------------
# A rounds table on wandb
# ---------------------------------------------------------------------------------------------

def rounds_config(rounds: Rounds) -> dict[str, Any]:
    """The design of a sweep's rounds, as the table run's config records it."""
    return {"looks": list(rounds.looks()), "run": rounds.run, "mde": rounds.mde, "alpha": rounds.alpha,
            "spending": rounds.spending, "min_seeds": rounds.min_seeds, "max_seeds": rounds.max_seeds,
            "round_seeds": rounds.round_seeds}


def rounds_summary(table: SweepTable) -> dict[str, Any]:
    """What a grouped run table sorts on: per comparison ``rounds/<variant key>/verdict``, ``.../seeds``
    and ``.../at_cap``, and how many comparisons are each verdict (``rounds/different``, ...)."""
    out: dict[str, Any] = {"rounds/run": table.rounds_run, "rounds/looks": len(table.rounds.looks())}
    verdicts = [r.verdict for r in table.flat if r.verdict is not None]
    for name in ("different", "equivalent", "undecided"):
        out[f"rounds/{name}"] = sum(v.verdict == name for v in verdicts)
    for row in table.flat:
        if row.verdict is not None:
            out[f"rounds/{row.key}/verdict"] = row.verdict.verdict
            out[f"rounds/{row.key}/seeds"] = row.verdict.n
            out[f"rounds/{row.key}/at_cap"] = row.verdict.at_cap
    return out
