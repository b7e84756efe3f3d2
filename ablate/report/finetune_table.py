"""A pretrain-then-fine-tune sweep's table (docs/finetune.md): ``FinetuneTable``, the third layout.

A sweep with ``finetune.tasks`` has pretraining records (``stage: pretrain``) and fine-tune records
(``stage: finetune``), whose variant and seed are their pretraining's. ``build_table`` lays such a
sweep out here, one row per variant, as Narang et al. (2021, Table 1) do:

* the pretraining columns, from the pretraining runs as the flat table computes them (``rows``):
  params, training FLOPs, speed, memory, the early and final pretraining loss;
* one column per downstream task: its headline metric (``metrics.accuracy``), each pretraining
  seed's fine-tune seeds averaged first, then mean ± sample std over the pretraining seeds;
* their average over the tasks, per pretraining seed (``avg``; "GLUE dev score" when every task is
  ``task=glue``: a macro average over GLUE's dev sets, not a leaderboard number);
* Δ to the baseline with its 95% CI on every downstream column and on the average, paired by
  pretraining seed (``comparisons``, ``stats``), Holm–Bonferroni-corrected over all of them;
* the caption's rank agreement: Kendall's τ between the variants' final pretraining loss and their
  downstream average (``scaling.rank_agreement``, the ladder's).

Each downstream column is a ``Row`` cell (as a pivot's), so the comparisons are the flat table's.
``columns`` (``--columns``, ``experiment.columns``) selects the human columns by name:
``avg,speed,memory`` is the seed table's layout (variant | GLUE dev score | speed | memory).
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Iterable

from ablate.record import Record
from ablate.report.caption import RECORDS_SPEED_NOTE, CaptionText, _span, bench_speed_note
from ablate.report.comparisons import compare_with_baselines, correct, mark_baselines
from ablate.report.layout import Figure, RunPlace
from ablate.report.record_fields import (SweepBudget, budget_of, config_value, early_fraction_of, experiment_of,
                                         first_value, sharing_of, smoke_of)
from ablate.report.speed_checks import speed_doubt_note
from ablate.report.records import bench_rounds, bench_speeds
from ablate.report.rows import Row, accuracy_by_seed, resolve_rows, split_rows, variant_row
from ablate.report.scaling import RankAgreement, rank_agreement
from ablate.report.stats import SIGNIFICANCE_TESTS, TEST_NAMES, mean, std
from ablate.report.tuned import best_finetune_lr, final_runs
from ablate.report.table_columns import (DASH, DETAIL, HEADLINE, PAPER, VARIANT_COLUMN, VARIANT_FIELD, Column, Field,
                                         _delta, _loss, _pct, _sci, _si, _speed, _x)
from ablate.sweep import Tuning, group_by_variant, variant_key, variant_overrides, variants, varying_keys

if TYPE_CHECKING:
    from ablate.report.records import LoadedSweep

FINETUNE = "finetune"
AVG = "avg"                 # the average's cell and column name (its label: ``FinetuneTable.avg_label``)
GLUE_SCORE = "GLUE dev score"
GLUE_TARGET = "ablate.data.glue.GlueTask"
#: the pretraining columns ``columns`` may name, beside each task, ``<task>_delta``, avg, avg_delta, runs
PRETRAINING_COLUMNS = ("params", "flops", "speed", "memory", "early_loss", "final_loss")


def has_finetunes(records: Iterable[Record]) -> bool:
    """Whether a sweep's records include fine-tune runs (then it is tabled here)."""
    return any(r.stage == FINETUNE for r in records)


