"""Sweep directory -> paper-style table (``ablate-table``).

A sweep directory holds one ``result.json`` per finished job (docs/internals.md, "Records").
This module turns those records into one row per variant:

* accuracy: mean ± sample std (ddof=1) over the ``ok`` runs of the variant, with a Welch
  t-test (``scipy.stats.ttest_ind(equal_var=False)``, two-sided) against the baseline's
  accuracies: ``*`` p<0.05, ``**`` p<0.01;
* one ``acc@L`` column per evaluated length for length-extrapolation sweeps;
* speed: tokens/s and its ratio to the baseline, from the runs' own per-run medians or, when a
  ``bench.json`` (``ablate-bench``) is given, from the interleaved benchmark;
* memory: peak bytes per training step (MiB and ratio to the baseline); params; run status.

Diverged and failed runs are counted in ``status`` and excluded from every mean.

Formats: ``render(table, "terminal" | "markdown" | "latex" | "csv")``; ``save_outputs`` writes
``table.{md,tex,csv,png}`` into the sweep directory; ``log_to_wandb`` logs the table and its plot
to the sweep's wandb group.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import re
import sys
import tempfile
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

FORMATS = ("terminal", "markdown", "latex", "csv")
STATUSES = ("ok", "diverged", "failed", "running")
SEED_KEYS = frozenset({"seed"})
SIGNIFICANCE_TEST = "Welch's two-sided t-test on accuracy vs the baseline (unequal variances)"

# The columns of the CSV and of the wandb.Table, in order (the first eight are DESIGN §1's).
CSV_COLUMNS = [
    "variant", "accuracy_mean", "accuracy_std", "n", "speed_ratio", "memory_ratio", "params",
    "status", "loss_mean", "tokens_per_s", "memory_mib", "p_value", "n_ok", "n_diverged",
    "n_failed", "speed_source", "metric", "n_running", "overrides", "is_baseline",
]


# ---------------------------------------------------------------------------------------------
# Records and variants
# ---------------------------------------------------------------------------------------------

def _natural_key(path: Path) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(path))]


def load_records(sweep_dir: str | Path) -> list[dict]:
    """Every ``result.json`` under ``sweep_dir`` (recursively), in job order.

    A file that does not parse is skipped with a warning (a job may be writing it, or may have
    died); jobs without a record are simply absent. Each record gets ``_path`` (its file) and
    ``_sweep_dir`` (the directory searched) so that ``build_table`` can find ``bench.json``.
    """
    sweep_dir = Path(sweep_dir)
    records = []
    for path in sorted(sweep_dir.rglob("result.json"), key=_natural_key):
        try:
            record = json.loads(path.read_text())
            if not isinstance(record, dict):
                raise ValueError(f"expected a JSON object, got {type(record).__name__}")
        except (OSError, ValueError) as err:
            warnings.warn(f"skipping {path}: {err}", stacklevel=2)
            continue
        record["_path"] = str(path)
        record["_sweep_dir"] = str(sweep_dir)
        records.append(record)
    return sort_records(records)


def sort_records(records: Iterable[dict]) -> list[dict]:
    """Records in sweep order: by ``job.num`` where known, then by path."""
    def key(record: dict) -> tuple:
        num = (record.get("job") or {}).get("num")
        num = num if isinstance(num, (int, float)) else math.inf
        return (num, _natural_key(Path(record.get("_path", ""))))
    return sorted(records, key=key)


def parse_overrides(overrides: Iterable[str] | None) -> dict[str, str]:
    """Hydra overrides -> ``{key: value}``, without ``seed``, ``experiment=`` and ``hydra/...``."""
    out: dict[str, str] = {}
    for item in overrides or []:
        item = str(item).strip()
        if "=" not in item:
            continue
        key, value = item.split("=", 1)
        key = key.lstrip("+~").strip()
        if key in SEED_KEYS or key == "experiment" or key == "hydra" or key.startswith(("hydra/", "hydra.")):
            continue
        out[key] = value.strip()
    return out


def variant_key(overrides: dict[str, Any]) -> str:
    """The canonical name of a variant: sorted ``key=value`` pairs joined by ``,``.

    ``bench.json`` is keyed by it, and so is an experiment's ``labels`` map.
    """
    return ",".join(f"{k}={v}" for k, v in sorted(overrides.items()))


def split_override_string(text: str) -> dict[str, str]:
    """``"a=1,b=2"`` or ``"a=1 b=2"`` -> ``{"a": "1", "b": "2"}`` (values may hold commas: ``[16,32]``)."""
    parts = re.split(r"[,\s]+(?=[+~]*[\w./-]+=)", text.strip())
    return parse_overrides(p for p in parts if p)


def _varying_keys(records: list[dict]) -> set[str]:
    parsed = [parse_overrides(r.get("overrides")) for r in records]
    keys = set().union(*parsed) if parsed else set()
    return {k for k in keys if len({p.get(k) for p in parsed}) > 1}


def variants(records: list[dict]) -> dict[str, dict[str, str]]:
    """The sweep's variants in sweep order: ``{variant_key: {key: value}}``.

    A variant is a job's overrides without ``seed``, ``experiment=``, ``hydra/...`` and the keys
    that are equal across every record (``ablate.bench`` uses this to time the same variants).
    """
    varying = _varying_keys(records)
    out: dict[str, dict[str, str]] = {}
    for record in sort_records(records):
        ov = {k: v for k, v in parse_overrides(record.get("overrides")).items() if k in varying}
        out.setdefault(variant_key(ov), ov)
    return out


def group_by_variant(records: list[dict]) -> dict[str, list[dict]]:
    """``{variant_key: [its records]}`` in sweep order (``ablate.bench`` times the same variants)."""
    varying = _varying_keys(records)
    groups: dict[str, list[dict]] = {key: [] for key in variants(records)}
    for record in records:
        ov = parse_overrides(record.get("overrides"))
        groups[variant_key({k: v for k, v in ov.items() if k in varying})].append(record)
    return groups


def load_bench(sweep_dir: str | Path) -> dict | None:
    """``<sweep_dir>/bench.json`` when it exists and parses, else None (with a warning if corrupt)."""
    path = Path(sweep_dir) / "bench.json"
    if not path.is_file():
        return None
    try:
        bench = json.loads(path.read_text())
        if not isinstance(bench, dict):
            raise ValueError("expected a JSON object")
        return bench
    except (OSError, ValueError) as err:
        warnings.warn(f"ignoring {path}: {err}", stacklevel=2)
        return None


# ---------------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------------

@dataclass
class Row:
    """One variant: its runs summarised (accuracy as a fraction 0-1; None when unknown)."""

    key: str                                   # variant_key of its overrides
    label: str
    overrides: dict[str, str]
    is_baseline: bool = False
    counts: dict[str, int] = field(default_factory=dict)   # status -> number of runs
    accuracies: list[float] = field(default_factory=list)  # of the ok runs
    accuracy_mean: float | None = None
    accuracy_std: float | None = None
    loss_mean: float | None = None
    tokens_per_s: float | None = None
    speed_ratio: float | None = None
    memory_bytes: float | None = None
    memory_ratio: float | None = None
    params: int | None = None
    p_value: float | None = None
    eval: dict[int, tuple[float | None, float | None]] = field(default_factory=dict)  # L -> (mean, std)

    @property
    def n(self) -> int:
        return self.counts.get("ok", 0)

    @property
    def memory_mib(self) -> float | None:
        return None if self.memory_bytes is None else self.memory_bytes / 2**20

    @property
    def status(self) -> str:
        order = [s for s in STATUSES if self.counts.get(s)] + sorted(set(self.counts) - set(STATUSES))
        return ", ".join(f"{self.counts[s]} {s}" for s in order) or "no runs"

    @property
    def mark(self) -> str:
        if self.p_value is None or self.is_baseline:
            return ""
        return "**" if self.p_value < 0.01 else "*" if self.p_value < 0.05 else ""


@dataclass
class SweepTable:
    rows: list[Row]
    baseline: str                      # the baseline's label
    baseline_key: str                  # ... and its variant_key
    metric: str                        # what "accuracy" means (records' metrics.metric)
    speed_source: str                  # "records" | "bench"
    speed_note: str                    # the caption's sentence on speed
    eval_lengths: list[int] = field(default_factory=list)  # training length first
    train_length: int | None = None
    experiment: str | None = None
    memory_source: str | None = None
    bench_rounds: int | None = None
    wandb_group: str | None = None
    wandb_project: str | None = None
    n_records: int = 0
    significance_test: str = SIGNIFICANCE_TEST

    @property
    def extra_lengths(self) -> list[int]:
        """Evaluated lengths shown besides the accuracy column (the training length is that column)."""
        if len(self.eval_lengths) < 2:
            return []
        return [L for L in self.eval_lengths if L != self.train_length]

    def caption(self) -> str:
        ns = sorted({r.n for r in self.rows}) or [0]
        n = f"n = {ns[0]}" if len(ns) == 1 else f"n = {ns[0]}–{ns[-1]}"
        parts = [
            f"{self.metric} on held-out data (%), mean ± sample std over seeds ({n} ok runs per variant)",
            f"* p<0.05, ** p<0.01: {self.significance_test}",
            self.speed_note,
            "memory: peak bytes per training step"
            + (f" ({self.memory_source})" if self.memory_source else "") + ", ratio to baseline",
            f"baseline: {self.baseline}",
            "diverged/failed runs are counted in status and excluded from means",
        ]
        if self.extra_lengths:
            trained = f"trained at length {self.train_length}; " if self.train_length else ""
            parts.insert(1, f"{trained}acc@L: {self.metric} at evaluation length L")
        return "; ".join(parts) + "."


def _finite(values: Iterable[Any]) -> list[float]:
    out = []
    for v in values:
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out.append(float(v))
    return out


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _std(values: list[float]) -> float | None:
    if len(values) < 2:
        return None
    m = sum(values) / len(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))


def welch_p(a: list[float], b: list[float]) -> float | None:
    """Two-sided Welch t-test p-value, None when either side has fewer than two runs or it is undefined."""
    if len(a) < 2 or len(b) < 2:
        return None
    from scipy import stats

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = float(stats.ttest_ind(a, b, equal_var=False).pvalue)
    return p if math.isfinite(p) else None


def _metric(record: dict, name: str) -> Any:
    return (record.get("metrics") or {}).get(name)


def _first(records: list[dict], getter) -> Any:
    for r in records:
        try:
            v = getter(r)
        except (AttributeError, KeyError, TypeError):
            v = None
        if v not in (None, ""):
            return v
    return None


def _experiment(records: list[dict]) -> dict:
    exp: dict = {}
    labels: dict = {}
    for r in records:
        e = r.get("experiment")
        if isinstance(e, dict):
            for k, v in e.items():
                exp.setdefault(k, v)
            labels.update({k: v for k, v in (e.get("labels") or {}).items() if k not in labels})
    exp["labels"] = labels
    return exp


def _label(ov: dict[str, str], labels: dict[str, str]) -> str:
    if not ov:
        return "default"
    pairs = [f"{k}={v}" for k, v in ov.items()]
    for candidate in (variant_key(ov), ",".join(pairs), " ".join(pairs)):
        if candidate in labels:
            return str(labels[candidate])
    if len(ov) == 1:
        (pair, value), = zip(pairs, ov.values())
        return str(labels.get(pair, value))
    return " ".join(str(labels.get(p, p)) for p in pairs)


def resolve_baseline(spec: str, rows: list[Row]) -> Row:
    """A row named by an override string (``qkv_sharing=independent``), a label, or a value."""
    spec = spec.strip()
    wanted = split_override_string(spec) if "=" in spec else {}
    if wanted:
        exact = [r for r in rows if r.overrides == wanted or r.key == variant_key(wanted)]
        if exact:
            return exact[0]
        subset = [r for r in rows if wanted.items() <= r.overrides.items()]
        if len(subset) == 1:
            return subset[0]
    for match in (lambda r: r.label == spec,
                  lambda r: r.key == spec,
                  lambda r: " ".join(r.overrides.values()) == spec or ",".join(r.overrides.values()) == spec,
                  lambda r: r.label.lower() == spec.lower()):
        found = [r for r in rows if match(r)]
        if len(found) == 1:
            return found[0]
    valid = "\n  ".join(f"{r.key or '(no overrides)'}  [{r.label}]" for r in rows)
    raise ValueError(f"unknown baseline {spec!r}; valid variants (override string [label]):\n  {valid}")


def _train_length(records: list[dict], lengths: list[int]) -> int | None:
    seq_len = _first(records, lambda r: r["config"]["task"]["seq_len"])
    if isinstance(seq_len, int) and seq_len in lengths:
        return seq_len
    for r in records:  # the evaluated length whose accuracy is the headline accuracy
        acc, ev = _metric(r, "accuracy"), _metric(r, "eval") or {}
        for L, m in ev.items():
            if isinstance(m, dict) and acc is not None and m.get("accuracy") == acc:
                try:
                    return int(L)
                except ValueError:
                    pass
    return None


def _bench_speeds(bench: dict, varying: set[str]) -> dict[str, float]:
    """``{row key: median tokens/s}``; bench keys may also carry the sweep's common overrides."""
    out = {}
    for key, entry in (bench.get("variants") or {}).items():
        tps = entry.get("tokens_per_s") if isinstance(entry, dict) else entry
        if isinstance(tps, dict):
            tps = tps.get("median")
        if _finite([tps]):
            ov = split_override_string(key)
            out[variant_key({k: v for k, v in ov.items() if k in varying})] = float(tps)
    return out


