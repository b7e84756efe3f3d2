"""What a table shows: its columns, for every format.

``columns`` (human formats: terminal, markdown, LaTeX, report.html) and ``csv_fields`` (the CSV
and the wandb.Table) are the one place that decides which columns a table has; ``formats``
renders those. Human columns show accuracy in percent with ± std and marks, and Δ to the baseline
in points with its 95% CI; each has a ``role``: ``HEADLINE`` columns (the variant, accuracy, Δ; a
pivot's cells; a ladder's CMs and trend) head the terminal table when it folds to fit and, with
the ``PAPER`` ones, make the default LaTeX table. The CSV (and the wandb.Table,
``ablate.report.publish``) carries the raw values (fractions, None as empty) in ``CSV_COLUMNS``,
then the ``OPTIONAL_CSV_COLUMNS`` the records support, then ``acc@L`` and ``acc@L_std`` for each
evaluated length when more than one was evaluated (``csv_columns``). Its ``metric`` column is
each row's own metric (tasks' metrics can differ). A pivoted table (``SweepTable.columns_key``)
has one accuracy column per value of that key and ``avg``.

A sweep whose seeds ran in rounds (``SweepTable.has_rounds``) shows each comparison's verdict
instead of the marks: a ``verdict`` and a ``seeds`` column (pivoted: a ``V verdict`` column per
value), Δ with its repeated CI, and in the CSV the ``rounds`` columns (pivoted ``V_verdict``, ...),
its ``p_value`` and ``p_corrected`` kept, empty.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ablate.report.caption import sci
from ablate.report.rows import Row

#: ``ablate.report.table.SweepTable``, which calls these functions: not imported (no import cycle)
SweepTable = Any

DASH = "–"


# ---------------------------------------------------------------------------------------------
# The columns: the one place that decides what every format shows
# ---------------------------------------------------------------------------------------------

#: a CSV column: its name and its value of a row (getter(table, row)); every layout's rows have their own
Field = tuple[str, Callable[[Any, Any], Any]]


def _count(row: Row, status: str) -> int:
    return row.counts.get(status, 0)


def _int_if_whole(value: float | None) -> float | int | None:
    return int(value) if value is not None and float(value).is_integer() else value


# The columns of the CSV and of the wandb.Table, in order (the first eight are the paper table's);
# every table has these. Records with the newer keys add OPTIONAL_CSV_COLUMNS, extrapolation sweeps
# acc@L and acc@L_std per evaluated length (csv_columns).
_BASE_FIELDS: list[Field] = [
    ("variant", lambda t, r: r.label),
    ("accuracy_mean", lambda t, r: r.accuracy_mean),
    ("accuracy_std", lambda t, r: r.accuracy_std),
    ("n", lambda t, r: r.n),
    ("speed_ratio", lambda t, r: r.speed_ratio),
    ("memory_ratio", lambda t, r: r.memory_ratio),
    ("params", lambda t, r: r.params),
    ("status", lambda t, r: r.status),
    ("loss_mean", lambda t, r: r.loss_mean),
    ("tokens_per_s", lambda t, r: r.tokens_per_s),
    ("memory_mib", lambda t, r: r.memory_mib),
    ("p_value", lambda t, r: r.p_value),
    ("n_ok", lambda t, r: r.n),
    ("n_diverged", lambda t, r: _count(r, "diverged")),
    ("n_failed", lambda t, r: _count(r, "failed")),
    ("speed_source", lambda t, r: t.speed_source),
    ("metric", lambda t, r: r.metric or t.metric),
    ("n_running", lambda t, r: _count(r, "running")),
    ("n_interrupted", lambda t, r: _count(r, "interrupted")),
    ("overrides", lambda t, r: r.key),
    ("is_baseline", lambda t, r: r.is_baseline),
    ("delta", lambda t, r: r.delta),
    ("delta_ci_low", lambda t, r: r.delta_ci_low),
    ("delta_ci_high", lambda t, r: r.delta_ci_high),
    ("p_corrected", lambda t, r: r.p_corrected),
    ("n_paired", lambda t, r: r.n_paired),
    ("steps", lambda t, r: _int_if_whole(r.steps)),
    ("speed_doubt", lambda t, r: r.speed_doubt[0]),   # load | flops | rounds (report/speed_checks.py); "" stands
]
CSV_COLUMNS = [name for name, _ in _BASE_FIELDS]

# Present when the records have what they need: training FLOPs, the validation loss at 25% and at
# the end, a tuned sweep's lr (sweep.json's tune block).
_OPTIONAL_FIELDS: dict[str, list[Field]] = {
    "flops": [("flops_per_token", lambda t, r: r.flops_per_token), ("train_flops", lambda t, r: r.train_flops),
              ("flops_ratio", lambda t, r: r.flops_ratio)],
    "losses": [("early_loss", lambda t, r: r.early_loss), ("final_loss", lambda t, r: r.final_loss)],
    "tune": [("lr", lambda t, r: r.lr), ("delta_default_lr", lambda t, r: r.delta_default_lr)],
    "rounds": [("verdict", lambda t, r: _verdict_field(r, "verdict")), ("seeds", lambda t, r: _verdict_field(r, "n")),
               ("verdict_round", lambda t, r: _verdict_field(r, "round")),
               ("at_cap", lambda t, r: _verdict_field(r, "at_cap")),
               ("verdict_level", lambda t, r: _verdict_field(r, "level"))],
}
OPTIONAL_CSV_COLUMNS = {group: [name for name, _ in fields] for group, fields in _OPTIONAL_FIELDS.items()}

# A pivoted table's CSV: per column value V, these (V itself is the mean), then avg and the run counts.
_CELL_FIELDS: list[tuple[str, Callable[[Row], Any]]] = [
    ("", lambda r: r.accuracy_mean), ("_std", lambda r: r.accuracy_std), ("_n", lambda r: r.n),
    ("_delta", lambda r: r.delta), ("_delta_ci_low", lambda r: r.delta_ci_low),
    ("_delta_ci_high", lambda r: r.delta_ci_high), ("_p_value", lambda r: r.p_value),
    ("_p_corrected", lambda r: r.p_corrected),
]
_TUNED_CELL_FIELDS = [("_lr", lambda r: r.lr), ("_delta_default_lr", lambda r: r.delta_default_lr)]
_ROUNDS_CELL_FIELDS = [(f"_{name}", lambda r, get=get: get(None, r)) for name, get in _OPTIONAL_FIELDS["rounds"]]
_PIVOT_TAIL: list[Field] = [
    ("avg", lambda t, r: r.avg), ("status", lambda t, r: r.status), ("n_ok", lambda t, r: r.n),
    ("n_diverged", lambda t, r: _count(r, "diverged")), ("n_failed", lambda t, r: _count(r, "failed")),
    ("n_running", lambda t, r: _count(r, "running")), ("n_interrupted", lambda t, r: _count(r, "interrupted")),
    ("metric", lambda t, r: r.metric or t.metric), ("overrides", lambda t, r: r.key),
    ("is_baseline", lambda t, r: r.is_baseline),
]


def _verdict_field(row: Row, name: str) -> Any:
    """A field of the row's verdict (``ablate.sequential.Verdict``); None for a row without one."""
    return None if row.verdict is None else getattr(row.verdict, name)


