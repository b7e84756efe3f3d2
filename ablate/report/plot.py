"""The table's figures (PNG, matplotlib without pyplot: no global state, Agg canvas).

* ``plot``: ``table.png``: per variant its accuracy (mean ± std and each seed, or against evaluation
  length), Δ to the baseline with its 95% CI and the marks (seeds run in rounds: its repeated CI,
  the verdicts and the ±mde band), and the speed and memory ratios (a pivoted table: accuracy per
  column value and the average per row), the baseline in bold;
* ``curves``: ``curves.png`` (``curves_figure``): validation loss against training FLOPs spent
  (``metrics.history``), one line per variant, the mean over seeds (a marker per evaluation) with a
  band from the lowest to the highest seed; compute on the x axis, so variants of different cost
  compare at equal compute (Kaplan et al. 2020). Fewer than ``MIN_CURVE_POINTS`` evaluations per run
  are drawn as points, unjoined, and the figure says so;
* ``flat_figures``: all of these a flat table's records support (``SweepTable.draw_figures``); a
  ladder's one figure, ``scaling.png``, is ``ladder_view.scaling_plot``;
* ``lr_plot``: ``lr.png`` of a tuned sweep: the validation metric each variant reached at each lr
  of the grid (``sweep.json``'s ``tune.scores``), log-x, its chosen lr marked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from ablate.report.caption import title
from ablate.report.layout import Figure, save_png
from ablate.report.ladder_view import scaling_plot  # a ladder's figure; imported from here too (publish)
from ablate.report.stats import finite
from ablate.report.rows import Row
from ablate.report.table_columns import ROUNDS_MARK, verdict_text

#: ``ablate.report.table.SweepTable``, which draws its figures here: not imported (no import cycle)
SweepTable = Any


def _nz(v: float | None) -> float:
    return float("nan") if v is None else v


def std_bars(means: list[float | None], stds: list[float | None], floor: float = 0.0) -> list[list[float]]:
    """``xerr``/``yerr`` in points of mean ± std, each arm cut at the metric's range (``floor`` … 1:
    no score passes 100 %, and only a correlation goes below 0) so that seeds split 1 / 99 / 98 draw a
    bar that ends at 100, not beyond it."""
    low, high = [], []
    for m, sd in zip(means, stds):
        m, sd = _nz(m), _nz(sd)
        low.append(max(0.0, min(sd, m - floor)) * 100 if sd == sd and m == m else float("nan"))
        high.append(max(0.0, min(sd, 1.0 - m)) * 100 if sd == sd and m == m else float("nan"))
    return [low, high]


def score_floor(values: Iterable[float]) -> float:
    """The lowest a score can be: -1 for a metric that went below 0 in some run (a correlation), else 0."""
    return -1.0 if any(v < 0 for v in values) else 0.0


def _panels(table: SweepTable) -> list[tuple[str, list[Row]]]:
    """The variants to draw, per panel: one panel, or one per column of a pivoted table."""
    if not table.pivoted:
        return [("", list(table.rows))]
    return [(f"{table.columns_key}={table.column_label(v)}", [r.cells[v] for r in table.rows if v in r.cells])
            for v in table.column_values]


def _row_label(table: SweepTable, row: Row) -> str:
    """A variant's name in a legend: a pivoted table's cell goes by its row's label."""
    if table.pivoted:
        for r in table.rows:
            if row in r.cells.values():
                return r.label
    return row.label


def metric_name(metric: str) -> str:
    """A metric as a reader reads it: ``next_token_accuracy`` -> ``next-token accuracy``."""
    return metric.replace("next_token", "next-token").replace("_", " ")


def _marks(row: Row) -> str:
    p = row.p_corrected
    return "" if p is None else "**" if p < 0.01 else "*" if p < 0.05 else ""


