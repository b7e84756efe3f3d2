"""Sweep directory -> paper-style table: records in, table files and a wandb table out.

A sweep directory holds one ``result.json`` per finished job (docs/internals.md, "Records").
The package turns them into one row per variant, by concern:

* ``records``: the inputs, read once: ``load_sweep(sweep_dir)`` -> ``LoadedSweep`` (the records, the
  plan in ``sweep.json``, ``bench.json``), which ``build_table``, ``to_html`` and ``load`` take;
* ``layout``: ``TableLayout``, what every table layout answers (its columns, CSV fields, figures,
  wandb config and summary, page notes, where a run sits), so nothing downstream asks which it is;
* ``record_fields``: a record's fields (``metrics.*``, seed, lr, task) and what the records say
  about the sweep as a whole (experiment node, evaluated lengths, smoke test, budget);
* ``stats``: mean, sample std, the paired t-test over seeds (default) or Welch's test, the 95%
  CI of each row's difference to its baseline, the Holm–Bonferroni correction;
* ``rows``: ``Row`` (one variant's runs summarised) and the naming of rows (``resolve_baseline``,
  ``resolve_rows``, ``split_rows``);
* ``tuned``: a tuned sweep's final runs (each variant's at its chosen lr) and its default-lr runs;
* ``table``: ``build_table`` -> ``SweepTable`` of ``Row``s, in named stages: the baseline(s), a
  pivot of one swept key into columns, the comparisons, the rows chosen;
* ``comparisons``: the baseline(s) marked, each row against its own (ratios, Δ and its CI, p), the
  Holm–Bonferroni correction over the comparisons shown; a ``seed=auto`` sweep's verdicts instead
  (``decide_rounds``: different, equivalent or undecided, each with its repeated CI);
* ``rounds``: ``round_state(sweep)`` -> ``RoundState``: those verdicts and each comparison's baseline,
  by variant key, for the sweeper between rounds (from ``build_table``, so it agrees with the table);
* ``caption``: the words of a table (its caption and notes; ``SweepTable.caption()``);
* ``table_columns``: every column a table can show (``columns``, ``csv_fields``) and its role:
  headline (the terminal's first block), paper (``table.tex``) or detail;
* ``formats``: ``render(table, "terminal" | "markdown" | "latex" | "csv")``: the terminal table
  folded to its width, the paper's LaTeX table with its note, Markdown and CSV;
* ``plot``: the PNG figures (``table.png``, ``curves.png``, ``lr.png``);
* ``publish``: ``save_outputs`` (``table.{md,tex,csv,png}`` and the figures, atomically),
  ``log_to_wandb`` (the sweep's one table run, ``table_run_id``);
* ``ladder``: a sweep with a size key swept (a scale ladder) as ``LadderTable``: per rung the loss
  and the compute multiplier from ``scaling``, then the trend with scale (``build_table`` picks it);
  ``ladder_view``: its columns, CSV fields, ``scaling.png`` and wandb summary;
* ``finetune_table``: a pretrain-then-fine-tune sweep (``finetune.tasks``) as ``FinetuneTable``: the
  pretraining columns, one column per downstream task and their average, each with Δ paired by
  pretraining seed, and Kendall's τ between pretraining loss and the average (``build_table`` picks it);
* ``webpage``: ``to_html``: ``report.html``, the table, figures and runs on one offline page;
* ``frames``: ``load(sweep_dir)``: the records, table and learning curves as pandas DataFrames;
* ``cli``: the ``ablate-table`` command (not imported here: entry points sit above the package).

The variants themselves are defined once, in ``ablate.sweep``.
"""

from ablate.report.finetune_table import FinetuneTable
from ablate.report.frames import SweepFrames, load
from ablate.report.formats import (CSV_COLUMNS, FORMATS, OPTIONAL_CSV_COLUMNS, columns, csv_columns, csv_fields,
                                   csv_rows, latex_escape, render, rich_table, to_csv, to_latex, to_markdown)
from ablate.report.ladder import SIZE_KEYS, LadderRow, LadderTable, build_ladder, is_ladder
from ablate.report.plot import curves, lr_plot, mean_curve, plot, scaling_plot
from ablate.report.publish import log_to_wandb, save_outputs, table_run_id, write_atomic, write_report
from ablate.report.layout import RunPlace, TableLayout
from ablate.report.records import LoadedSweep, bench_speeds, load_bench, load_records, load_sweep, sort_records
from ablate.report.rounds import RoundState, round_state
from ablate.report.stats import (SIGNIFICANCE_TEST, TESTS, Comparison, holm, paired_test, welch_p,
                                 welch_test)
from ablate.report.table import STATUSES, Row, SweepTable, build_table, resolve_baseline, resolve_rows, split_rows
from ablate.report.webpage import REPORT_FILE

__all__ = [
    "FinetuneTable", "LoadedSweep", "RoundState", "RunPlace", "round_state", "TableLayout", "load_sweep", "CSV_COLUMNS", "Comparison", "REPORT_FILE", "SweepFrames", "load", "write_report", "FORMATS", "LadderRow", "LadderTable", "SIZE_KEYS", "build_ladder", "is_ladder",
    "scaling_plot", "OPTIONAL_CSV_COLUMNS", "SIGNIFICANCE_TEST", "STATUSES", "TESTS", "Row",
    "SweepTable", "bench_speeds", "build_table", "columns", "csv_columns", "csv_fields", "csv_rows", "curves",
    "holm", "latex_escape", "load_bench", "load_records", "log_to_wandb", "lr_plot", "mean_curve", "paired_test",
    "plot", "render", "resolve_baseline", "resolve_rows", "rich_table", "save_outputs", "sort_records",
    "split_rows", "table_run_id", "to_csv", "to_latex", "to_markdown", "welch_p", "welch_test", "write_atomic",
]
