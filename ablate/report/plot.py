"""The table's figure: accuracy, speed ratio and memory ratio per variant, baseline highlighted."""

from __future__ import annotations

from pathlib import Path

from ablate.report.formats import title
from ablate.results import atomic_file
from ablate.report.table import SweepTable


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
    for ax, attr, name in ((ax_speed, "speed_ratio", f"speed ratio ({table.speed_source})"),
                           (ax_mem, "memory_ratio", "peak memory ratio")):
        ax.bar(xs, [nz(getattr(r, attr)) for r in table.rows], color=colors)
        ax.axhline(1.0, color="gray", linewidth=0.8, linestyle="--")
        ax.set_title(name)
    for ax in (ax_acc, ax_speed, ax_mem):
        ax.set_xticks(xs, labels, rotation=30, ha="right", fontsize="small")
        for tick, row in zip(ax.get_xticklabels(), table.rows):
            tick.set_fontweight("bold" if row.is_baseline else "normal")
    fig.suptitle(f"{title(table)} (baseline: {table.baseline})")
    path = Path(path)
    with atomic_file(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    return path