def build_table(records: list[dict], baseline: str | None = None, bench: dict | None = None) -> SweepTable:
    """Summarise records (``load_records``) into one row per variant, in sweep order.

    Baseline: ``baseline`` (an override string, a label or a value) > the records'
    ``experiment.baseline`` > the first variant. Speed: ``bench`` (``bench.json`` format), else a
    ``bench.json`` in the records' sweep directory, else the records' own tokens/s.
    Raises ValueError for an unknown ``baseline`` (listing the valid ones) or no records.
    """
    records = sort_records(records)
    if not records:
        raise ValueError("no records")
    if bench is None:
        sweep_dirs = {r.get("_sweep_dir") for r in records}
        if len(sweep_dirs) == 1 and None not in sweep_dirs:
            bench = load_bench(sweep_dirs.pop())
    groups = {(r.get("wandb") or {}).get("group") for r in records} - {None}
    if len(groups) > 1:
        warnings.warn(f"records come from several wandb groups ({', '.join(sorted(groups))}): "
                      "is PATH one sweep?", stacklevel=2)

    exp = _experiment(records)
    varying = _varying_keys(records)
    by_key = group_by_variant(records)

    lengths = sorted({int(L) for r in records for L in (_metric(r, "eval") or {}) if str(L).isdigit()})
    train_len = _train_length(records, lengths)
    if train_len is not None:
        lengths = [train_len] + [L for L in lengths if L != train_len]

    rows = []
    for key, ov in variants(records).items():
        runs = by_key[key]
        ok = [r for r in runs if r.get("status") == "ok"]
        row = Row(key=key, label=_label(ov, exp["labels"]), overrides=ov,
                  counts=dict(Counter(str(r.get("status") or "unknown") for r in runs)))
        row.accuracies = _finite(_metric(r, "accuracy") for r in ok)
        row.accuracy_mean, row.accuracy_std = _mean(row.accuracies), _std(row.accuracies)
        row.loss_mean = _mean(_finite(_metric(r, "loss") for r in ok))
        row.tokens_per_s = _mean(_finite(_metric(r, "tokens_per_s") for r in ok))
        row.memory_bytes = _mean(_finite(_metric(r, "peak_memory_bytes") for r in ok))
        params = _finite(_metric(r, "params") for r in ok) or _finite(_metric(r, "params") for r in runs)
        row.params = round(_mean(params)) if params else None
        for L in lengths:
            accs = _finite(((_metric(r, "eval") or {}).get(str(L)) or {}).get("accuracy") for r in ok)
            row.eval[L] = (_mean(accs), _std(accs))
        rows.append(row)

    spec = baseline or exp.get("baseline")
    base, base_of = _baselines(str(spec) if spec else None, rows, strict=bool(baseline))
    base.is_baseline = True
    for row in base_of.values():
        row.is_baseline = True

    speed_source, rounds = "records", None
    speed_note = "speed: per-run median tokens/s (separate runs), mean over seeds, ratio to baseline"
    if bench is not None:
        speeds = _bench_speeds(bench, varying)
        if not speeds.keys() & {r.key for r in rows}:
            warnings.warn("bench.json names none of this sweep's variants; using the runs' own speeds",
                          stacklevel=2)
        else:
            speed_source, rounds = "bench", bench.get("rounds")
            of = f", median of {rounds} rounds" if rounds else ", median over rounds"
            speed_note = f"speed: interleaved benchmark (ablate-bench){of}, ratio to baseline"
            for row in rows:
                row.tokens_per_s = speeds.get(row.key)

    for row in rows:
        row_base = base_of.get(row.key, base)
        row.speed_ratio = _ratio(row.tokens_per_s, row_base.tokens_per_s)
        row.memory_ratio = _ratio(row.memory_bytes, row_base.memory_bytes)
        row.p_value = None if row.is_baseline else welch_p(row.accuracies, row_base.accuracies)

    per_group = len(set(map(id, base_of.values()))) > 1
    return SweepTable(
        rows=rows, baseline=f"{spec} (per {', '.join(_other_keys(base_of, spec))})" if per_group else base.label,
        baseline_key=base.key,
        metric=str(_first(records, lambda r: r["metrics"]["metric"]) or "accuracy"),
        speed_source=speed_source, speed_note=speed_note, eval_lengths=lengths, train_length=train_len,
        experiment=exp.get("name"), memory_source=_first(records, lambda r: r["metrics"]["memory_source"]),
        bench_rounds=rounds, wandb_group=_first(records, lambda r: r["wandb"]["group"]),
        wandb_project=_first(records, lambda r: r["wandb"]["project"]), n_records=len(records),
    )


