"""The table's figures (PNG, matplotlib without pyplot: no global state, Agg canvas).

* ``plot``: ``table.png``: accuracy ± std, speed ratio and memory ratio per variant (a pivoted
  table: accuracy per column value and the average, grouped per row), the baseline highlighted;
* ``curves``: ``curves.png``: validation loss against training FLOPs spent (``metrics.history``),
  one line per variant, the mean over seeds with a band from the lowest to the highest seed;
  compute on the x axis, so variants of different cost compare at equal compute
  (Kaplan et al. 2020);
* ``scaling_plot``: ``scaling.png`` of a ladder (``ablate.report.ladder``): loss vs training FLOPs
  (log-log, per variant its rung means and a min..max seed band, the baseline's fitted curve) and
  the compute multiplier vs FLOPs (log x, CI band, 1x line, extrapolated points hollow);
* ``lr_plot``: ``lr.png`` of a tuned sweep: the validation metric each variant reached at each lr
  of the grid (``sweep.json``'s ``tune.scores``), log-x, its chosen lr marked.
"""

from __future__ import annotations

from pathlib import Path

from ablate.report.formats import title
from ablate.report.ladder import LadderTable
from ablate.report.stats import finite
from ablate.report.table import Row, SweepTable
from ablate.results import atomic_file


def _nz(v: float | None) -> float:
    return float("nan") if v is None else v


