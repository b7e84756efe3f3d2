"""A pretrain-then-fine-tune table's figure, ``table.png`` (matplotlib without pyplot, Agg canvas):
what the table says, one row per variant, the baseline in bold.

* left: the final pretraining loss (the mean over pretraining seeds), lower is better;
* middle: Δ to the baseline on each downstream task and on their average, with its 95% CI paired by
  pretraining seed, the average drawn largest, the table's marks beside it;
* right: the pretraining's speed and memory as ratios to the baseline.

Read left against middle, it is Narang et al.'s (2021) question: does a lower pretraining loss go
with a better downstream score? (The caption's Kendall τ says it in one number.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ablate.report.caption import title
from ablate.report.layout import Figure, save_png
from ablate.report.plot import _marks, _nz, _variant_axis, mark_loose_speeds

#: ``ablate.report.finetune_table.FinetuneTable``, which draws its figure here: not imported (no cycle)
FinetuneTable = Any


def finetune_figures(table: FinetuneTable) -> list[Figure]:
    """The fine-tune layout's one figure, ``table.png``, as its ``png``."""
    return [Figure("png", "table.png", lambda path: finetune_plot(table, path),
                   "Final pretraining loss per variant; each downstream task's and the average's Δ to the "
                   "baseline with its 95% CI (paired by pretraining seed); the pretraining speed and memory "
                   "ratios; the baseline highlighted.")]


def finetune_plot(table: FinetuneTable, path: str | Path) -> Path | None:
    """``table.png`` of ``table``; None when no variant has a downstream score to draw."""
    if not any(c.accuracy_mean is not None for r in table.rows for c in r.cells.values()):
        return None
    return save_png(finetune_figure(table), path)


def finetune_figure(table: FinetuneTable):
    from matplotlib.figure import Figure as MplFigure

    labels = [r.label for r in table.rows]
    ys = list(range(len(labels)))
    colors = ["black" if r.is_baseline else "tab:blue" for r in table.rows]
    fig = MplFigure(figsize=(min(18.0, 12.0 + 0.07 * max(map(len, labels))), 2.0 + 0.5 * len(labels)),
                    layout="constrained")
    ax_loss, ax_delta, ax_ratio = fig.subplots(1, 3, width_ratios=[1.0, 1.6, 0.9], sharey=True)

    for y, row, color in zip(ys, table.rows, colors):
        ax_loss.plot([_nz(row.final_loss)], [y], "o", color=color, markersize=7)
    _variant_axis(ax_loss, table, labels)
    ax_loss.set_xlabel("final pretraining loss (lower is better)")
    ax_loss.set_title("pretraining", fontsize="medium")

    names = [*table.tasks, table.avg_key]
    step = 0.6 / max(1, len(names) - 1)
    ax_delta.axvline(0.0, color="gray", linewidth=0.8)
    for k, name in enumerate(names):
        offset = -0.3 + k * step if len(names) > 1 else 0.0
        cells = [r.cells.get(name) for r in table.rows]
        deltas = [_nz(c.delta) * 100 if c is not None else float("nan") for c in cells]
        low = [d - c.delta_ci_low * 100 if c is not None and c.delta_ci_low is not None else 0.0
               for d, c in zip(deltas, cells)]
        high = [c.delta_ci_high * 100 - d if c is not None and c.delta_ci_high is not None else 0.0
                for d, c in zip(deltas, cells)]
        average = name == table.avg_key
        ax_delta.errorbar(deltas, [y + offset for y in ys], xerr=[low, high], fmt="D" if average else "o",
                          markersize=8 if average else 4, capsize=3, linewidth=2 if average else 1,
                          color="black" if average else f"C{k % 10}",
                          label=table.avg_label if average else name)
        for y, d, h, c in zip(ys, deltas, high, cells):
            if c is not None and _marks(c):
                ax_delta.annotate(_marks(c), (d + h, y + offset), xytext=(3, -4), textcoords="offset points")
    for y, row in zip(ys, table.rows):
        if row.is_baseline:
            ax_delta.annotate("baseline", (0.0, y), xytext=(4, -4), textcoords="offset points", fontsize="small")
    _variant_axis(ax_delta, table, labels, named=False)
    ax_delta.set_xlabel("Δ to the baseline (points, 95% CI paired by pretraining seed)")
    ax_delta.set_title("downstream: each task and their average (* p<0.05, ** p<0.01, Holm)", fontsize="medium")
    ax_delta.legend(fontsize="small", loc="lower center", bbox_to_anchor=(0.5, 1.08), ncols=min(5, len(names)),
                    frameon=False)

    for attr, name, marker, color in (("speed_ratio", f"speed ({table.speed_source})", "s", "tab:green"),
                                       ("memory_ratio", "peak memory", "^", "tab:purple")):
        ax_ratio.plot([_nz(getattr(r, attr)) for r in table.rows], ys, marker, color=color, label=name,
                      linestyle="none", markersize=7)
    ax_ratio.axvline(1.0, color="gray", linewidth=0.8, linestyle="--")
    mark_loose_speeds(ax_ratio, table.rows)
    _variant_axis(ax_ratio, table, labels, named=False)
    ax_ratio.set_xlabel("ratio to the baseline (pretraining)")
    ax_ratio.set_title("speed and memory", fontsize="medium")
    ax_ratio.legend(fontsize="small", loc="lower center", bbox_to_anchor=(0.5, 1.08), ncols=2, frameon=False)
    fig.suptitle(f"{title(table)}; baseline {table.baseline}")
    return fig
