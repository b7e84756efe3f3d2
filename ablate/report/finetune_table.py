"""A pretrain-then-fine-tune sweep's table (docs/finetune.md): ``FinetuneTable``, the third layout.

A sweep with ``finetune.tasks`` has pretraining records (``stage: pretrain``) and fine-tune records
(``stage: finetune``), whose variant and seed are their pretraining's. ``build_table`` lays such a
sweep out here (its rows: ``ablate.report.finetune_rows``), one row per variant, as Narang et al.
(2021, Table 1) do:

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

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ablate.report.caption import RECORDS_SPEED_NOTE, CaptionText, _span
from ablate.report.layout import Figure, RunPlace
from ablate.report.record_fields import SweepBudget
from ablate.report.rows import Row
from ablate.report.scaling import RankAgreement
from ablate.report.stats import SIGNIFICANCE_TESTS, TEST_NAMES
from ablate.report.table_columns import (DASH, DETAIL, HEADLINE, PAPER, VARIANT_COLUMN, VARIANT_FIELD, Column, Field,
                                         _delta, _loss, _pct, _sci, _si, _speed, _x)
from ablate.sweep import Tuning, variant_key

if TYPE_CHECKING:
    from ablate.report.records import LoadedSweep

FINETUNE = "finetune"
AVG = "avg"                 # the average's cell and column name (its label: ``FinetuneTable.avg_label``)
GLUE_SCORE = "GLUE dev score"
GLUE_TARGET = "ablate.data.glue.GlueTask"
#: the pretraining columns ``columns`` may name, beside each task, ``<task>_delta``, avg, avg_delta, runs
PRETRAINING_COLUMNS = ("params", "flops", "speed", "memory", "early_loss", "final_loss")


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
    shows_speed: ClassVar[bool] = True     # the pretraining's
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