def _save(fig, path: str | Path) -> Path:
    path = Path(path)
    with atomic_file(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    return path


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


def _pivot_plot(table: SweepTable, path: str | Path) -> Path:
    """Accuracy per column value and the row's average, grouped per row, baseline row outlined."""
    from matplotlib.figure import Figure

    labels = [r.label for r in table.rows]
    xs = list(range(len(labels)))
    groups = [(table.column_label(v), [(r.cells[v].accuracy_mean, r.cells[v].accuracy_std) if v in r.cells
                                       else (None, None) for r in table.rows]) for v in table.column_values]
    groups.append(("avg", [(r.avg, None) for r in table.rows]))
    width = 0.8 / len(groups)
    fig = Figure(figsize=(max(8.0, 1.2 + 0.5 * len(groups) * len(labels)), 4.5), layout="constrained")
    ax = fig.subplots()
    edges = ["black" if r.is_baseline else "none" for r in table.rows]
    for j, (name, cells) in enumerate(groups):
        ax.bar([x - 0.4 + width * (j + 0.5) for x in xs], [_nz(m) * 100 for m, _ in cells], width,
               yerr=[_nz(s) * 100 for _, s in cells], capsize=2, label=name, color=f"C{j}",
               edgecolor=edges, linewidth=1.5, hatch="//" if name == "avg" else None)
    ax.set_ylim(0, 118)
    ax.legend(fontsize="small", ncols=min(len(groups), 6), loc="upper center", frameon=False)
    ax.set_title(f"{table.metric} (%) per {table.columns_key}, mean ± std")
    ax.set_xticks(xs, labels, rotation=30, ha="right", fontsize="small")
    for tick, row in zip(ax.get_xticklabels(), table.rows):
        tick.set_fontweight("bold" if row.is_baseline else "normal")
    fig.suptitle(f"{title(table)} (baseline: {table.baseline})")
    return _save(fig, path)


def plot(table: SweepTable, path: str | Path) -> Path:
    """Three panels (accuracy ± std, speed ratio, memory ratio), the baseline highlighted; PNG.
    A pivoted table: one panel, accuracy per column value and the average, grouped per row.
    A ladder: ``scaling_plot``."""
    if isinstance(table, LadderTable):
        return scaling_plot(table, path)
    if table.pivoted:
        return _pivot_plot(table, path)
    from matplotlib.figure import Figure

    labels = [r.label for r in table.rows]
    xs = list(range(len(labels)))
    colors = ["tab:orange" if r.is_baseline else "tab:blue" for r in table.rows]
    edges = ["black" if r.is_baseline else "none" for r in table.rows]
    fig = Figure(figsize=(max(11.0, 3 * (1 + 0.6 * len(labels))), 4.5), layout="constrained")
    ax_acc, ax_speed, ax_mem = fig.subplots(1, 3)

    if table.extra_lengths:  # grouped bars: one per evaluated length, the baseline outlined
        lengths = ([table.train_length] if table.train_length else []) + table.extra_lengths
        width = 0.8 / len(lengths)
        shades = [f"C{j}" for j in range(len(lengths))]
        for j, L in enumerate(lengths):
            means = [_nz(r.eval.get(L, (None, None))[0]) * 100 for r in table.rows]
            stds = [_nz(r.eval.get(L, (None, None))[1]) * 100 for r in table.rows]
            ax_acc.bar([x - 0.4 + width * (j + 0.5) for x in xs], means, width, yerr=stds, capsize=2,
                       label=f"@{L}", color=shades[j], edgecolor=edges, linewidth=1.5)
        ax_acc.set_ylim(0, 118)
        ax_acc.legend(fontsize="small", ncols=len(lengths), loc="upper center", frameon=False)
    else:
        ax_acc.bar(xs, [_nz(r.accuracy_mean) * 100 for r in table.rows],
                   yerr=[_nz(r.accuracy_std) * 100 for r in table.rows], capsize=4, color=colors)
    ax_acc.set_title(f"{table.metric} (%), mean ± std")
    for ax, attr, name in ((ax_speed, "speed_ratio", f"speed ratio ({table.speed_source})"),
                           (ax_mem, "memory_ratio", "peak memory ratio")):
        ax.bar(xs, [_nz(getattr(r, attr)) for r in table.rows], color=colors)
        ax.axhline(1.0, color="gray", linewidth=0.8, linestyle="--")
        ax.set_title(name)
    for ax in (ax_acc, ax_speed, ax_mem):
        ax.set_xticks(xs, labels, rotation=30, ha="right", fontsize="small")
        for tick, row in zip(ax.get_xticklabels(), table.rows):
            tick.set_fontweight("bold" if row.is_baseline else "normal")
    fig.suptitle(f"{title(table)} (baseline: {table.baseline})")
    return _save(fig, path)


def _x_axis(rows: list[Row]) -> str:
    """What the curves' x axis can be for every run: ``flops``, else ``tokens``, else ``step``."""
    entries = [h for r in rows for hist in r.histories for h in hist]
    for key in ("flops", "tokens", "step"):
        if entries and len(finite(h.get(key) for h in entries)) == len(entries):
            return key
    return "step"


def mean_curve(row: Row, x: str = "flops") -> tuple[list[float], list[float], list[float], list[float]]:
    """A variant's validation-loss curve over its seeds: ``(xs, mean, low, high)`` at the steps
    every run evaluated (x: the mean of ``x`` there; low/high: the lowest and highest seed)."""
    per_step: dict[int, list[tuple[float, float]]] = {}
    for hist in row.histories:
        for h in hist:
            vals = finite([h.get(x), h.get("loss")])
            step = h.get("step")
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


def curves(table: SweepTable, path: str | Path) -> Path | None:
    """``curves.png``: validation loss vs training FLOPs, one line per variant (mean over seeds,
    band: lowest..highest seed), the baseline in black; None when no run recorded a history."""
    if not table.has_histories:
        return None
    from matplotlib.figure import Figure

    panels = [(name, [r for r in rows if r.histories]) for name, rows in _panels(table)]
    panels = [(name, rows) for name, rows in panels if rows]
    x = _x_axis([r for _, rows in panels for r in rows])
    fig = Figure(figsize=(5.5 * len(panels) + 1, 4.5), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (name, rows) in zip(axes, panels):
        for i, row in enumerate(rows):
            xs, ys, lo, hi = mean_curve(row, x)
            if not xs:
                continue
            color = "black" if row.is_baseline else f"C{i}"
            n = len(row.histories)
            ax.plot(xs, ys, marker="o", markersize=3, color=color, linewidth=2 if row.is_baseline else 1.2,
                    label=f"{_row_label(table, row)} (n={n})")
            if n > 1:
                ax.fill_between(xs, lo, hi, color=color, alpha=0.15, linewidth=0)
        ax.set_xlabel({"flops": "training FLOPs", "tokens": "training tokens", "step": "step"}[x])
        ax.set_ylabel("validation loss")
        ax.set_title(name or "validation loss (mean over seeds; band: min..max)", fontsize="medium")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle(f"{title(table)}: learning curves")
    return _save(fig, path)


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
    return _save(fig, path)


def scaling_plot(table: LadderTable, path: str | Path) -> Path:
    """``scaling.png``: left, final validation loss vs training FLOPs (log-log), one line per
    variant through its rung means with a band from its lowest to its highest seed's loss, and the
    baseline's fitted curve (dashed beyond the measured rungs); right, each variant's CM vs its
    FLOPs (log x) with its 95% CI band, the 1x line, extrapolated CMs hollow."""
    import numpy as np
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 4.8), layout="constrained")
    ax_loss, ax_cm = fig.subplots(1, 2)
    for i, row in enumerate(table.rows):
        color = "black" if row.is_baseline else f"C{i}"
        cells = [row.cells[g] for g in table.rungs if g in row.cells and row.cells[g].flops is not None]
        if not cells:
            continue
        xs = [c.flops for c in cells]
        ax_loss.plot(xs, [c.loss_mean for c in cells], marker="o", color=color, label=row.label,
                     linewidth=2 if row.is_baseline else 1.2)
        ax_loss.fill_between(xs, [c.loss_min for c in cells], [c.loss_max for c in cells], color=color,
                             alpha=0.15, linewidth=0)
        ms = [c.multiplier for c in cells if c.multiplier is not None and c.multiplier.cm is not None
              and np.isfinite(c.multiplier.cm)]
        if ms and not row.is_baseline:
            ax_cm.plot([m.compute for m in ms], [m.cm for m in ms], color=color, label=row.label)
            if all(m.ci_low is not None and np.isfinite(m.ci_high) for m in ms):
                ax_cm.fill_between([m.compute for m in ms], [m.ci_low for m in ms], [m.ci_high for m in ms],
                                   color=color, alpha=0.15, linewidth=0)
            for m in ms:
                ax_cm.plot([m.compute], [m.cm], marker="o", color=color,
                           markerfacecolor="none" if m.extrapolated else color, linestyle="none")
    curve = table.ladder.curve
    if curve is not None:
        lo, hi = float(curve.compute.min()), float(curve.compute.max())
        all_x = [c.flops for r in table.rows for c in r.cells.values() if c.flops is not None]
        x_lo, x_hi = min([lo, *all_x]), max([hi, *all_x])
        inside = np.geomspace(lo, hi, 64)
        ax_loss.plot(inside, curve.loss_at(inside), color="gray", linewidth=1, label=f"baseline fit ({curve.kind})")
        for a, b in ((x_lo, lo), (hi, x_hi)):
            if b > a:
                beyond = np.geomspace(a, b, 16)
                ax_loss.plot(beyond, curve.loss_at(beyond), color="gray", linewidth=1, linestyle="--")
    ax_loss.set(xscale="log", yscale="log", xlabel="training FLOPs", ylabel="final validation loss",
                title="loss vs compute (rung means; band: min..max seed)")
    ax_cm.axhline(1.0, color="gray", linewidth=0.8, linestyle="--")
    ax_cm.set(xscale="log", xlabel="training FLOPs", ylabel="compute multiplier vs baseline",
              title="CM = C_base(L) / C (95% CI; hollow: extrapolated)")
    for ax in (ax_loss, ax_cm):
        ax.grid(alpha=0.3, which="both")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small")
    fig.suptitle(f"{title(table)}: scale ladder (baseline: {table.baseline})")
    return _save(fig, path)