def _variant_axis(ax, table: SweepTable, labels: list[str], named: bool = True) -> None:
    """Variants down the y axis, top to bottom in table order, the baseline's name in bold (named:
    the panel that shows the names; the others share its axis)."""
    ax.set_yticks(range(len(labels)), labels, fontsize="small")
    ax.set_ylim(len(labels) - 0.5, -0.5)
    for tick, row in zip(ax.get_yticklabels(), table.rows):
        tick.set_fontweight("bold" if row.is_baseline else "normal")
    ax.tick_params(axis="y", labelleft=named)
    ax.grid(axis="x", alpha=0.3)


def _pivot_figure(table: SweepTable):
    """Accuracy per column value (a dot per column, ± std) and the row's average (a diamond), one line
    of dots per row, on an axis fitted to the values; the baseline row in bold."""
    from matplotlib.figure import Figure

    labels = [r.label for r in table.rows]
    fig = Figure(figsize=(9.0, 1.6 + 0.45 * len(labels)), layout="constrained")
    ax = fig.subplots()
    n = len(table.column_values)
    for j, v in enumerate(table.column_values):
        ys = [i + 0.6 * ((j + 0.5) / n - 0.5) for i in range(len(table.rows))]
        cells = [r.cells.get(v) for r in table.rows]
        means = [c.accuracy_mean if c else None for c in cells]
        floor = score_floor(a for c in cells if c for a in c.accuracies)
        ax.errorbar([_nz(m) * 100 for m in means], ys,
                    xerr=std_bars(means, [c.accuracy_std if c else None for c in cells], floor), fmt="o", capsize=2,
                    color=f"C{j}", label=table.column_label(v))
    ax.plot([_nz(r.avg) * 100 for r in table.rows], range(len(table.rows)), "D", color="black",
            markersize=6, label="avg", linestyle="none")
    _variant_axis(ax, table, labels)
    ax.set_xlabel(f"{metric_name(table.metric)} (%): mean ± std over seeds")
    ax.legend(fontsize="small", ncols=min(n + 1, 6), loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    fig.suptitle(f"{title(table)}, per {table.columns_key}; baseline {table.baseline}")
    return fig


def _length_panel(ax, table: SweepTable) -> None:
    """Accuracy against evaluation length, a line per variant (an extrapolation sweep)."""
    lengths = sorted(([table.train_length] if table.train_length else []) + table.extra_lengths)
    for i, row in enumerate(table.rows):
        points = [(L, row.eval[L]) for L in lengths if L in row.eval and row.eval[L][0] is not None]
        ax.errorbar([L for L, _ in points], [m * 100 for _, (m, _) in points],
                    yerr=std_bars([m for _, (m, _) in points], [sd for _, (_, sd) in points],
                                  score_floor(m for _, (m, _) in points)), marker="o", capsize=2,
                    color="black" if row.is_baseline else f"C{i}", linewidth=2 if row.is_baseline else 1.2,
                    label=row.label)
    if table.train_length:
        ax.axvline(table.train_length, color="gray", linestyle="--", linewidth=0.8, label="trained at")
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths, [str(L) for L in lengths])
    ax.set_xlabel("evaluation length (tokens)")
    ax.set_ylabel(f"{metric_name(table.metric)} (%)")
    ax.set_title("accuracy against length, mean ± std", fontsize="medium")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="x-small")


def mark_loose_speeds(ax, rows: list[Row]) -> None:
    """The speed column's ``§`` beside each speed marker in doubt (the caption says why)."""
    for y, row in enumerate(rows):
        if row.speed_doubt[0] and row.speed_ratio is not None:
            ax.annotate(ROUNDS_MARK, (row.speed_ratio, y), xytext=(5, 3), textcoords="offset points", color="tab:green")


def plot(table: SweepTable, path: str | Path) -> Path:
    """``table.png`` (``table_figure``) of a flat table; a ladder's figure is ``ladder_view.scaling_plot``."""
    return save_png(table_figure(table), path)


