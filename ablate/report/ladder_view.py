"""How a scale ladder (``ablate.report.ladder``) shows: its columns (per rung the loss and the
compute multiplier, then the trend), its CSV fields, its figure ``scaling.png`` and what its wandb
table run records. ``LadderTable``'s ``TableLayout`` members answer from here."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ablate.report.caption import title
from ablate.report.layout import Figure, save_png
from ablate.report.table_columns import DASH, HEADLINE, VARIANT_COLUMN, VARIANT_FIELD, Column, Field, _loss

#: ``ablate.report.ladder``'s ``LadderTable`` and ``LadderRow``, whose members call these functions:
#: not imported (no import cycle)
LadderTable = LadderRow = Any


def ladder_figures(table: LadderTable) -> list[Figure]:
    """A ladder's one figure, ``scaling.png``, as its ``png``."""
    return [Figure("png", "scaling.png", lambda path: scaling_plot(table, path),
                   "Loss against training FLOPs per rung (the baseline's fitted curve dashed), and each "
                   "variant's compute multiplier with its 95% CI.")]


def ladder_wandb_config(table: LadderTable) -> dict[str, Any]:
    return {"rungs": table.rungs, "size_keys": table.size_keys, "n_boot": table.n_boot}


def ladder_wandb_summary(table: LadderTable) -> dict[str, Any]:
    """The rungs, the baseline curve and the rank agreement."""
    ladder = table.ladder
    return {"layout": "ladder", "rungs": table.rungs, "curve": ladder.curve.kind if ladder.curve else None,
            "curve_reason": ladder.curve_reason, "kendall_tau": ladder.ranks.tau,
            "decision_accuracy": ladder.ranks.decision_accuracy, "rank_reason": ladder.ranks.reason}



def _cm_text(cell, x: str) -> str:
    """``2.00x [1.60, 2.50]``, ``†`` when extrapolated; ``–`` without a CM."""
    m = cell.multiplier if cell is not None else None
    if m is None or m.cm is None:
        return DASH
    def num(v: float) -> str:
        return "∞" if v == float("inf") else f"{v:.2f}"
    text = f"{num(m.cm)}{x}" + (f" [{num(m.ci_low)}, {num(m.ci_high)}]" if m.ci_low is not None else "")
    return text + (" †" if m.extrapolated else "")


def _trend_text(row: LadderRow) -> str:
    """``+0.12 [+0.03, +0.21]``, ``‡`` when scale-dependent; ``+0.12 [...] (3 rungs: no verdict)`` below
    ``scaling.VERDICT_RUNGS``; ``– (2 rungs)``: the reason, shortly."""
    t = row.trend
    if t is None:
        return DASH
    if t.slope is None:
        return f"{DASH} ({t.reason.split(':')[0]})" if t.reason else DASH
    text = f"{t.slope:+.2f}" + (f" [{t.ci_low:+.2f}, {t.ci_high:+.2f}]" if t.ci_low is not None else " (no CI)")
    if t.ci_low is not None and t.scale_dependent is None:     # a CI, but too few rungs for a verdict
        return text + f" ({t.reason.split(':')[0]}: no verdict)"
    return text + (" ‡" if t.scale_dependent else "")


def ladder_columns(t: LadderTable) -> list[Column]:
    """A ladder's human columns: the variant, per rung its loss and CM, then the trend."""
    cols = [VARIANT_COLUMN]
    for rung in t.rungs:
        cols += [Column(f"{rung} loss", lambda r, x, g=rung: _loss_pm(r.cells.get(g))),
                 Column(f"{rung} CM", lambda r, x, g=rung: DASH if r.is_baseline else _cm_text(r.cells.get(g), x),
                        role=HEADLINE)]
    return cols + [Column("trend (log CM / log C)", lambda r, x: DASH if r.is_baseline else _trend_text(r),
                          role=HEADLINE)]


def _loss_pm(cell) -> str:
    if cell is None or cell.loss_mean is None:
        return DASH
    return f"{cell.loss_mean:.3f}" + (f" ± {cell.loss_std:.3f}" if cell.loss_std is not None else "")


def _multiplier_getter(rung: str, attr: str) -> Callable[[Any, LadderRow], Any]:
    def get(t, r):
        cell = r.cells.get(rung)
        m = cell.multiplier if cell is not None else None
        return getattr(m, attr) if m is not None else None
    return get


def _cell_value(rung: str, attr: str) -> Callable[[Any, LadderRow], Any]:
    return lambda t, r: getattr(r.cells[rung], attr) if rung in r.cells else None


def _trend_value(attr: str) -> Callable[[Any, LadderRow], Any]:
    return lambda t, r: getattr(r.trend, attr) if r.trend is not None else None


def ladder_fields(t: LadderTable) -> list[Field]:
    """A ladder's CSV: ``variant``, per rung R ``R_loss``, ``R_loss_std``, ``R_n``, ``R_flops``,
    ``R_cm``, ``R_cm_ci_low``, ``R_cm_ci_high``, ``R_extrapolated``; then the trend, its CI,
    ``scale_dependent``, ``trend_note``, and ``overrides``, ``is_baseline``, ``status``."""
    fields: list[Field] = [VARIANT_FIELD]
    for g in t.rungs:
        fields += [(f"{g}_loss", _cell_value(g, "loss_mean")), (f"{g}_loss_std", _cell_value(g, "loss_std")),
                   (f"{g}_n", _cell_value(g, "n")), (f"{g}_flops", _cell_value(g, "flops")),
                   (f"{g}_cm", _multiplier_getter(g, "cm")), (f"{g}_cm_ci_low", _multiplier_getter(g, "ci_low")),
                   (f"{g}_cm_ci_high", _multiplier_getter(g, "ci_high")),
                   (f"{g}_extrapolated", _multiplier_getter(g, "extrapolated"))]
    return fields + [("trend", _trend_value("slope")), ("trend_ci_low", _trend_value("ci_low")),
                     ("trend_ci_high", _trend_value("ci_high")), ("scale_dependent", _trend_value("scale_dependent")),
                     ("trend_note", _trend_value("reason")), ("overrides", lambda t, r: r.key),
                     ("is_baseline", lambda t, r: r.is_baseline),
                     ("status", lambda t, r: r.status)]




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
    return save_png(fig, path)
