"""A table as text: terminal (rich), markdown, LaTeX (booktabs) and CSV.

The columns come from ``table_columns`` (``columns``, ``csv_fields``; re-exported here). The
terminal table fits the terminal (``terminal_width``): when every column does not fit, it folds
into blocks, each headed by the variant column, the first holding the ``HEADLINE`` columns
(accuracy ± std with its marks, Δ with its CI; a pivot's cells; a ladder's CMs and trend), cells
never cut, then a one-line hint. The default LaTeX table is the paper one: the ``HEADLINE`` and
``PAPER`` columns in a ``table`` (a ``table*`` when wider than a column of a two-column paper), a
one-sentence caption, the statistics in a footnote-sized note under the tabular; ``all_columns``
puts every column in a ``table*``.
"""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import sys

from ablate.report.caption import title
from ablate.report.layout import TableLayout
from ablate.report.table import Row
from ablate.report.table_columns import (CSV_COLUMNS, DASH, DETAIL, HEADLINE, OPTIONAL_CSV_COLUMNS, Column, columns,
                                         csv_columns, csv_fields, csv_rows)

FORMATS = ("terminal", "markdown", "latex", "csv")

# the columns' names are table_columns', re-exported: what a table shows and how it prints, from one place
__all__ = ["CSV_COLUMNS", "DASH", "FORMATS", "OPTIONAL_CSV_COLUMNS", "columns", "csv_columns", "csv_fields", "csv_rows",
           "latex_caption", "latex_escape", "latex_note", "print_terminal", "render", "rich_table", "terminal_width",
           "title", "to_csv", "to_latex", "to_markdown"]


def _cells(cols: list[Column], row: Row, times: str = "x") -> list[tuple[str, str]]:
    """A row's human-readable cells (unescaped) and the mark after each, in ``cols`` order."""
    return [(c.text(row, times), c.mark(row) if c.mark else "") for c in cols]


# ---------------------------------------------------------------------------------------------
# The terminal: rich tables folded to the terminal's width
# ---------------------------------------------------------------------------------------------

def terminal_width() -> int | None:
    """The width the terminal table folds to: ``COLUMNS`` when set, else the terminal's when stdout
    is one. None (never fold) when stdout is a file or a pipe: a file has no width, and a log
    (SLURM's, CI's) or ``> table.txt`` should hold every column of a row on one line, as the
    markdown and the CSV do, rather than a layout made for a screen nobody is looking at."""
    given = os.environ.get("COLUMNS", "")
    if given.isdigit() and int(given) > 0:
        return int(given)
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


def _block_width(widths: list[int]) -> int:
    return sum(widths) + 3 * len(widths) + 1  # rich's box: "│ cell " per column, then a closing "│"


def _fold(cols: list[Column], cells: list[list[str]], width: int | None) -> list[list[tuple[int, int]]]:
    """The blocks the columns fold into as ``(column index, width)``; each block starts with the
    variant column (index 0). A cell is never cut: a column is as wide as its widest cell (its
    header wraps at spaces); the headline columns come first, the others follow in their order."""
    from rich.cells import cell_len

    need = [max([cell_len(w) for w in c.head.split()] + [cell_len(row[i]) for row in cells])
            for i, c in enumerate(cols)]
    natural = [max(n, cell_len(c.head)) for n, c in zip(need, cols)]
    if width is None or _block_width(natural) <= width:
        return [list(enumerate(natural))]
    order = ([i for i, c in enumerate(cols) if i and c.role == HEADLINE]
             + [i for i, c in enumerate(cols) if i and c.role != HEADLINE])
    blocks = [[0]]
    for i in order:
        if len(blocks[-1]) > 1 and _block_width([need[j] for j in blocks[-1] + [i]]) > width:
            blocks.append([0])
        blocks[-1].append(i)
    sized = []
    for block in blocks:  # room left in a block unwraps headers, left to right
        spare = width - _block_width([need[j] for j in block])
        widths = []
        for j in block:
            extra = max(0, min(spare, natural[j] - need[j]))
            spare -= extra
            widths.append((j, need[j] + extra))
        sized.append(widths)
    return sized