def flat_figures(table: SweepTable) -> list[Figure]:
    """A flat table's figures: ``table.png`` as ``png``, and ``curves.png`` and ``lr.png`` (drawn
    when the records support them)."""
    return [Figure("png", "table.png", lambda path: plot(table, path),
                   "Accuracy (mean ± std over seeds), speed and memory per variant; the baseline highlighted."),
            Figure("curves", "curves.png", lambda path: curves(table, path),
                   "Validation loss against training FLOPs: mean over seeds, band from the lowest to the highest seed."),
            Figure("lr", "lr.png", lambda path: lr_plot(table, path),
                   "Validation metric at each learning rate of the tuning grid; each variant's chosen lr starred.")]


def table_figure(table: SweepTable):
    """The figure of ``table.png``: what the table says. Left, each variant's accuracy (mean ± std, every seed a
    faint dot) on an axis fitted to the values, or for a sweep evaluated beyond its training length
    accuracy against length per variant; middle, Δ to the baseline with its 95% CI and the table's
    marks (the result: a CI clear of 0 and a star); right, the speed and memory ratios to the
    baseline. The baseline in bold. A pivoted table: accuracy per column value per row."""
    if table.pivoted:
        return _pivot_figure(table)
    from matplotlib.figure import Figure

    labels = [r.label for r in table.rows]
    ys = list(range(len(labels)))
    colors = ["black" if r.is_baseline else "tab:blue" for r in table.rows]
    fig = Figure(figsize=(min(18.0, 11.0 + 0.07 * max(map(len, labels))), 1.8 + 0.42 * len(labels)),
                 layout="constrained")
    ax_acc, ax_delta, ax_ratio = fig.subplots(1, 3, width_ratios=[1.2, 1.2, 1.0],
                                              sharey=not table.extra_lengths)

    if table.extra_lengths:
        _length_panel(ax_acc, table)
    else:
        for y, row, color in zip(ys, table.rows, colors):
            ax_acc.plot([a * 100 for a in row.accuracies], [y] * len(row.accuracies), "o", color=color,
                        alpha=0.25, markersize=4)
            ax_acc.errorbar([_nz(row.accuracy_mean) * 100], [y], fmt="o",
                            xerr=std_bars([row.accuracy_mean], [row.accuracy_std], score_floor(row.accuracies)),
                            color=color, capsize=4, markersize=6)
        _variant_axis(ax_acc, table, labels)
        ax_acc.set_xlabel(f"{metric_name(table.metric)} (%)")
        ax_acc.set_title("accuracy: mean ± std over seeds (dots: seeds)", fontsize="medium")

    deltas = [_nz(r.delta) * 100 for r in table.rows]
    low = [d - _nz(r.delta_ci_low) * 100 if r.delta_ci_low is not None else 0.0 for d, r in zip(deltas, table.rows)]
    high = [_nz(r.delta_ci_high) * 100 - d if r.delta_ci_high is not None else 0.0 for d, r in zip(deltas, table.rows)]
    ax_delta.axvline(0.0, color="gray", linewidth=0.8)
    ax_delta.errorbar(deltas, ys, xerr=[low, high], fmt="o", color="tab:blue", ecolor="tab:blue", capsize=4)
    for y, d, h, row in zip(ys, deltas, high, table.rows):
        note = verdict_text(row) if table.has_rounds and row.verdict is not None else _marks(row)
        if note:
            ax_delta.annotate(note, (d + h, y), xytext=(4, -4), textcoords="offset points",
                              fontsize="small" if table.has_rounds else 12)
        if row.is_baseline:
            ax_delta.annotate("baseline", (0.0, y), xytext=(4, -4), textcoords="offset points", fontsize="small")
    _variant_axis(ax_delta, table, labels, named=bool(table.extra_lengths))
    ax_delta.set_xlabel("Δ accuracy to the baseline (points)")
    if table.has_rounds:  # the band a difference is equivalent within
        ax_delta.axvspan(-table.rounds.mde, table.rounds.mde, color="tab:green", alpha=0.08, linewidth=0)
    ax_delta.set_title("Δ with its repeated CI (verdicts; band: ±mde)" if table.has_rounds
                       else "Δ with its 95% CI (* p<0.05, ** p<0.01, Holm)", fontsize="medium")

    for attr, name, marker, color in (("speed_ratio", f"speed ({table.speed_source})", "s", "tab:green"),
                                       ("memory_ratio", "peak memory", "^", "tab:purple")):
        ax_ratio.plot([_nz(getattr(r, attr)) for r in table.rows], ys, marker, color=color, label=name,
                      linestyle="none", markersize=7)
    ax_ratio.axvline(1.0, color="gray", linewidth=0.8, linestyle="--")
    mark_loose_speeds(ax_ratio, table.rows)
    _variant_axis(ax_ratio, table, labels, named=False)
    ax_ratio.set_xlabel("ratio to the baseline")
    ax_ratio.set_title("speed and memory", fontsize="medium")
    ax_ratio.legend(fontsize="small", loc="lower center", bbox_to_anchor=(0.5, 1.06), ncols=2, frameon=False)
    fig.suptitle(f"{title(table)}; baseline {table.baseline}")
    return fig