@dataclass
class FinetuneTable(CaptionText):
    """A pretrain-then-fine-tune sweep's rows (``build_finetune_table``): each ``Row`` the variant's
    pretraining runs, its ``cells`` one per downstream task and ``avg``, over pretraining seeds."""

    rows: list[Row]
    tasks: list[str]                       # the downstream tasks, in sweep order
    task_metrics: dict[str, str]           # task -> its headline metric
    avg_label: str                         # "avg", or "GLUE dev score" when every task is GLUE's
    baseline: str
    baseline_key: str
    ranks: RankAgreement
    n_pretrain: int = 0                    # pretraining records
    n_finetune: int = 0                    # fine-tune records
    finetune_seeds: list[int] = field(default_factory=list)
    finetune_steps: list[int] = field(default_factory=list)
    finetune_lrs: list[float] = field(default_factory=list)
    finetune_lr_grid: list[float] = field(default_factory=list)  # finetune.tune_lr's rates (empty: not tuned)
    n_finetune_tried: int = 0              # fine-tune records, every rate of the grid included
    finetune_modes: list[str] = field(default_factory=list)
    test: str = "paired"
    n_comparisons: int = 0
    shown_columns: list[str] | None = None  # names picked by ``columns`` (None: every column)
    swept: set[str] = field(default_factory=set)  # the pretraining's swept keys (they name the variants)
    speed_source: str = "records"
    speed_note: str = RECORDS_SPEED_NOTE
    memory_source: str | None = None
    experiment: str | None = None
    smoke: dict[str, list[int]] | None = None
    sharing: dict[str, Any] | None = None
    budget: SweepBudget | None = None
    tune: Tuning | None = None
    early_fraction: float | None = 0.25
    wandb_group: str | None = None
    wandb_project: str | None = None
    n_records: int = 0
    sweep: LoadedSweep | None = field(default=None, repr=False, compare=False)
    layout: str = FINETUNE
    avg_key: ClassVar[str] = AVG           # the average's cell and column name

    @property
    def pivoted(self) -> bool:
        return False

    @property
    def flat(self) -> list[Row]:
        return list(self.rows)

    @property
    def has_flops(self) -> bool:
        return any(r.train_flops is not None for r in self.rows)

    @property
    def has_losses(self) -> bool:
        return any(r.early_loss is not None or r.final_loss is not None for r in self.rows)

    @property
    def glue(self) -> bool:
        return self.avg_label == GLUE_SCORE

    # --- TableLayout (ablate.report.layout) ------------------------------------------------------

    def columns(self) -> list[Column]:
        named = self.named_columns()
        if self.shown_columns is None:
            return [VARIANT_COLUMN, *named.values()]
        return [VARIANT_COLUMN, *(named[name] for name in self.shown_columns)]

    def named_columns(self) -> dict[str, Column]:
        """Every human column by the name ``columns`` selects it with, in the table's order."""
        out: dict[str, Column] = {"params": Column("params", lambda r, x: _si(r.params, 2), role=PAPER)}
        if self.has_flops:
            out["flops"] = Column("FLOPs", lambda r, x: _sci(r.train_flops))
        out["speed"] = Column("speed", lambda r, x: _speed(r, x), role=PAPER)
        out["memory"] = Column("memory", lambda r, x: _x(r.memory_ratio, x), role=PAPER)
        if self.has_losses:
            out["early_loss"] = Column("early loss", lambda r, x: _loss(r.early_loss))
            out["final_loss"] = Column("final loss", lambda r, x: _loss(r.final_loss), role=PAPER)
        for name in [*self.tasks, AVG]:
            head = self.avg_label if name == AVG else name
            out[name] = Column(f"{head} (%)", lambda r, x, n=name: _cell_pct(r, n),
                               mark=lambda r, n=name: r.cells[n].mark if n in r.cells else "", role=HEADLINE)
            out[f"{name}_delta"] = Column(f"{head} Δ (pts, 95% CI)",
                                          lambda r, x, n=name: _delta(r.cells[n]) if n in r.cells else DASH,
                                          role=HEADLINE if name == AVG else DETAIL)
        out["runs"] = Column("runs", lambda r, x: _runs(r), left=True)
        return out

    def csv_fields(self) -> list[Field]:
        fields: list[Field] = [VARIANT_FIELD, ("overrides", lambda t, r: r.key),
                               ("is_baseline", lambda t, r: r.is_baseline), ("params", lambda t, r: r.params),
                               ("train_flops", lambda t, r: r.train_flops), ("flops_ratio", lambda t, r: r.flops_ratio),
                               ("tokens_per_s", lambda t, r: r.tokens_per_s),
                               ("speed_ratio", lambda t, r: r.speed_ratio),
                               ("speed_doubt", lambda t, r: r.speed_doubt[0]), ("memory_mib", lambda t, r: r.memory_mib),
                               ("memory_ratio", lambda t, r: r.memory_ratio),
                               ("early_loss", lambda t, r: r.early_loss), ("final_loss", lambda t, r: r.final_loss),
                               ("pretrain_n", lambda t, r: r.n)]
        for name in [*self.tasks, AVG]:
            for suffix, attr in (("", "accuracy_mean"), ("_std", "accuracy_std"), ("_n", "n_seeds"),
                                 ("_delta", "delta"), ("_delta_ci_low", "delta_ci_low"),
                                 ("_delta_ci_high", "delta_ci_high"), ("_p_value", "p_value"),
                                 ("_p_corrected", "p_corrected")):
                fields.append((f"{name}{suffix}", _cell_getter(name, attr)))
        return fields + [("avg_label", lambda t, r: t.avg_label), ("status", lambda t, r: r.status),
                         ("finetune_status", lambda t, r: _finetune_status(r))]

    def figures(self) -> list[Figure]:
        from ablate.report.finetune_plot import finetune_figures  # matplotlib's figure: imported when drawn

        return finetune_figures(self)

    def image_key(self, name: str) -> str:
        return name

    def wandb_config(self) -> dict[str, Any]:
        return {"tasks": self.tasks, "avg_label": self.avg_label, "test": self.test,
                "significance_test": SIGNIFICANCE_TESTS[self.test], "finetune_steps": self.finetune_steps,
                "finetune_lr": self.finetune_lrs, "finetune_lr_grid": self.finetune_lr_grid,
                "finetune_mode": self.finetune_modes,
                "finetune_seeds": self.finetune_seeds}

    def wandb_summary(self) -> dict[str, Any]:
        return {"layout": FINETUNE, "tasks": self.tasks, "avg_label": self.avg_label,
                "n_pretrain": self.n_pretrain, "n_finetune": self.n_finetune, "n_comparisons": self.n_comparisons,
                "kendall_tau": self.ranks.tau, "decision_accuracy": self.ranks.decision_accuracy,
                "rank_reason": self.ranks.reason, "speed_source": self.speed_source}

    def run_place(self, variant: dict[str, str]) -> RunPlace:
        key = variant_key({k: v for k, v in variant.items() if k in self.swept})
        labels = {r.key: r.label for r in self.rows}
        finetuned = "finetune.from_job" in variant  # a fine-tune's own key, when the variant names it
        return RunPlace(key, labels.get(key, key), variant.get("task", "") if finetuned else "")

    # --- the words (CaptionText's, for this layout) ----------------------------------------------

    def latex_summary(self) -> str:
        return (f"Pretraining and fine-tuned downstream scores (%) per variant, mean ± std over "
                f"n = {_span(self._seed_counts())} pretraining seeds; {self.avg_label}: mean over the "
                f"{_tasks(self.tasks)}; Δ: difference to the baseline ({self.baseline}) in points [95% CI]")

    def latex_note(self, all_columns: bool = False) -> str:
        return self.caption()

    def statistics_terms(self) -> list[tuple[str, str]]:
        return [
            ("task columns", "each pretraining seed's fine-tune runs on the task averaged over its fine-tune seeds, "
                             "then the mean over the pretraining seeds ± their sample standard deviation."),
            (self.avg_label, "per pretraining seed the mean over the tasks, then mean ± std over those seeds."),
            ("Δ [95% CI]", "per pretraining seed the variant's score minus the baseline's; the mean of those "
                           "differences ± t(0.975, n − 1) × sd / √n (paired by pretraining seed)."),
            ("speed, memory", "the pretraining runs' tokens/s and peak memory over the baseline's."),
        ]

    def rank_note(self) -> str:
        """Whether the final pretraining loss orders the variants as their downstream average does."""
        r = self.ranks
        if r.tau is None:
            return f"pretraining-loss vs downstream ranking: not compared ({r.reason})"
        n = len(r.variants)
        pairs = n * (n - 1) // 2
        alike = round((r.decision_accuracy or 0) * pairs, 1)
        verdict = ("agrees with" if r.tau >= 1 - 1e-9 else "partly agrees with" if r.tau > 0
                   else "disagrees with")
        return (f"the pretraining-loss ranking {verdict} the downstream ranking: Kendall's τ = {r.tau:+.2f} "
                f"between the {n} variants' final pretraining loss (lower is better) and their "
                f"{self.avg_label} (higher is better); {alike:g} of {pairs} variant pairs ordered alike")

    def _lr_text(self) -> str:
        rates = "/".join(f"{lr:g}" for lr in self.finetune_lrs)
        if not self.finetune_lr_grid:
            return f"lr {rates}" if rates else ""
        grid = "/".join(f"{lr:g}" for lr in self.finetune_lr_grid)
        return (f"lr tuned per variant and task on the task's validation split over {grid} (chosen: {rates}; "
                f"the table shows the {self.n_finetune} fine-tunes at the chosen rates of {self.n_finetune_tried})")

    def caption(self) -> str:
        seeds = self._seed_counts()
        modes = {"full": "full fine-tuning", "probe": "linear probe (body frozen)"}
        how = ", ".join(filter(None, [
            f"{_span(self.finetune_steps)} steps" if self.finetune_steps else "",
            self._lr_text(),
            " / ".join(modes.get(m, m) for m in self.finetune_modes)]))
        per = f"{len(self.finetune_seeds)} fine-tune seed{'s' if len(self.finetune_seeds) != 1 else ''}"
        parts = [f"{_runs_of(self.n_pretrain, 'pretraining')} and {_runs_of(self.n_finetune, 'fine-tune')} ({_tasks(self.tasks)} "
                 f"x {per} per pretraining run); fine-tune: {how}",
                 "task columns: each task's " + ", ".join(f"{t}: {m}" for t, m in self.task_metrics.items())
                 + f" on its test split (%), a pretraining seed's fine-tune seeds averaged first, then mean ± "
                 f"sample std over pretraining seeds (n = {_span(seeds)})"]
        if self.glue:
            parts.append("GLUE dev score: macro average over the GLUE tasks run, on GLUE's dev sets (not a "
                         "leaderboard number)")
        else:
            parts.append(f"avg: mean over the {_tasks(self.tasks)} per pretraining seed")
        n = self.n_comparisons
        parts.append(f"* p<0.05, ** p<0.01: {TEST_NAMES[self.test].replace('seeds', 'pretraining seeds')}, "
                     f"Holm–Bonferroni-corrected across {n} comparison{'s' if n != 1 else ''} (each task and "
                     f"the {self.avg_label} vs the baseline); Δ: minus the baseline's in points"
                     + (", mean of the differences over the pretraining seeds both rows have" if self.test == "paired"
                        else ", difference of the means") + ", [95% CI]")
        parts.append(self.rank_note())
        parts.append("pretraining: " + self.speed_note)
        if self.sharing and self.speed_source == "records":
            parts.append(self.sharing_note())
        parts.append("memory: peak bytes per pretraining step" + (f" ({self.memory_source})" if self.memory_source
                                                                    else "") + ", ratio to baseline")
        if self.has_flops:
            parts.append("FLOPs: training FLOPs of a pretraining run, mean over seeds")
        if self.has_losses:
            at = f"{self.early_fraction * 100:g}%" if self.early_fraction is not None else "eval.early_fraction"
            parts.append(f"early/final loss: pretraining validation loss at {at} of training and at its end, "
                         "mean over seeds")
        parts += [note for note in (self.budget_note(), self.tune_note()) if note]
        parts += [f"baseline: {self.baseline}", "diverged/failed runs are counted in runs and excluded from means"]
        if self.smoke:
            parts.insert(0, f"SMOKE TEST ({self.smoke_note()}), not a result")
        return "; ".join(parts) + "."

    def _seed_counts(self) -> list[int]:
        return sorted({r.cells[AVG].n_seeds for r in self.rows if AVG in r.cells}) or [0]


