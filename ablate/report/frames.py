"""A sweep as pandas DataFrames, for a notebook: ``ablate.report.load(sweep_dir)``.

    from ablate.report import load

    sweep = load("multirun/2026-11-29/12-45-05")
    sweep.table                                   # the table: one row per variant, table.csv's columns
    sweep.records.groupby("label")["accuracy"].describe()   # one row per run
    sweep.history.pivot_table(index="step", columns="label", values="loss")  # learning curves
    sweep.records.merge(sweep.table, on="variant")           # each run with its row

One meaning per column name in every frame: ``variant`` is the key of the table row a run is
summarised in (``ablate.sweep.variant_key``; a ladder's rows leave out the size keys, a pivot's its
columns key, which have columns of their own in ``records``), ``label`` that row's label; a number
that is missing is NaN, never None.

Built from the same records and the same ``build_table`` as ``ablate-table``, so the numbers are
the table's. pandas is an optional dependency (``pip install 'ablate[pandas]'``); nothing else of
ablate imports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ablate.record import Record
from ablate.report.formats import csv_columns, csv_rows
from ablate.report.layout import RunPlace, TableLayout
from ablate.report.record_fields import history_of
from ablate.report.records import load_sweep
from ablate.report.table import build_table
from ablate.sweep import records_swept_keys, variant_overrides

#: a record's own fields, before its metrics and swept keys (``records``' first columns)
RECORD_COLUMNS = ["job", "variant", "label", "seed", "status", "error", "diverged_step", "overrides", "job_dir",
                  "wandb_dir"]
#: a run's evaluations during training (``history``' columns, after job, variant, label, seed)
HISTORY_COLUMNS = ["step", "tokens", "flops", "loss", "accuracy"]
#: the CSV's columns renamed in ``table``, so that a name means one thing in every frame: the CSV's
#: ``variant`` is the row's label, its ``overrides`` the row's key
TABLE_RENAMES = {"variant": "label", "overrides": "variant"}


@dataclass(frozen=True)
class SweepFrames:
    """A sweep as DataFrames (``load``)."""

    records: Any         # pandas.DataFrame: one row per run (RECORD_COLUMNS, the swept keys, every scalar metric)
    table: Any           # pandas.DataFrame: one row per table row, table.csv's columns and raw values
    history: Any         # pandas.DataFrame: one row per evaluation of a run on the validation split
    sweep_table: TableLayout  # the table itself (``.caption()``, ``.rows``), as ablate-table renders it

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


def run_places(records: list[Record], table: TableLayout) -> list[tuple[dict[str, str], RunPlace]]:
    """Each record's variant (its overrides of the swept keys) and where the table summarises it."""
    swept = table.sweep.swept if table.sweep is not None else records_swept_keys(records)
    variants = [variant_overrides(record.overrides, swept) for record in records]
    return [(variant, table.run_place(variant)) for variant in variants]


def run_rows(records: list[Record], table: TableLayout) -> list[dict[str, Any]]:
    """One flat dict per record, in the records' order: RECORD_COLUMNS (``variant`` and ``label``:
    the table row the run is summarised in, ``TableLayout.run_place``), the swept keys' values, the
    metrics as ``result.json`` holds them (``Record.to_json``; nested ones dotted: ``val.loss``,
    ``early_stopped.step``; a metric the run has not, None, no column of its own;
    ``history`` is ``load``'s own frame)."""
    rows = []
    for record, (variant, place) in zip(records, run_places(records, table)):
        row: dict[str, Any] = {
            "job": record.job.num, "variant": place.key, "label": place.label, "seed": record.seed,
            "status": record.status, "error": record.error, "diverged_step": record.diverged_step,
            "overrides": " ".join(record.overrides),
            "job_dir": str(Path(record.path).parent) if record.path else record.job.dir,
            "wandb_dir": record.wandb.dir if record.wandb is not None else None,
        }
        row.update(variant)
        metrics: dict[str, Any] = {}
        _flat("", {k: v for k, v in record.to_json()["metrics"].items() if v is not None}, metrics)
        row.update({k: v for k, v in metrics.items() if k not in row})
        rows.append(row)
    return rows


def _missing_as_nan(frame: Any) -> Any:
    """A column of numbers with gaps (None) as floats with NaN: pandas keeps None in a column it
    reads as objects (one all None, or mixed), where ``mean`` and ``isna`` treat it apart."""
    for name in frame.columns:
        values = [v for v in frame[name] if v is not None and v == v]
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        if frame[name].dtype == object and numbers and len(values) < len(frame):
            frame[name] = frame[name].astype(float)
    return frame


def load(sweep_dir: str | Path, **table_options: Any) -> SweepFrames:
    """The records, table and learning curves of the sweep in ``sweep_dir`` as DataFrames, the
    sweep read once (``records.load_sweep``).

    ``table_options`` go to ``build_table`` as ``ablate-table``'s flags do (``baseline``, ``test``,
    ``columns``, ``rows``, ``ladder``). Raises ValueError when the directory holds no record, or the
    records of several sweeps (``ablate.sweep.SeveralSweeps``, naming them)."""
    pd = _pandas()
    sweep = load_sweep(sweep_dir)
    if not sweep.records:
        raise ValueError(f"no result.json under {sweep_dir}")
    table = build_table(sweep, **table_options)
    runs = run_rows(sweep.records, table)
    history = [{**{k: run[k] for k in ("job", "variant", "label", "seed")}, **{k: getattr(point, k) for k in HISTORY_COLUMNS}}
               for record, run in zip(sweep.records, runs) for point in history_of(record)]
    frame = pd.DataFrame(csv_rows(table), columns=csv_columns(table)).rename(columns=TABLE_RENAMES)
    frame = frame[["variant", "label", *[c for c in frame.columns if c not in TABLE_RENAMES.values()]]].copy()
    return SweepFrames(
        records=_missing_as_nan(pd.DataFrame(runs)),
        table=_missing_as_nan(frame),
        history=_missing_as_nan(pd.DataFrame(history, columns=["job", "variant", "label", "seed", *HISTORY_COLUMNS])),
        sweep_table=table,
    )