def _x_axis(rows: list[Row]) -> str:
    """What the curves' x axis can be for every run: ``flops``, else ``tokens``, else ``step``."""
    entries = [h for r in rows for hist in r.histories for h in hist]
    for key in ("flops", "tokens", "step"):
        if entries and len(finite(getattr(h, key) for h in entries)) == len(entries):
            return key
    return "step"


def mean_curve(row: Row, x: str = "flops") -> tuple[list[float], list[float], list[float], list[float]]:
    """A variant's validation-loss curve over its seeds: ``(xs, mean, low, high)`` at the steps
    every run evaluated (x: the mean of ``x`` there; low/high: the lowest and highest seed)."""
    per_step: dict[int, list[tuple[float, float]]] = {}
    for hist in row.histories:
        for h in hist:
            vals = finite([getattr(h, x), h.loss])
            step = h.step
            if len(vals) == 2 and isinstance(step, (int, float)):
                per_step.setdefault(int(step), []).append((vals[0], vals[1]))
    xs, ys, lo, hi = [], [], [], []
    for step in sorted(per_step):
        points = per_step[step]
        if len(points) < len(row.histories):  # a step only some seeds evaluated: not a mean over seeds
            continue
        losses = [p[1] for p in points]
        xs.append(sum(p[0] for p in points) / len(points))
        ys.append(sum(losses) / len(losses))
        lo.append(min(losses))
        hi.append(max(losses))
    return xs, ys, lo, hi


#: a run evaluated fewer times than this draws its points unjoined: a line through two or three
#: evaluations (by default 25% and 100% of training) looks like a learning curve and is not one
MIN_CURVE_POINTS = 4


def _sparse_note(counts: list[int], steps: int) -> str:
    """What a panel of too few evaluations says, and the ``eval.every`` that gives ~10 of them."""
    k = str(counts[0]) if len(set(counts)) == 1 else f"{min(counts)}-{max(counts)}"
    return f"{k} evaluations per run: points, not a curve — set eval.every={max(1, steps // 10)} for a curve"


def curves(table: SweepTable, path: str | Path) -> Path | None:
    """``curves.png`` (``curves_figure``); None when no run recorded a history."""
    fig = curves_figure(table)
    return None if fig is None else save_png(fig, path)