def _runs_of(n: int, stage: str) -> str:
    return f"{n} {stage} run{'s' if n != 1 else ''}"


def _tasks(tasks: list[str]) -> str:
    return f"{len(tasks)} task{'s' if len(tasks) != 1 else ''}"


# ---------------------------------------------------------------------------------------------
# The cells
# ---------------------------------------------------------------------------------------------

class TaskCell(Row):
    """One variant on one downstream task (or ``avg``): a ``Row`` whose ``by_seed`` is per
    pretraining seed (its fine-tune seeds averaged), ``accuracies`` those seeds' scores."""

    @property
    def n_seeds(self) -> int:
        return len(self.by_seed)


def _cell_getter(name: str, attr: str):
    return lambda t, r: getattr(r.cells[name], attr) if name in r.cells else None


def _cell_pct(row: Row, name: str) -> str:
    cell = row.cells.get(name)
    return DASH if cell is None else _pct(cell.accuracy_mean, cell.accuracy_std)


def _finetune_status(row: Row) -> str:
    cell = row.cells.get(AVG)
    return cell.status if cell is not None else "no runs"


def _runs(row: Row) -> str:
    return f"{row.status}; fine-tune: {_finetune_status(row)}"


def _task_cell(key: str, name: str, runs: list[Record]) -> TaskCell:
    cell = TaskCell(key=key, label=name, overrides={}, counts=dict(Counter(str(r.status) for r in runs)))
    cell.by_seed = accuracy_by_seed([r for r in runs if r.ok])
    _summarise(cell)
    cell.metric = first_value(runs, lambda r: r.metrics.metric)
    return cell