def _cell_getter(value: str, get: Callable[[Row], Any]) -> Callable[[SweepTable, Row], Any]:
    return lambda t, r: get(r.cells[value]) if value in r.cells else None


#: the first column of every layout's CSV: the row's label
VARIANT_FIELD: Field = _BASE_FIELDS[0]


def csv_fields(t: Any) -> list[Field]:
    """The CSV's (and the wandb.Table's) columns of any layout (``TableLayout.csv_fields``)."""
    return t.csv_fields()


def flat_fields(t: SweepTable) -> list[Field]:
    """A flat table's CSV columns as ``(name, getter(table, row))``, in order."""
    if t.pivoted:
        fields: list[Field] = [_BASE_FIELDS[0]]
        for v in t.column_values:
            for suffix, get in (_CELL_FIELDS + (_TUNED_CELL_FIELDS if t.tuned else [])
                                + (_ROUNDS_CELL_FIELDS if t.has_rounds else [])):
                fields.append((f"{v}{suffix}", _cell_getter(v, get)))
        return fields + _PIVOT_TAIL
    fields = list(_BASE_FIELDS)
    for group, present in (("flops", t.has_flops), ("losses", t.has_losses), ("tune", t.tuned),
                           ("rounds", t.has_rounds)):
        if present:
            fields += _OPTIONAL_FIELDS[group]
    for L in t.length_columns:
        fields += [(f"acc@{L}", lambda t, r, L=L: r.eval.get(L, (None, None))[0]),
                   (f"acc@{L}_std", lambda t, r, L=L: r.eval.get(L, (None, None))[1])]
    return fields