def _terminal(t: TableLayout, width: int | None, path: str | None) -> tuple[list, int]:
    """The renderables of the terminal table (its blocks, the hint when folded, the caption) and
    the console width they are laid out for."""
    from rich.table import Table
    from rich.text import Text

    cols = columns(t)
    cells = []
    for row in t.rows:
        texts = [f"{text} {mark}".rstrip() for text, mark in _cells(cols, row)]
        texts[0] += " (baseline)" if row.is_baseline else ""
        cells.append(texts)
    blocks = _fold(cols, cells, width)
    out: list = []
    for k, block in enumerate(blocks):
        table = Table(title=title(t) if k == 0 else None)
        for j, w in block:
            table.add_column(cols[j].head, justify="left" if cols[j].left else "right", width=w)
        for row, texts in zip(t.rows, cells):
            table.add_row(*(texts[j] for j, _ in block),
                          style="bold" if row.is_baseline else ("red" if row.n == 0 else None))
        out += [table, ""] if k < len(blocks) - 1 else [table]
    if len(blocks) > 1:
        out.append(Text(f"(folded to fit; unfolded: ablate-table {path or 'SWEEP_DIR'} --all-columns)", style="dim"))
    out.append(Text(t.caption()))
    return out, width or max(80, max(_block_width([w for _, w in b]) for b in blocks))


def rich_table(t: TableLayout):
    """The whole terminal table, unfolded, as one ``rich.table.Table`` (baseline in bold)."""
    from rich.table import Table

    table = Table(title=title(t), caption=t.caption(), caption_justify="left")
    cols = columns(t)
    for c in cols:
        table.add_column(c.head, justify="left" if c.left else "right")
    for row in t.rows:
        cells = [f"{text} {mark}".rstrip() for text, mark in _cells(cols, row)]
        if row.is_baseline:
            cells[0] += " (baseline)"
        table.add_row(*cells, style="bold" if row.is_baseline else ("red" if row.n == 0 else None))
    return table


def print_terminal(t: TableLayout, all_columns: bool = False, path: str | None = None) -> None:
    """Print the terminal table to stdout, in colour on a terminal, folded to its width (unless
    ``all_columns``); ``path``: the sweep directory the hint names."""
    from rich.console import Console

    renderables, width = _terminal(t, None if all_columns else terminal_width(), path)
    console = Console(width=width)
    for item in renderables:
        console.print(item)


def _md_escape(text: str) -> str:
    return re.sub(r"([\\|*_`<>\[\]])", r"\\\1", text)


def to_markdown(t: TableLayout) -> str:
    cols = columns(t)
    lines = [f"**{_md_escape(title(t))}**", "",
             "| " + " | ".join(_md_escape(c.head) for c in cols) + " |",
             "|" + "|".join(":---" if c.left else "---:" for c in cols) + "|"]
    for row in t.rows:
        cells = [_md_escape(text) + (" " + _md_escape(mark) if mark else "") for text, mark in _cells(cols, row)]
        if row.is_baseline:
            cells[0] += " (baseline)"
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", _md_escape(t.caption()), ""]
    return "\n".join(lines)


_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                  "±": r"$\pm$", "–": "--", "<": r"$<$", ">": r"$>$", "Δ": r"$\Delta$", "×": r"$\times$",
                  "†": r"$^\dagger$", "‡": r"$^\ddagger$", "∞": r"$\infty$", "τ": r"$\tau$",
                  "μ": r"$\mu$", "→": r"$\rightarrow$", "α": r"$\alpha$"}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in str(text))


def latex_caption(t: TableLayout) -> str:
    """The LaTeX caption, one sentence (unescaped): what is compared, over how many seeds, against
    which baseline; the statistics are in the note under the table (``latex_note``)."""
    return f"{title(t)}. {t.latex_summary()}."


def latex_note(t: TableLayout, all_columns: bool = False) -> str:
    """The note under the LaTeX table (unescaped): the table's own (``TableLayout.latex_note``)."""
    return t.latex_note(all_columns)