def _avg_cell(key: str, cells: list[TaskCell]) -> TaskCell:
    """The mean over the tasks per pretraining seed (only seeds every task has a score for)."""
    counts: Counter = Counter()
    for c in cells:
        counts.update(c.counts)
    cell = TaskCell(key=key, label=AVG, overrides={}, counts=dict(counts))
    seeds = [s for s in cells[0].by_seed if all(s in c.by_seed for c in cells)] if cells else []
    cell.by_seed = {s: sum(c.by_seed[s] for c in cells) / len(cells) for s in seeds}
    _summarise(cell)
    return cell


def _summarise(cell: TaskCell) -> None:
    cell.accuracies = list(cell.by_seed.values())
    cell.accuracy_mean, cell.accuracy_std = mean(cell.accuracies), std(cell.accuracies)


# ---------------------------------------------------------------------------------------------
# Building it
# ---------------------------------------------------------------------------------------------

def build_finetune_table(sweep: LoadedSweep, baseline: str | None = None, bench: dict | None = None,
                         test: str = "paired", columns: str | None = None,
                         rows: str | Iterable[str] | None = None, tune: Tuning | None = None) -> FinetuneTable:
    """The table of a sweep with fine-tune records (``build_table`` calls it). ``columns``: the human
    columns shown, by name, comma-separated (``avg,speed,memory``; default ``experiment.columns``;
    ``none``: all); ``rows``, ``baseline``, ``test`` and ``bench`` as ``build_table``'s. Raises
    ValueError for an unknown column, row or baseline, or no pretraining record."""
    records = sweep.records
    pre = [r for r in records if r.stage != FINETUNE]
    fine = [r for r in records if r.stage == FINETUNE]
    if not pre:
        raise ValueError(f"{len(fine)} fine-tune record(s) and no pretraining record: nothing to table")
    swept = _pretraining_keys(sweep, pre)
    tried = fine
    fine, chosen_lrs = best_finetune_lr(fine, swept, _task)  # finetune.tune_lr: each task's best rate on validation
    exp = experiment_of(records)
    pre, _ = final_runs(pre, swept, tune)
    by_key = group_by_variant(pre, swept)
    shown = [variant_row(key, ov, by_key[key], exp["labels"], []) for key, ov in variants(pre, swept).items()]

    tasks = list(dict.fromkeys(_task(r) for r in fine))
    fine_by_key: dict[str, list[Record]] = {}
    for r in fine:
        fine_by_key.setdefault(variant_key(variant_overrides(r.overrides, swept)), []).append(r)
    for row in shown:
        mine = fine_by_key.get(row.key, [])
        for task in tasks:
            row.cells[task] = _task_cell(row.key, task, [r for r in mine if _task(r) == task])
        row.cells[AVG] = _avg_cell(row.key, [row.cells[t] for t in tasks])

    base, base_of, base_label = mark_baselines(baseline, exp.get("baseline"), shown, None)
    speed_source, speed_note = _speeds(bench, swept, shown)
    compare_with_baselines(shown, base, base_of, None, test, tuned=False)     # the pretraining's ratios
    speed_note = "; ".join(filter(None, [speed_note, speed_doubt_note(shown)]))
    compare_with_baselines(shown, base, base_of, AVG, test, tuned=False)      # each task and avg: Δ, CI, p
    wanted = rows if rows is not None else exp.get("rows")
    if isinstance(wanted, str):
        wanted = split_rows(wanted, shown)
    if wanted:
        shown = resolve_rows(wanted, shown, strict=rows is not None) or shown
    n_comparisons = correct(shown, AVG)
    avg_label = GLUE_SCORE if fine and all(_is_glue(r) for r in fine) else AVG

    table = FinetuneTable(
        rows=shown, tasks=tasks, task_metrics={t: _metric(fine, t) for t in tasks}, avg_label=avg_label,
        baseline=base_label, baseline_key=base.key, ranks=_ranks(shown), n_pretrain=len(pre), n_finetune=len(fine),
        finetune_seeds=sorted({r.finetune.seed for r in fine if r.finetune and r.finetune.seed is not None}),
        # what each fine-tune ran with (its task's finetune.per_task, else the stage's steps and lr)
        finetune_steps=_distinct(fine, lambda r: config_value(r, "trainer", "max_steps") or r.metrics.steps),
        finetune_lrs=_distinct(fine, lambda r: config_value(r, "optim", "lr")),
        finetune_lr_grid=_distinct(tried, lambda r: config_value(r, "optim", "lr")) if chosen_lrs else [],
        n_finetune_tried=len(tried),
        finetune_modes=_distinct(fine, lambda r: r.finetune.mode if r.finetune else None),
        test=test, n_comparisons=n_comparisons, shown_columns=None, swept=swept,
        speed_source=speed_source, speed_note=speed_note,
        memory_source=first_value(pre, lambda r: r.metrics.memory_source), experiment=exp.get("name"),
        smoke=smoke_of(records), sharing=sharing_of(pre), budget=budget_of(pre), tune=tune,
        early_fraction=early_fraction_of(pre), wandb_group=first_value(records, lambda r: r.wandb.group),
        wandb_project=first_value(records, lambda r: r.wandb.project), n_records=len(records), sweep=sweep,
    )
    table.shown_columns = select_columns(table, columns, exp.get("columns"))
    return table


