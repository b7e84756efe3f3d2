"""A sweep as pandas DataFrames, for a notebook: ``ablate.report.load(sweep_dir)``.

    from ablate.report import load

    sweep = load("multirun/2026-11-29/12-45-05")
    sweep.table                                   # the table: one row per variant, table.csv's columns
    sweep.records.groupby("label")["accuracy"].describe()   # one row per run
    sweep.history.pivot_table(index="step", columns="label", values="loss")  # learning curves

Built from the same records and the same ``build_table`` as ``ablate-table``, so the numbers are
the table's. pandas is an optional dependency (``pip install 'ablate[pandas]'``); nothing else of
ablate imports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ablate.report.formats import csv_columns, csv_rows
from ablate.report.record_fields import history_of
from ablate.report.table import SweepTable, build_table
from ablate.results import sort_records
from ablate.sweep import job_variant, load_sweep_records, records_swept_keys, variant_overrides

#: a record's own fields, before its metrics and swept keys (``records``' first columns)
RECORD_COLUMNS = ["job", "variant", "label", "seed", "status", "error", "diverged_step", "overrides", "job_dir",
                  "wandb_dir"]
#: a run's evaluations during training (``history``' columns, after job, variant, label, seed)
HISTORY_COLUMNS = ["step", "tokens", "flops", "loss", "accuracy"]


@dataclass(frozen=True)
class SweepFrames:
    """A sweep as DataFrames (``load``)."""

    records: Any         # pandas.DataFrame: one row per run (RECORD_COLUMNS, the swept keys, every scalar metric)
    table: Any           # pandas.DataFrame: one row per variant, table.csv's columns and raw values
    history: Any         # pandas.DataFrame: one row per evaluation of a run on the validation split
    sweep_table: SweepTable  # the table itself (``.caption()``, ``.rows``), as ablate-table renders it

    @property
    def caption(self) -> str:
        return self.sweep_table.caption()


def _pandas() -> Any:
    try:
        import pandas
    except ImportError:
        raise ImportError("ablate.report.load needs pandas: pip install 'ablate[pandas]' "
                          "(or pip install pandas)") from None
    return pandas


def _flat(prefix: str, value: Any, out: dict[str, Any]) -> None:
    """Nested dicts of scalars as dotted keys (``val.loss``, ``eval.128.accuracy``); lists left out."""
    if isinstance(value, dict):
        for key, inner in value.items():
            _flat(f"{prefix}.{key}" if prefix else str(key), inner, out)
    elif not isinstance(value, (list, tuple)):
        out[prefix] = value


def run_labels(table: SweepTable) -> dict[str, str]:
    """``{variant_key: label}`` of every variant the table shows (a pivoted table's cells too)."""
    labels = {row.key: row.label for row in table.rows}
    labels.update({cell.key: cell.label for cell in table.flat})
    return labels


def run_rows(records: list[dict], table: SweepTable) -> list[dict[str, Any]]:
    """One flat dict per record, in the records' order: RECORD_COLUMNS, the swept keys' values, the
    metrics (nested ones dotted: ``val.loss``; ``history`` is ``load``'s own frame)."""
    swept = records_swept_keys(records)
    labels = run_labels(table)
    rows = []
    for record in records:
        key = job_variant(record.get("overrides"), swept)
        config, job, wandb = record.get("config") or {}, record.get("job") or {}, record.get("wandb") or {}
        path = record.get("_path")
        row: dict[str, Any] = {
            "job": job.get("num"), "variant": key, "label": labels.get(key, key), "seed": config.get("seed"),
            "status": record.get("status"), "error": record.get("error"), "diverged_step": record.get("diverged_step"),
            "overrides": " ".join(record.get("overrides") or []),
            "job_dir": str(Path(path).parent) if path else job.get("dir"), "wandb_dir": wandb.get("dir"),
        }
        row.update(variant_overrides(record.get("overrides"), swept))
        metrics: dict[str, Any] = {}
        _flat("", record.get("metrics") or {}, metrics)
        row.update({k: v for k, v in metrics.items() if k not in row})
        rows.append(row)
    return rows


def load(sweep_dir: str | Path, **table_options: Any) -> SweepFrames:
    """The records, table and learning curves of the sweep in ``sweep_dir`` as DataFrames.

    ``table_options`` go to ``build_table`` as ``ablate-table``'s flags do (``baseline``, ``test``,
    ``columns``, ``rows``, ``ladder``). Raises ValueError when the directory holds no record."""
    pd = _pandas()
    records = load_sweep_records(sweep_dir)
    if not records:
        raise ValueError(f"no result.json under {sweep_dir}")
    table = build_table(records, **table_options)
    records = sort_records(records)
    runs = run_rows(records, table)
    history = [{**{k: run[k] for k in ("job", "variant", "label", "seed")}, **{k: point.get(k) for k in HISTORY_COLUMNS}}
               for record, run in zip(records, runs) for point in history_of(record)]
    return SweepFrames(
        records=pd.DataFrame(runs),
        table=pd.DataFrame(csv_rows(table), columns=csv_columns(table)),
        history=pd.DataFrame(history, columns=["job", "variant", "label", "seed", *HISTORY_COLUMNS]),
        sweep_table=table,
    )
