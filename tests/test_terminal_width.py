"""The terminal table fits the terminal: ``ablate-table PATH`` and the end-of-sweep table
(``render(table, "terminal")``) at 80 and 120 columns show every variant name and the headline
values (accuracy ± std with its marks, Δ with its CI; a pivot's cells; a ladder's CMs and trend)
in full, no line wider than the terminal, the other columns in further blocks, then a hint.

The tables are built by the real ``build_table`` from the synthetic records of the other report
tests (documented ``result.json`` format); the expected values are computed here from each row's
numbers, not taken from the renderer.
"""

from __future__ import annotations

import io
import sys

import pytest
from rich.cells import cell_len
from test_ladder_table import ladder_records
from test_report_layout import task_records, tuned_sweep
from test_table import qkv_records, record

from ablate.record import Record
from ablate.report import LadderTable, build_table, columns, load_records, render
from ablate.report.formats import print_terminal, terminal_width

HINT = "folded to fit"


def _pm(mean: float, std: float | None, mark: str = "") -> str:
    text = f"{100 * mean:.1f}" + (f" ± {100 * std:.1f}" if std is not None else "")
    return f"{text} {mark}".rstrip()


def _ci(delta: float, low: float, high: float) -> str:
    return f"{100 * delta:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}]"


def headline_values(t) -> list[str]:
    """What a reader of the table came for, formatted from the rows' own numbers."""
    values = []
    for row in t.rows:
        if isinstance(t, LadderTable):
            for cell in row.cells.values():
                m = cell.multiplier
                if not row.is_baseline and m is not None and m.cm is not None:
                    values.append(f"{m.cm:.2f}x [{m.ci_low:.2f}, {m.ci_high:.2f}]" + (" †" if m.extrapolated else ""))
            if not row.is_baseline and row.trend is not None and row.trend.ci_low is not None:
                s = row.trend
                values.append(f"{s.slope:+.2f} [{s.ci_low:+.2f}, {s.ci_high:+.2f}]")
        elif t.pivoted:
            values += [_pm(c.accuracy_mean, c.accuracy_std, c.mark) for c in row.cells.values()]
            values.append(f"{100 * row.avg:.1f}")
        else:
            values.append(_pm(row.accuracy_mean, row.accuracy_std, row.mark))
            if not row.is_baseline:
                values.append(_ci(row.delta, row.delta_ci_low, row.delta_ci_high))
    return values


def extrapolation_records() -> list[Record]:
    recs, n = [], 0
    for v, accs in (("rope", (0.9, 0.5, 0.2)), ("alibi", (0.9, 0.8, 0.7)), ("nope", (0.88, 0.3, 0.1))):
        for seed in range(3):
            evals = {16: accs[0] + seed / 100, 32: accs[1] + seed / 70, 64: accs[2] + seed / 50}
            recs.append(record(n, [f"pos_enc={v}", f"seed={seed}"], acc=evals[16], evals=evals, seq_len=16))
            n += 1
    return recs


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> dict:
    tuned_dir = tuned_sweep(tmp_path_factory.mktemp("tuned") / "sweep")
    built = {
        "flat": build_table(qkv_records()),
        "pivoted": build_table(task_records(), columns="task"),
        "tuned": build_table(load_records(tuned_dir)),
        "extrapolation": build_table(extrapolation_records()),
        "ladder": build_table(ladder_records(), n_boot=100),
    }
    assert built["pivoted"].pivoted and built["tuned"].tuned and built["extrapolation"].extra_lengths
    assert isinstance(built["ladder"], LadderTable)
    return built


@pytest.mark.parametrize("kind", ["flat", "pivoted", "tuned", "extrapolation", "ladder"])
@pytest.mark.parametrize("width", [80, 120])
def test_the_table_fits_the_terminal_with_names_and_headline_values_whole(tables, kind, width, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(width))
    t = tables[kind]
    out = render(t, "terminal")
    too_wide = [line for line in out.splitlines() if cell_len(line) > width]
    assert not too_wide, f"{len(too_wide)} lines wider than {width}:\n" + "\n".join(too_wide)
    for row in t.rows:
        assert row.label in out, f"variant {row.label!r} cut at {width} columns:\n{out}"
    values = headline_values(t)
    assert values
    for value in values:
        assert value in out, f"{value!r} not shown whole at {width} columns:\n{out}"
    # nothing is lost: every cell of every column is somewhere, whole
    for c in columns(t):
        for row in t.rows:
            cell = c.text(row, "x")
            assert cell in out, f"{c.head}: {cell!r} missing at {width} columns"
    # it folds (each block repeating the variant names) and says so exactly when unfolded it is wider
    unfolded = max(cell_len(line) for line in render(t, "terminal", all_columns=True).splitlines())
    assert unfolded > 120 or (kind == "pivoted" and unfolded > 80)  # each of these tables folds at 80
    if unfolded > width:
        assert HINT in out and "--all-columns" in out and out.count(t.rows[-1].label) >= 2
    else:
        assert HINT not in out


def test_a_wide_terminal_shows_one_block_without_a_hint(tables, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    out = render(tables["flat"], "terminal")
    assert HINT not in out
    header = next(line for line in out.splitlines() if "variant" in line)
    assert "accuracy (%)" in header and "params" in header and "runs" in header


def test_stdout_not_a_terminal_means_unfolded(tables, monkeypatch):
    """A file or a pipe (``ablate-table X > table.txt``, a SLURM log) has no width: one block, every
    column of a row on one line."""
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    assert terminal_width() is None
    out = render(tables["flat"], "terminal")
    assert HINT not in out
    header = next(line for line in out.splitlines() if "variant" in line)
    assert "accuracy (%)" in header and "runs" in header


def test_ablate_table_prints_folded_with_the_sweep_dir_in_the_hint(tables, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    print_terminal(tables["flat"], path="runs/qkv")
    out = capsys.readouterr().out
    assert max(cell_len(line) for line in out.splitlines()) <= 80
    assert "ablate-table runs/qkv --all-columns" in out and "Q=K, V separate" in out
    print_terminal(tables["flat"], all_columns=True, path="runs/qkv")
    wide = capsys.readouterr().out
    assert HINT not in wide and max(cell_len(line) for line in wide.splitlines()) > 80
