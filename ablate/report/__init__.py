"""Sweep directory -> paper-style table: records in, table files and a wandb table out.

A sweep directory holds one ``result.json`` per finished job (docs/internals.md, "Records").
The package turns them into one row per variant, by concern:

* ``records``: the inputs (``load_records`` from ``ablate.results``, ``bench.json``);
* ``stats``: mean, sample std, Welch's t-test;
* ``table``: ``build_table`` -> ``SweepTable`` of ``Row``s, the baseline(s);
* ``formats``: ``render(table, "terminal" | "markdown" | "latex" | "csv")``;
* ``plot``: the PNG figure;
* ``publish``: ``save_outputs`` (``table.{md,tex,csv,png}``, atomically), ``log_to_wandb`` (the
  sweep's one table run, ``table_run_id``);
* ``cli``: the ``ablate-table`` command (not imported here: entry points sit above the package).

The variants themselves are defined once, in ``ablate.sweep``.
"""

from ablate.report.formats import (CSV_COLUMNS, FORMATS, csv_columns, csv_rows, latex_escape, render, rich_table,
                                   to_csv, to_latex, to_markdown)
from ablate.report.plot import plot
from ablate.report.publish import log_to_wandb, save_outputs, table_run_id, write_atomic
from ablate.report.records import bench_speeds, load_bench, load_records, sort_records
from ablate.report.stats import SIGNIFICANCE_TEST, welch_p
from ablate.report.table import STATUSES, Row, SweepTable, build_table, resolve_baseline

__all__ = [
    "CSV_COLUMNS", "FORMATS", "SIGNIFICANCE_TEST", "STATUSES", "Row", "SweepTable", "bench_speeds", "build_table",
    "csv_columns", "csv_rows", "latex_escape", "load_bench", "load_records", "log_to_wandb", "plot", "render",
    "resolve_baseline", "rich_table", "save_outputs", "sort_records", "table_run_id", "to_csv", "to_latex",
    "to_markdown", "welch_p", "write_atomic",
]
