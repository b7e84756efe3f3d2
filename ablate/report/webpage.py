"""``report.html``: one self-contained page per sweep, for a person to open in any browser, offline.

The page holds, from the same records and ``SweepTable`` as every other format:

* the table with the paper table's columns (as ``table.md``), and under it every column of
  ``table.csv`` with its raw values; a click on a header sorts by that column (a few lines of
  inline JavaScript; ``report.html#sort=TABLE.COLUMN[.desc]`` opens it sorted, e.g. ``#sort=paper.1.desc``);
* the figures (``table.png`` or a ladder's ``scaling.png``, ``curves.png``, ``lr.png``, and any
  other the table draws) embedded as base64 PNG, each under its layout's caption of it;
* for a seq2seq task, sample generations: each variant's first test rows as it decodes them;
* one line per run: its variant, seed, status, error, figures and links to its job directory,
  ``result.json`` and wandb run directory (relative links: they work while the page sits in the
  sweep directory);
* the caption, one sentence per line, and what each statistic is.

No script, style, font or image comes from elsewhere: the file alone is the report.
"""

from __future__ import annotations

import base64
import os
import re
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ablate.record import Record, sort_records
from ablate.report.formats import DASH, columns, csv_columns, csv_rows, title
from ablate.report.frames import run_places, run_rows
from ablate.report.layout import TableLayout
from ablate.report.record_fields import stopped_early
from ablate.report.records import LoadedSweep