def _baselines(spec: str | None, rows: list[Row], strict: bool) -> tuple[Row, dict[str, Row]]:
    """The baseline row, and for sweeps over several keys each row's own baseline.

    A baseline that names only some swept keys (``qkv_sharing=independent`` in a sweep of
    task x qkv_sharing) matches several rows: each row is then compared with the matching row
    that has its other values (independent QKV on the same task)."""
    if not spec:
        return rows[0], {}
    wanted = split_override_string(spec) if "=" in spec else {}
    matches = [r for r in rows if wanted and wanted.items() <= r.overrides.items()]
    if len(matches) > 1:
        def rest(row: Row) -> dict[str, str]:
            return {k: v for k, v in row.overrides.items() if k not in wanted}
        base_of = {row.key: m for row in rows for m in matches if rest(m) == rest(row)}
        return matches[0], base_of
    try:
        return resolve_baseline(spec, rows), {}
    except ValueError:
        if strict:
            raise
        if len(rows) > 1:
            warnings.warn(f"experiment baseline {spec!r} has no records; using the first variant", stacklevel=2)
        return rows[0], {}


def _other_keys(base_of: dict[str, Row], spec: str) -> list[str]:
    wanted = split_override_string(spec)
    return sorted({k for row in base_of.values() for k in row.overrides if k not in wanted})