def select_columns(table: FinetuneTable, given: str | None, default: Any) -> list[str] | None:
    """The column names ``given`` (strict) else the experiment's ``columns`` (a warning for a name
    that is no column) pick, in their order; None for every column."""
    spec = given if given is not None else default
    if not spec or not isinstance(spec, str) or spec.strip().lower() in ("none", "null", "all"):
        return None
    named = table.named_columns()
    aliases = {"glue": AVG, "score": AVG, table.avg_label.lower(): AVG, "delta": f"{AVG}_delta"}
    picked, unknown = [], []
    for name in (n.strip() for n in spec.split(",")):
        name = aliases.get(name.lower(), name)
        if name in named:
            picked.append(name)
        elif name:
            unknown.append(name)
    if unknown:
        why = f"no column {', '.join(map(repr, unknown))} in this fine-tune table; columns: {', '.join(named)}"
        if given is not None:
            raise ValueError(f"--columns: {why}")
        warnings.warn(f"experiment.columns: {why}", stacklevel=4)
    return list(dict.fromkeys(picked)) or None


def _pretraining_keys(sweep: LoadedSweep, pre: list[Record]) -> set[str]:
    """The keys that name the variants: the plan's (its jobs' variants are the pretraining's), else
    those that vary across the pretraining records (the fine-tunes' task and seeds name no variant)."""
    if sweep.plan is not None:
        return set(sweep.plan.swept)
    return varying_keys(pre)


