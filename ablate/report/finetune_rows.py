"""The fine-tune layout's rows, from a sweep's records (``build_finetune_table``): per variant its
pretraining runs as the flat table computes them (``rows``), one cell per downstream task (each
pretraining seed's fine-tune seeds averaged first) and their average, the comparisons with the
baseline, the rank agreement between pretraining loss and the downstream average, and the speed
source. The layout itself (columns, CSV fields, caption, figures, wandb) is ``FinetuneTable``'s
(``ablate.report.finetune_table``)."""

from __future__ import annotations

import math
import warnings
from collections import Counter
from typing import TYPE_CHECKING, Any, Iterable

from ablate.record import Record
from ablate.report.caption import RECORDS_SPEED_NOTE, bench_speed_note
from ablate.report.comparisons import compare_with_baselines, correct, mark_baselines
from ablate.report.record_fields import (budget_of, config_value, early_fraction_of, experiment_of, first_value,
                                         sharing_of, smoke_of)
from ablate.report.speed_checks import speed_doubt_note
from ablate.report.records import bench_rounds, bench_speeds
from ablate.report.rows import Row, accuracy_by_seed, resolve_rows, split_rows, variant_row
from ablate.report.scaling import RankAgreement, rank_agreement
from ablate.report.stats import mean, std
from ablate.report.tuned import best_finetune_lr, final_runs
from ablate.sweep import Tuning, group_by_variant, variant_key, variant_overrides, variants, varying_keys

if TYPE_CHECKING:
    from ablate.report.records import LoadedSweep

from ablate.report.finetune_table import AVG, FINETUNE, GLUE_SCORE, GLUE_TARGET, FinetuneTable


def has_finetunes(records: Iterable[Record]) -> bool:
    """Whether a sweep's records include fine-tune runs (then it is tabled here)."""
    return any(r.stage == FINETUNE for r in records)


class TaskCell(Row):
    """One variant on one downstream task (or ``avg``): a ``Row`` whose ``by_seed`` is per
    pretraining seed (its fine-tune seeds averaged), ``accuracies`` those seeds' scores."""

    @property
    def n_seeds(self) -> int:
        return len(self.by_seed)


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