def _ratio(value: float | None, base: float | None) -> float | None:
    return value / base if value is not None and base else None


# ---------------------------------------------------------------------------------------------
# Formats
# ---------------------------------------------------------------------------------------------

DASH = "–"


def _pct(mean: float | None, std: float | None, pm: str = " ± ") -> str:
    if mean is None:
        return DASH
    return f"{100 * mean:.1f}" + (f"{pm}{100 * std:.1f}" if std is not None else "")


def _x(ratio: float | None, times: str = "x") -> str:
    return DASH if ratio is None else f"{ratio:.2f}{times}"


def _si(value: float | None, digits: int = 1) -> str:
    if value is None:
        return DASH
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= div:
            return f"{value / div:.{digits}f}{unit}"
    return f"{value:.0f}"


def _headers(t: SweepTable) -> list[str]:
    acc = f"acc@{t.train_length} (%)" if t.extra_lengths and t.train_length else "accuracy (%)"
    return (["variant", acc] + [f"acc@{L} (%)" for L in t.extra_lengths]
            + ["loss", "speed", "tokens/s", "memory", "MiB", "params", "runs"])


def _cells(t: SweepTable, row: Row, pm: str = " ± ", times: str = "x") -> list[str]:
    """A row's human-readable cells (unescaped), in ``_headers`` order."""
    acc = _pct(row.accuracy_mean, row.accuracy_std, pm)
    return ([row.label, acc, *(_pct(*row.eval.get(L, (None, None)), pm) for L in t.extra_lengths),
             DASH if row.loss_mean is None else f"{row.loss_mean:.3f}",
             _x(row.speed_ratio, times), _si(row.tokens_per_s), _x(row.memory_ratio, times),
             DASH if row.memory_mib is None else f"{row.memory_mib:.1f}", _si(row.params, 2), row.status])