def _task(record: Record) -> str:
    name = record.finetune.task if record.finetune is not None else None
    return str(name or config_value(record, "task", "name") or record.choices.get("task") or "?")


def _is_glue(record: Record) -> bool:
    """Whether ``record`` ran a GLUE task (``task=glue`` or one of its ``glue_<name>`` options)."""
    return config_value(record, "task", "_target_") == GLUE_TARGET


def _metric(fine: list[Record], task: str) -> str:
    return str(first_value([r for r in fine if _task(r) == task], lambda r: r.metrics.metric) or "accuracy")


def _distinct(records: list[Record], get) -> list:
    return sorted({v for v in map(get, records) if v is not None}, key=str)


def _ranks(rows: list[Row]) -> RankAgreement:
    """Kendall's τ between the final pretraining loss and the downstream average (both as "lower is
    better": the average negated), by the ladder's ``rank_agreement`` with the two as its rungs."""
    scores = {}
    for row in rows:
        loss = row.final_loss if row.final_loss is not None else row.loss_mean
        avg = row.cells[AVG].accuracy_mean if AVG in row.cells else None
        if loss is not None and avg is not None:
            scores[row.key] = {"pretraining": loss, "downstream": -avg}
    ranks = rank_agreement(scores, ["pretraining", "downstream"])
    if ranks.tau is not None and math.isnan(ranks.tau):
        ranks.tau, ranks.reason = None, "every variant has the same final pretraining loss or the same average"
    return ranks


def _speeds(bench: dict | None, swept: set[str], rows: list[Row]) -> tuple[str, str]:
    """Speed from ``bench.json`` when it names these variants, else the pretraining runs' own."""
    if bench is not None:
        speeds, rounds_of = bench_speeds(bench, swept), bench_rounds(bench, swept)
        if speeds.keys() & {r.key for r in rows}:
            for row in rows:
                row.tokens_per_s, row.speed_rounds = speeds.get(row.key), rounds_of.get(row.key, [])
            return "bench", bench_speed_note(bench.get("rounds"))
    return "records", RECORDS_SPEED_NOTE