# A column of a two-column paper (ICML, CVPR 234pt, ACL 219pt) at \small with \tabcolsep 4pt: ~4.2pt
# a character, ~2 characters of gap a column. In a one-column class table* is table, so a table
# estimated wider than this goes in a table* and is never wrong: it spans both columns or fits the page.
_ONE_COLUMN_CHARS = 56


def _fits_one_column(cols: list[Column], cells: list[list[str]]) -> bool:
    widths = [max([len(c.head)] + [len(row[i]) for row in cells]) for i, c in enumerate(cols)]
    return sum(widths) + 2 * len(cols) <= _ONE_COLUMN_CHARS


def to_latex(t: TableLayout, all_columns: bool = False) -> str:
    """The paper table: the headline and paper columns (variant, accuracy ± std with its marks,
    Δ [95% CI], evaluated lengths, lr, speed, params; a pivot's cells; a ladder's CMs and trend)
    in a ``table`` when it fits a column of a two-column paper, else a ``table*``; with
    ``all_columns`` every column, in a ``table*``."""
    cols = columns(t) if all_columns else [c for c in columns(t) if c.role != DETAIL]
    plain = [[text + mark for text, mark in _cells(cols, row)] for row in t.rows]
    env = "table" if not all_columns and _fits_one_column(cols, plain) else "table*"
    heads = [latex_escape(c.head[:1].upper() + c.head[1:]) for c in cols]
    lines = [
        r"% generated by ablate-table; needs \usepackage{booktabs}"
        + ("" if all_columns else "; every column (table*): ablate-table SWEEP_DIR -f latex --all-columns"),
        rf"\begin{{{env}}}[t]", r"\centering", r"\small", r"\setlength{\tabcolsep}{4pt}",
        rf"\caption{{{latex_escape(latex_caption(t))}}}",
        rf"\label{{tab:ablate-{re.sub(r'[^A-Za-z0-9_-]', '-', t.experiment or 'sweep')}}}",
        rf"\begin{{tabular}}{{{''.join('l' if c.left else 'r' for c in cols)}}}",
        r"\toprule", " & ".join(heads) + r" \\", r"\midrule",
    ]
    for row in t.rows:
        cells = [latex_escape(text).replace("\x00", r"$\times$") + (f"$^{{{mark}}}$" if mark else "")
                 for text, mark in _cells(cols, row, times="\x00")]
        if row.is_baseline and all_columns:  # the paper table names the baseline in its caption
            cells[0] += " (baseline)"
        lines.append(" & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\par\smallskip",
              rf"{{\footnotesize\raggedright {latex_escape(latex_note(t, all_columns))}\par}}", rf"\end{{{env}}}", ""]
    return "\n".join(lines)


def to_csv(t: TableLayout) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(csv_columns(t))
    for values in csv_rows(t):
        writer.writerow(["" if v is None else v for v in values])
    return buf.getvalue()


def render(table: TableLayout, fmt: str = "terminal", width: int | None = None, all_columns: bool = False,
           path: str | None = None) -> str:
    """The table as text: ``terminal`` (rich, plain text; folded to ``width``, by default the
    terminal's, ``terminal_width``; ``all_columns``: never folded; ``path``: the sweep directory the
    hint names), ``markdown``, ``latex`` (``all_columns``: every column, ``table*``) or ``csv``."""
    if fmt == "terminal":
        from rich.console import Console

        renderables, console_width = _terminal(table, None if all_columns else width or terminal_width(), path)
        console = Console(file=io.StringIO(), width=console_width, color_system=None)
        for item in renderables:
            console.print(item)
        return "\n".join(line.rstrip() for line in console.file.getvalue().splitlines()) + "\n"
    if fmt == "markdown":
        return to_markdown(table)
    if fmt == "latex":
        return to_latex(table, all_columns)
    if fmt == "csv":
        return to_csv(table)
    raise ValueError(f"unknown format {fmt!r}; valid: {', '.join(FORMATS)}")