def _title(t: SweepTable) -> str:
    return f"Ablation: {t.experiment}" if t.experiment else "Ablation"


def rich_table(t: SweepTable):
    """The terminal table as a ``rich.table.Table`` (baseline in bold)."""
    from rich.table import Table

    table = Table(title=_title(t), caption=t.caption(), caption_justify="left")
    for i, h in enumerate(_headers(t)):
        table.add_column(h, justify="left" if i == 0 or h == "runs" else "right")
    for row in t.rows:
        cells = _cells(t, row)
        cells[1] = f"{cells[1]} {row.mark}".rstrip()
        if row.is_baseline:
            cells[0] += " (baseline)"
        bad = row.n == 0
        table.add_row(*cells, style="bold" if row.is_baseline else ("red" if bad else None))
    return table


def _md_escape(text: str) -> str:
    return re.sub(r"([\\|*_`<>\[\]])", r"\\\1", text)


def to_markdown(t: SweepTable) -> str:
    headers = _headers(t)
    lines = [f"**{_md_escape(_title(t))}**", "",
             "| " + " | ".join(_md_escape(h) for h in headers) + " |",
             "|" + "|".join(":---" if i == 0 or h == "runs" else "---:" for i, h in enumerate(headers)) + "|"]
    for row in t.rows:
        cells = [_md_escape(c) for c in _cells(t, row)]
        if row.mark:
            cells[1] += " " + _md_escape(row.mark)
        if row.is_baseline:
            cells[0] += " (baseline)"
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", _md_escape(t.caption()), ""]
    return "\n".join(lines)