def curves_figure(table: SweepTable):
    """The figure of ``curves.png``: validation loss vs training FLOPs, per variant the mean over seeds
    with a marker at every evaluation and the seeds' spread (lowest..highest), the baseline in black;
    None when no run recorded a history. A variant with at least ``MIN_CURVE_POINTS`` evaluations is
    a line with a band; one with fewer is its points with min..max bars, not joined, and its panel
    says so (a dashed line would still read as a trend between evaluations far apart)."""
    if not table.has_histories:
        return None
    from matplotlib.figure import Figure

    panels = [(name, [r for r in rows if r.histories]) for name, rows in _panels(table)]
    panels = [(name, rows) for name, rows in panels if rows]
    x = _x_axis([r for _, rows in panels for r in rows])
    fig = Figure(figsize=(5.5 * len(panels) + 1, 4.5), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    any_sparse = False
    for ax, (name, rows) in zip(axes, panels):
        sparse_counts, sparse_steps, dense = [], 0, False
        for i, row in enumerate(rows):
            xs, ys, lo, hi = mean_curve(row, x)
            if not xs:
                continue
            color = "black" if row.is_baseline else f"C{i}"
            n = len(row.histories)
            label = f"{_row_label(table, row)} (n={n})"
            if len(xs) >= MIN_CURVE_POINTS:
                dense = True
                ax.plot(xs, ys, marker="o", markersize=4, color=color, linewidth=2 if row.is_baseline else 1.2,
                        label=label)
                if n > 1:
                    ax.fill_between(xs, lo, hi, color=color, alpha=0.15, linewidth=0)
            else:
                sparse_counts.append(len(xs))
                sparse_steps = max([sparse_steps, *(int(h.step) for hist in row.histories for h in hist
                                                         if isinstance(h.step, (int, float)))])
                spread = [[y - a for y, a in zip(ys, lo)], [b - y for y, b in zip(ys, hi)]] if n > 1 else None
                ax.errorbar(xs, ys, yerr=spread, fmt="o", markersize=6, capsize=3, color=color,
                            label=label)
        spread = "band" if not sparse_counts else "bars" if not dense else "band or bars"
        heading = name or f"validation loss (mean over seeds; {spread}: min..max)"
        if sparse_counts:
            any_sparse = True
            heading += "\n" + _sparse_note(sparse_counts, sparse_steps)
        ax.set_xlabel({"flops": "training FLOPs", "tokens": "training tokens", "step": "step"}[x])
        ax.set_ylabel("validation loss")
        ax.set_title(heading, fontsize="medium")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle(f"{title(table)}: " + ("validation loss during training" if any_sparse else "learning curves"))
    return fig


def lr_plot(table: SweepTable, path: str | Path) -> Path | None:
    """``lr.png`` of a tuned sweep: validation metric vs lr (log-x), one line per variant, its
    chosen lr starred, the shared default lr dashed; None without tuning scores."""
    tune = table.tune
    scores = tune.scores if tune is not None else {}
    if not scores:
        return None
    from matplotlib.figure import Figure

    panels = [(name, [r for r in rows if r.key in scores]) for name, rows in _panels(table)]
    panels = [(name, rows) for name, rows in panels if rows]
    if not panels:
        return None
    metric = tune.metric or "loss"
    fig = Figure(figsize=(5.5 * len(panels) + 1, 4.5), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (name, rows) in zip(axes, panels):
        for i, row in enumerate(rows):
            points = sorted((float(lr), float(s)) for lr, s in scores[row.key].items() if finite([s]))
            if not points:
                continue
            color = "black" if row.is_baseline else f"C{i}"
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", color=color,
                    linewidth=2 if row.is_baseline else 1.2, label=_row_label(table, row))
            best = [p for p in points if row.lr is not None and abs(p[0] - row.lr) <= 1e-6 * row.lr]
            if best:
                ax.plot([best[0][0]], [best[0][1]], marker="*", markersize=14, color=color, linestyle="none")
        if tune.default_lr:
            ax.axvline(float(tune.default_lr), color="gray", linestyle="--", linewidth=0.8, label="default lr")
        ax.set_xscale("log")
        ax.set_xlabel("lr")
        ax.set_ylabel(f"validation {metric} (mean over tuning seeds)")
        ax.set_title(name or "lr tuned per variant (star: chosen)", fontsize="medium")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize="small")
    fig.suptitle(f"{title(table)}: validation {metric} vs lr")
    return save_png(fig, path)