REPORT_FILE = "report.html"

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px auto; max-width: 1400px; padding: 0 16px; color: #222; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 32px; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 8px 0; } .wide { overflow-x: auto; }
th, td { padding: 3px 8px; border-bottom: 1px solid #eee; text-align: right; white-space: nowrap; }
th { background: #f4f4f4; cursor: pointer; user-select: none; position: sticky; top: 0; }
th[aria-sort=ascending]::after { content: " \\25B2"; } th[aria-sort=descending]::after { content: " \\25BC"; }
td.left, th.left { text-align: left; } tr.baseline td { font-weight: 600; background: #fffbe6; }
td.error { white-space: pre-wrap; text-align: left; max-width: 480px; font-family: monospace; font-size: 12px; }
.status-ok { color: #1a7f37; } .status-diverged, .status-failed { color: #cf222e; font-weight: 600; }
.status-running, .status-interrupted { color: #9a6700; }
figure { margin: 16px 0; } figure img { max-width: 100%; border: 1px solid #eee; }
.meta, figcaption, .caption { color: #555; } dt { font-weight: 600; margin-top: 6px; }
"""

# Sort a table by a column: numbers (a cell's data-sort, else its text) before text, missing last.
SCRIPT = """
function sortTable(table, col, desc) {
  const body = table.tBodies[0], rows = Array.from(body.rows);
  const key = row => {
    const cell = row.cells[col], raw = cell.dataset.sort !== undefined ? cell.dataset.sort : cell.textContent.trim();
    const num = Number(raw);
    return raw === "" ? [2, ""] : Number.isFinite(num) ? [0, num] : [1, raw];
  };
  rows.sort((a, b) => {
    const x = key(a), y = key(b);
    if (x[0] !== y[0]) return x[0] - y[0];
    const order = x[0] === 0 ? x[1] - y[1] : String(x[1]).localeCompare(String(y[1]));
    return desc ? -order : order;
  });
  rows.forEach(row => body.appendChild(row));
  table.tHead.querySelectorAll("th").forEach(th => th.setAttribute("aria-sort",
    th.cellIndex === col ? (desc ? "descending" : "ascending") : "none"));
}
document.querySelectorAll("table.sortable th").forEach(th => th.addEventListener("click",
  () => sortTable(th.closest("table"), th.cellIndex, th.getAttribute("aria-sort") === "ascending")));
const asked = decodeURIComponent(location.hash).match(/^#sort=([\\w-]+)\\.(\\d+)(\\.desc)?$/);
if (asked && document.getElementById(asked[1])) sortTable(document.getElementById(asked[1]), +asked[2], !!asked[3]);
"""

_NUMBER = re.compile(r"\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)([kMG]?)")
_SCALE = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9}  # formats' SI suffixes


def sort_value(text: str) -> str:
    """The number a human cell starts with (``48.1 ± 0.5 *`` -> 48.1, ``335.36k`` -> 335360), as text
    for the page's sort; "" for a missing value (``–``); the text itself otherwise."""
    if text in ("", DASH):
        return ""
    m = _NUMBER.match(text)
    return text if m is None else repr(float(m.group(1)) * _SCALE[m.group(2)])


def _cell(value: Any, left: bool = False, sort: str | None = None, css: str = "") -> str:
    classes = " ".join(c for c in ("left" if left else "", css) if c)
    attrs = (f' class="{classes}"' if classes else "") + (f' data-sort="{escape(sort)}"' if sort is not None else "")
    return f"<td{attrs}>{value}</td>"


def _head(names: list[str], left: set[int]) -> str:
    return "<thead><tr>" + "".join(f'<th{" class=left" if i in left else ""} aria-sort="none">{escape(n)}</th>'
                                   for i, n in enumerate(names)) + "</tr></thead>"


def paper_table(table: TableLayout) -> str:
    """The human columns of ``ablate.report.formats.columns`` (as ``table.md``), sortable."""
    cols = columns(table)
    body = []
    for row in table.rows:
        cells = []
        for i, c in enumerate(cols):
            text, mark = c.text(row, "x"), c.mark(row) if c.mark else ""
            shown = escape(text) + (f" <b>{escape(mark)}</b>" if mark else "")
            if i == 0 and row.is_baseline:
                shown += " (baseline)"
            cells.append(_cell(shown, c.left, None if c.left else sort_value(text)))
        body.append(f'<tr{" class=baseline" if row.is_baseline else ""}>' + "".join(cells) + "</tr>")
    left = {i for i, c in enumerate(cols) if c.left}
    return (f'<div class="wide"><table id="paper" class="sortable">{_head([c.head for c in cols], left)}'
            f'<tbody>{"".join(body)}</tbody></table></div>')


def _raw(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def all_columns_table(table: TableLayout) -> str:
    """Every column of ``table.csv``, raw values (fractions, not percent), sortable."""
    names = csv_columns(table)
    body = "".join("<tr>" + "".join(_cell(escape(_raw(v)), isinstance(v, str), _raw(v)) for v in values) + "</tr>"
                   for values in csv_rows(table))
    return (f'<div class="wide"><table id="all" class="sortable">{_head(names, {0})}<tbody>{body}</tbody>'
            "</table></div>")


#: the URL schemes a link may have; a relative path has none
SAFE_SCHEMES = ("http", "https", "file")


def safe_href(url: str) -> str | None:
    """``url`` when a browser follows it as a relative path or an http(s)/file URL, else None: a
    record is a file anyone can edit, and ``javascript:`` (or ``data:``, ...) in an href would run."""
    if any(ord(ch) < 32 for ch in url):  # browsers drop tabs and newlines inside a scheme: java\tscript:
        return None
    scheme = urlsplit(url).scheme.lower()
    return url if scheme in SAFE_SCHEMES or (not scheme and ":" not in url.split("/", 1)[0]) else None


def _link(target: str | None, sweep_dir: Path, text: str) -> str:
    """A link relative to the page (it sits in ``sweep_dir``); the path as text when it is gone or
    would not be a safe link (``safe_href``)."""
    if not target or not Path(target).exists():
        return escape(text) if target else DASH
    rel = Path(os.path.relpath(Path(target).resolve(), sweep_dir.resolve())).as_posix()
    href = safe_href(rel + ("/" if Path(target).is_dir() else ""))
    return escape(text) if href is None else f'<a href="{escape(href)}">{escape(text)}</a>'


def _number_cell(value: Any, fmt: str, scale: float = 1.0) -> str:
    """A numeric cell (``value * scale`` shown with ``fmt``), sorted by its value; ``–`` when missing."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
        return _cell(format(value * scale, fmt), sort=repr(float(value)))
    return _cell(DASH, sort="")


def runs_table(records: list[Record], table: TableLayout, sweep_dir: Path) -> str:
    """One row per run: its variant, seed, status, error, figures and links to its files."""
    heads = ["job", "variant", "seed", "status", "accuracy (%)", "loss", "steps", "wall time (s)", "error",
             "directory", "record", "wandb"]
    body = []
    for record, run, (_, place) in zip(records, run_rows(records, table), run_places(records, table)):
        status = str(run.get("status") or "?")
        stop = stopped_early(record)
        shown = f"{status} (stopped early at step {stop.get('step', '?')})" if stop is not None else status
        # a ladder's rung or a pivot's column beside the row's label: the row alone does not name the run
        label = f"{place.label} · {place.column}" if place.column else place.label
        cells = [_cell(escape(_raw(run["job"]))), _cell(escape(label), left=True), _cell(escape(_raw(run["seed"]))),
                 _cell(escape(shown), left=True, css=f"status-{status}"),
                 _number_cell(run.get("accuracy"), ".1f", 100), _number_cell(run.get("loss"), ".3f"),
                 _number_cell(run.get("steps"), ".0f"), _number_cell(run.get("wall_time_s"), ".1f"),
                 _cell(escape(str(run["error"])) if run.get("error") else "", css="error"),
                 _cell(_link(run["job_dir"], sweep_dir, Path(run["job_dir"] or "?").name), left=True),
                 _cell(_link(str(Path(run["job_dir"]) / "result.json") if run["job_dir"] else None, sweep_dir,
                             "result.json"), left=True),
                 _cell(_link(run.get("wandb_dir"), sweep_dir, "run") if run.get("wandb_dir") else DASH, left=True)]
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f'<div class="wide"><table id="runs" class="sortable">{_head(heads, {1, 3, 8, 9, 10, 11})}'
            f'<tbody>{"".join(body)}</tbody></table></div>')


def samples_html(records: list[Record], table: TableLayout) -> str:
    """A seq2seq sweep's decodings: per variant, its first run's test rows (source, target, what the
    model wrote greedily); empty for other tasks."""
    shown: dict[str, Record] = {}
    for record, (_, place) in zip(records, run_places(records, table)):
        if record.metrics.samples:
            shown.setdefault(f"{place.label} · {place.column}" if place.column else place.label, record)
    if not shown:
        return ""
    body = []
    for label, record in shown.items():
        for i, sample in enumerate(record.metrics.samples):
            right = "ok" if sample.decoded == sample.target else "failed"
            body.append("<tr>" + (_cell(escape(label), left=True) if i == 0 else _cell("")) +
                        _cell(f"<code>{escape(sample.source)}</code>", left=True) +
                        _cell(f"<code>{escape(sample.target)}</code>", left=True) +
                        _cell(f"<code>{escape(sample.decoded)}</code>", left=True, css=f"status-{right}") + "</tr>")
    return ('<section id="samples"><h2>Sample generations</h2><p>The first test rows, decoded greedily by each '
            "variant's first run (green: the target exactly; red: not).</p>"
            f'<table id="sample-table">{_head(["variant", "source", "target", "decoded"], {0, 1, 2, 3})}'
            f'<tbody>{"".join(body)}</tbody></table></section>')


def figures_html(table: TableLayout, figures: dict[str, Path]) -> str:
    """The PNGs embedded, each with its layout's caption (``Figure.caption``; none for a file the
    layout does not draw)."""
    captions = {figure.file: figure.caption for figure in table.figures()}
    out = []
    for path in figures.values():
        data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
        name = Path(path).name
        out.append(f'<figure><img src="data:image/png;base64,{data}" alt="{escape(name)}">'
                   f"<figcaption><b>{escape(name)}</b>: {escape(captions.get(name, ''))}</figcaption></figure>")
    return "".join(out) or "<p>No figure: the records hold nothing to draw.</p>"


def caption_parts(caption: str) -> list[str]:
    """The caption's "; "-joined notes, one each (a "; " inside parentheses stays in its note)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(caption):
        depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(ch, 0)
        if depth == 0 and caption.startswith("; ", i):
            parts.append(caption[start:i])
            start = i + 2
    return [p for p in [*parts, caption[start:].rstrip(".")] if p]


def statistics_html(table: TableLayout) -> str:
    """The caption, one note per line, then what the table's statistics are."""
    parts = caption_parts(table.caption())
    out = "<ul>" + "".join(f"<li>{escape(p)}</li>" for p in parts) + "</ul>"
    terms = table.statistics_terms()
    return out + ("<dl>" + "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in terms) + "</dl>"
                  if terms else "")


def to_html(table: TableLayout, records: list[Record] | LoadedSweep | None, sweep_dir: str | Path,
            figures: dict[str, Path]) -> str:
    """The page (see the module's docstring) of any layout; ``records``: the sweep's (a
    ``LoadedSweep``, or None for the one the table was built from); ``figures``: name -> PNG file,
    shown in this order."""
    sweep_dir = Path(sweep_dir)
    if records is None:
        records = table.sweep.records if table.sweep is not None else []
    records = sort_records(records.records if isinstance(records, LoadedSweep) else records)
    counts: dict[str, int] = {}
    for r in records:
        counts[str(r.status)] = counts.get(str(r.status), 0) + 1
    runs = ", ".join(f"{n} {status}" for status, n in counts.items())
    name = escape(title(table))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{name}</title><style>{STYLE}</style></head>
<body>
<h1>{name}</h1>
<p class="meta">{escape(str(sweep_dir.resolve()))} · {len(records)} runs ({escape(runs)}) · click a column's
header to sort by it</p>
<section id="table-section"><h2>Table</h2>{paper_table(table)}
<p class="caption">{escape(table.caption())}</p>
<details><summary>All columns (table.csv: raw values, accuracy as a fraction)</summary>{all_columns_table(table)}</details>
</section>
<section id="figures"><h2>Figures</h2>{figures_html(table, figures)}</section>
{samples_html(records, table)}
<section id="runs-section"><h2>Runs</h2>{runs_table(records, table, sweep_dir)}</section>
<section id="statistics"><h2>How to read the numbers</h2>{statistics_html(table)}</section>
<script>{SCRIPT}</script>
</body></html>
"""