_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                  "±": r"$\pm$", "–": "--", "<": r"$<$", ">": r"$>$"}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in str(text))


def to_latex(t: SweepTable) -> str:
    headers = _headers(t)
    heads = [latex_escape(h[:1].upper() + h[1:]) for h in headers]
    align = "l" + "r" * (len(headers) - 2) + "l"
    lines = [
        f"% generated by ablate-table; needs \\usepackage{{booktabs}}",
        r"\begin{table}[t]", r"\centering", r"\small",
        rf"\caption{{{latex_escape(_title(t))}. {latex_escape(t.caption())}}}",
        rf"\label{{tab:ablate-{re.sub(r'[^A-Za-z0-9_-]', '-', t.experiment or 'sweep')}}}",
        rf"\begin{{tabular}}{{{align}}}", r"\toprule", " & ".join(heads) + r" \\", r"\midrule",
    ]
    for row in t.rows:
        cells = [latex_escape(c).replace("\x00", r"$\times$") for c in _cells(t, row, times="\x00")]
        if row.mark:
            cells[1] += f"$^{{{row.mark}}}$"
        if row.is_baseline:
            cells[0] += " (baseline)"
        lines.append(" & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}", ""]
    return "\n".join(lines)


def csv_columns(t: SweepTable) -> list[str]:
    cols = list(CSV_COLUMNS)
    for L in t.eval_lengths:
        cols += [f"acc@{L}", f"acc@{L}_std"]
    return cols


def csv_rows(t: SweepTable) -> list[list[Any]]:
    """The table as raw values (None where unknown), in ``csv_columns`` order."""
    out = []
    for r in t.rows:
        values = [r.label, r.accuracy_mean, r.accuracy_std, r.n, r.speed_ratio, r.memory_ratio, r.params,
                  r.status, r.loss_mean, r.tokens_per_s, r.memory_mib, r.p_value, r.n,
                  r.counts.get("diverged", 0), r.counts.get("failed", 0), t.speed_source, t.metric,
                  r.counts.get("running", 0), r.key, r.is_baseline]
        for L in t.eval_lengths:
            values += list(r.eval.get(L, (None, None)))
        out.append(values)
    return out


def to_csv(t: SweepTable) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(csv_columns(t))
    for values in csv_rows(t):
        writer.writerow(["" if v is None else v for v in values])
    return buf.getvalue()