def _pct(mean: float | None, std: float | None) -> str:
    if mean is None:
        return DASH
    return f"{100 * mean:.1f}" + (f" ± {100 * std:.1f}" if std is not None else "")


def _x(ratio: float | None, times: str = "x") -> str:
    return DASH if ratio is None else f"{ratio:.2f}{times}"


#: the speed column's mark where a speed ratio is in doubt (``speed_checks``; the caption says why)
ROUNDS_MARK = "§"


def _speed(row: Row, times: str = "x") -> str:
    """The speed ratio, marked where it is in doubt (``Row.speed_doubt``)."""
    return _x(row.speed_ratio, times) + (ROUNDS_MARK if row.speed_doubt[0] else "")


def _si(value: float | None, digits: int = 1) -> str:
    if value is None:
        return DASH
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= div:
            return f"{value / div:.{digits}f}{unit}"
    return f"{value:.0f}"


def _sci(value: float | None) -> str:
    return DASH if value is None else sci(value)


def _delta(row: Row, ci: bool = True) -> str:
    """``-11.0 [-12.3, -9.7]``: the difference to the baseline in points, with its 95% CI."""
    if row.delta is None or row.is_baseline:
        return DASH
    text = f"{100 * row.delta:+.1f}"
    if ci and row.delta_ci_low is not None:
        text += f" [{100 * row.delta_ci_low:+.1f}, {100 * row.delta_ci_high:+.1f}]"
    return text


def verdict_text(row: Row) -> str:
    """A comparison's verdict in words: ``different``, ``equivalent``, ``undecided`` or, after the
    last round, ``undecided at the cap``; ``–`` for a row without one (the baseline)."""
    v = row.verdict
    if v is None or row.is_baseline:
        return DASH
    return "undecided at the cap" if v.verdict == "undecided" and v.at_cap else v.verdict


def _seeds(row: Row) -> str:
    """The seeds a comparison's verdict rests on."""
    return DASH if row.verdict is None or row.is_baseline else str(row.verdict.n)


def _cell_verdict(row: Row) -> str:
    """A pivoted cell's verdict and its seeds: ``different (3 seeds)``."""
    return DASH if row.verdict is None or row.is_baseline else f"{verdict_text(row)} ({_seeds(row)} seeds)"


def _loss(value: float | None) -> str:
    return DASH if value is None else f"{value:.3f}"


# A column's role: what the terminal keeps in its first block when it folds, and the LaTeX table shows.
HEADLINE = "headline"  # the comparison itself: first block of a folded terminal table, the paper table
PAPER = "paper"        # the paper table too (what a reader of the paper needs next: speed, params, lr)
DETAIL = "detail"      # every other column: terminal (further blocks), markdown, --all-columns LaTeX


@dataclass(frozen=True)
class Column:
    """A column of the human formats: its header, its cell (unescaped; ``times`` is the ratio
    sign), for accuracy cells the significance mark that follows the cell, and its ``role``."""

    head: str
    text: Callable[[Row, str], str]
    mark: Callable[[Row], str] | None = None
    left: bool = False
    role: str = DETAIL


#: the first column of every layout's human table: the row's label
VARIANT_COLUMN = Column("variant", lambda r, x: r.label, left=True, role=HEADLINE)


def columns(t: Any) -> list[Column]:
    """The columns of the terminal, markdown and LaTeX tables of any layout (``TableLayout.columns``)."""
    return t.columns()


def flat_columns(t: SweepTable) -> list[Column]:
    """A flat table's human columns, in order."""
    variant = VARIANT_COLUMN
    runs = Column("runs", lambda r, x: r.status, left=True)
    if t.pivoted:
        cells = [Column(f"{t.column_label(v)} (%)",
                        lambda r, x, v=v: _pct(r.cells[v].accuracy_mean, r.cells[v].accuracy_std) if v in r.cells
                        else DASH,
                        mark=lambda r, v=v: r.cells[v].mark if v in r.cells else "", role=HEADLINE)
                 for v in t.column_values]
        if t.has_rounds:  # each cell's comparison: its verdict beside it, in place of the marks
            cells = [c for v, cell in zip(t.column_values, cells)
                     for c in (cell, Column(f"{t.column_label(v)} verdict",
                                            lambda r, x, v=v: _cell_verdict(r.cells[v]) if v in r.cells else DASH,
                                            left=True, role=HEADLINE))]
        return [variant, *cells, Column("avg (%)", lambda r, x: _pct(r.avg, None), role=HEADLINE), runs]
    acc = f"acc@{t.train_length} (%)" if t.extra_lengths and t.train_length else "accuracy (%)"
    cols = [variant, Column(acc, lambda r, x: _pct(r.accuracy_mean, r.accuracy_std), mark=lambda r: r.mark,
                            role=HEADLINE)]
    cols += [Column(f"acc@{L} (%)", lambda r, x, L=L: _pct(*r.eval.get(L, (None, None))), role=PAPER)
             for L in t.extra_lengths]
    at = " @ tuned lr" if t.tuned else ""
    if t.has_rounds:  # the verdict, on the seeds it used, and Δ with the interval valid under the stopping
        cols += [Column("verdict", lambda r, x: verdict_text(r), left=True, role=HEADLINE),
                 Column("seeds", lambda r, x: _seeds(r), role=HEADLINE),
                 Column(f"Δ{at} (pts, repeated CI)", lambda r, x: _delta(r), role=HEADLINE)]
    else:
        cols.append(Column(f"Δ{at} (pts, 95% CI)", lambda r, x: _delta(r), role=HEADLINE))
    if t.tuned:
        cols += [Column("Δ @ default lr (pts)",
                        lambda r, x: DASH if r.delta_default_lr is None or r.is_baseline
                        else f"{100 * r.delta_default_lr:+.1f}"),
                 Column("lr", lambda r, x: DASH if r.lr is None else f"{r.lr:g}", role=PAPER)]
    cols.append(Column("loss", lambda r, x: _loss(r.loss_mean)))
    if t.has_losses:
        cols += [Column("early loss", lambda r, x: _loss(r.early_loss)),
                 Column("final loss", lambda r, x: _loss(r.final_loss))]
    cols += [Column("speed", lambda r, x: _speed(r, x), role=PAPER),
             Column("tokens/s", lambda r, x: _si(r.tokens_per_s)),
             Column("memory", lambda r, x: _x(r.memory_ratio, x)),
             Column("MiB", lambda r, x: DASH if r.memory_mib is None else f"{r.memory_mib:.1f}")]
    if t.has_flops:
        cols += [Column("FLOPs", lambda r, x: _sci(r.train_flops)),
                 Column("FLOPs ratio", lambda r, x: _x(r.flops_ratio, x))]
    cols.append(Column("params", lambda r, x: _si(r.params, 2), role=PAPER))
    if t.steps_differ:
        cols.append(Column("steps", lambda r, x: DASH if r.steps is None else f"{r.steps:.0f}"))
    return cols + [runs]


def csv_columns(t: Any) -> list[str]:
    """The CSV's column names: ``CSV_COLUMNS``, then those of ``OPTIONAL_CSV_COLUMNS`` the records
    support and ``acc@L``/``acc@L_std`` per evaluated length when there are several; a pivoted
    table has per column value V ``V``, ``V_std``, ``V_n``, ``V_delta``, ... and ``avg`` instead."""
    return [name for name, _ in csv_fields(t)]


def csv_rows(t: Any) -> list[list[Any]]:
    """The table as raw values (None where unknown), in ``csv_columns`` order."""
    fields = csv_fields(t)
    return [[get(t, r) for _, get in fields] for r in t.rows]