def render(table: SweepTable, fmt: str = "terminal", width: int = 200) -> str:
    """The table as text: ``terminal`` (rich, plain text), ``markdown``, ``latex`` or ``csv``."""
    if fmt == "terminal":
        from rich.console import Console

        console = Console(file=io.StringIO(), record=True, width=width, color_system=None)
        console.print(rich_table(table))
        return console.export_text()
    if fmt == "markdown":
        return to_markdown(table)
    if fmt == "latex":
        return to_latex(table)
    if fmt == "csv":
        return to_csv(table)
    raise ValueError(f"unknown format {fmt!r}; valid: {', '.join(FORMATS)}")


# ---------------------------------------------------------------------------------------------
# Plot, files, wandb
# ---------------------------------------------------------------------------------------------

def plot(table: SweepTable, path: str | Path) -> Path:
    """Three panels (accuracy ± std, speed ratio, memory ratio), the baseline highlighted; PNG."""
    from matplotlib.figure import Figure  # no pyplot: no global state, Agg canvas

    labels = [r.label for r in table.rows]
    xs = list(range(len(labels)))
    colors = ["tab:orange" if r.is_baseline else "tab:blue" for r in table.rows]
    edges = ["black" if r.is_baseline else "none" for r in table.rows]
    fig = Figure(figsize=(max(11.0, 3 * (1 + 0.6 * len(labels))), 4.5), layout="constrained")
    ax_acc, ax_speed, ax_mem = fig.subplots(1, 3)

    def nz(v):
        return float("nan") if v is None else v

    if table.extra_lengths:  # grouped bars: one per evaluated length, the baseline outlined
        lengths = ([table.train_length] if table.train_length else []) + table.extra_lengths
        width = 0.8 / len(lengths)
        shades = [f"C{j}" for j in range(len(lengths))]
        for j, L in enumerate(lengths):
            means = [nz(r.eval.get(L, (None, None))[0]) * 100 for r in table.rows]
            stds = [nz(r.eval.get(L, (None, None))[1]) * 100 for r in table.rows]
            ax_acc.bar([x - 0.4 + width * (j + 0.5) for x in xs], means, width, yerr=stds, capsize=2,
                       label=f"@{L}", color=shades[j], edgecolor=edges, linewidth=1.5)
        ax_acc.set_ylim(0, 118)
        ax_acc.legend(fontsize="small", ncols=len(lengths), loc="upper center", frameon=False)
    else:
        ax_acc.bar(xs, [nz(r.accuracy_mean) * 100 for r in table.rows],
                   yerr=[nz(r.accuracy_std) * 100 for r in table.rows], capsize=4, color=colors)
    ax_acc.set_title(f"{table.metric} (%), mean ± std")
    for ax, attr, title in ((ax_speed, "speed_ratio", f"speed ratio ({table.speed_source})"),
                            (ax_mem, "memory_ratio", "peak memory ratio")):
        ax.bar(xs, [nz(getattr(r, attr)) for r in table.rows], color=colors)
        ax.axhline(1.0, color="gray", linewidth=0.8, linestyle="--")
        ax.set_title(title)
    for ax in (ax_acc, ax_speed, ax_mem):
        ax.set_xticks(xs, labels, rotation=30, ha="right", fontsize="small")
        for tick, row in zip(ax.get_xticklabels(), table.rows):
            tick.set_fontweight("bold" if row.is_baseline else "normal")
    fig.suptitle(f"{_title(table)} (baseline: {table.baseline})")
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".png")
    os.close(fd)
    try:
        fig.savefig(tmp, format="png", dpi=120)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def _write_atomic(path: Path, text: str) -> Path:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def save_outputs(table: SweepTable, sweep_dir: str | Path) -> dict[str, Path]:
    """Write ``table.md``, ``table.tex``, ``table.csv`` and ``table.png`` into ``sweep_dir`` atomically."""
    d = Path(sweep_dir)
    d.mkdir(parents=True, exist_ok=True)
    return {
        "markdown": _write_atomic(d / "table.md", to_markdown(table)),
        "latex": _write_atomic(d / "table.tex", to_latex(table)),
        "csv": _write_atomic(d / "table.csv", to_csv(table)),
        "png": plot(table, d / "table.png"),
    }


def log_to_wandb(table: SweepTable, sweep_dir: str | Path, png_path: str | Path | None) -> str | None:
    """One ``job_type=table`` run in the sweep's wandb group: a ``wandb.Table`` plus the plot.

    Returns the run's local directory, or None (with a warning) when wandb could not log: the
    table files never depend on wandb.
    """
    from ablate.tracking import init_run, run_dir

    group = table.wandb_group or Path(sweep_dir).resolve().name
    config = {"baseline": table.baseline, "baseline_key": table.baseline_key, "speed_source": table.speed_source,
              "metric": table.metric, "experiment": table.experiment, "sweep_dir": str(sweep_dir),
              "significance_test": table.significance_test, "eval_lengths": table.eval_lengths}
    try:
        import wandb

        run = init_run(name=f"table-{group}", group=group, job_type="table", config=config, dir=sweep_dir,
                       project=table.wandb_project, tags=["table"])
    except Exception as err:  # noqa: BLE001 - wandb must never break the table
        warnings.warn(f"wandb: could not start the table run: {err}", stacklevel=2)
        return None
    try:
        data = [[v if not isinstance(v, float) or math.isfinite(v) else None for v in row] for row in csv_rows(table)]
        payload: dict[str, Any] = {"ablation_table": wandb.Table(columns=csv_columns(table), data=data)}
        if png_path is not None and Path(png_path).is_file():
            payload["ablation_plot"] = wandb.Image(str(png_path), caption=table.caption())
        run.log(payload)
        run.summary.update({
            "baseline": table.baseline, "baseline_key": table.baseline_key, "speed_source": table.speed_source,
            "speed_note": table.speed_note, "metric": table.metric, "significance_test": table.significance_test,
            "n_variants": len(table.rows), "n_runs": table.n_records,
        })
        return run_dir(run)
    except Exception as err:  # noqa: BLE001
        warnings.warn(f"wandb: could not log the table: {err}", stacklevel=2)
        return None
    finally:
        run.finish()


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------

def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ablate-table", description="Paper-style table of a (finished or partly "
                                "finished) ablation sweep, built from its result.json records.")
    p.add_argument("path", help="sweep directory (searched recursively for result.json)")
    p.add_argument("--format", "-f", choices=FORMATS, default="terminal", help="output format (default: terminal)")
    p.add_argument("--baseline", "-b", help="baseline variant: override string (qkv_sharing=independent), "
                   "label, or value (independent); default: the experiment's baseline, else the first variant")
    p.add_argument("--save", action="store_true", help="write table.{md,tex,csv,png} into the sweep directory")
    p.add_argument("--wandb", action=argparse.BooleanOptionalAction, default=None,
                   help="log the table and plot to the sweep's wandb group, as a run of job_type 'table' "
                   "(default: on when the sweep's runs were logged to wandb)")
    p.add_argument("--bench", action="store_true", help="time all variants interleaved in this process "
                   "(ablate-bench) and use that as the speed source")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    path = Path(args.path)
    if not path.is_dir():
        print(f"ablate-table: {path} is not a directory", file=sys.stderr)
        return 2
    records = load_records(path)
    if not records:
        print(f"ablate-table: no result.json under {path}", file=sys.stderr)
        return 2
    bench = None
    if args.bench:
        from ablate.bench import bench_sweep

        try:
            bench = bench_sweep(path)
        except Exception as err:  # noqa: BLE001 - report, do not dump a traceback
            print(f"ablate-table: --bench failed: {type(err).__name__}: {err}", file=sys.stderr)
            return 1
    try:
        table = build_table(records, baseline=args.baseline, bench=bench)
    except ValueError as err:
        print(f"ablate-table: {err}", file=sys.stderr)
        return 2

    if args.format == "terminal":
        from rich.console import Console

        Console().print(rich_table(table))
    else:
        sys.stdout.write(render(table, args.format))

    png = None
    if args.save:
        written = save_outputs(table, path)
        if args.bench and bench is not None:  # keep the figures the saved table was built from
            written["bench"] = _write_atomic(path / "bench.json", json.dumps(bench, indent=2) + "\n")
        png = written["png"]
        print("wrote " + ", ".join(str(p) for p in written.values()), file=sys.stderr)
    if args.wandb or (args.wandb is None and table.wandb_group):
        with tempfile.TemporaryDirectory() as tmp:
            png = png or plot(table, Path(tmp) / "table.png")
            run = log_to_wandb(table, path, png)
        if run:
            print(f"wandb: table run in {run}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
