"""``curves.png`` read back as a matplotlib figure (``curves_figure``, what ``curves`` saves): a run
with a few evaluations is drawn as points with a note, not as a curve; one with enough is a line with a
marker per evaluation; and the default cadence gives the main job a curve.

The records are synthetic (docs/internals.md, "Records"), their evaluation steps the real
``curve_steps`` of a 1500-step run; everything under test is the real code."""

from __future__ import annotations

import pytest
from conftest import compose_cfg
from test_table import record

from ablate.record import CurvePoint, Record
from ablate.curve import curve_steps
from ablate.report import build_table
from ablate.report.plot import MIN_CURVE_POINTS, curves, curves_figure

FPT = {"independent": 6.0e6, "qk_shared": 4.0e6}  # FLOPs per token
TOKENS_PER_STEP = 512
SEEDS = (0, 1, 2)


def curve_records(steps: list[int]) -> list[Record]:
    """Two variants x three seeds, each run evaluated at ``steps``; seed s adds 0.1 s to the loss."""
    recs = []
    for v, fpt in FPT.items():
        for s in SEEDS:
            rec = record(len(recs), [f"qkv_sharing={v}", f"seed={s}"])
            rec.metrics.history = [
                CurvePoint(step=k, tokens=k * TOKENS_PER_STEP, flops=fpt * k * TOKENS_PER_STEP,
                           loss=3.0 - k / steps[-1] + 0.1 * s, accuracy=0.5) for k in steps]
            recs.append(rec)
    return recs


def variant_lines(ax) -> dict[str, object]:
    """The Line2D that carries each variant's legend label (a plot's line, an errorbar's data line)."""
    lines = {}
    for handle, label in zip(*ax.get_legend_handles_labels()):
        lines[label.split(" (n=")[0]] = handle.lines[0] if hasattr(handle, "lines") else handle
    return lines


def joined(line) -> bool:
    return line.get_linestyle() not in ("None", "none", "", " ")


def test_two_evaluations_per_run_are_points_with_their_spread_and_a_note(tmp_path):
    steps = curve_steps(1500, 0)  # the cadence before eval.every: 25% of training and the end
    assert steps == [375, 1500]
    fig = curves_figure(build_table(curve_records(steps)))
    (ax,) = fig.axes
    assert "2 evaluations per run: points, not a curve — set eval.every=150 for a curve" in ax.get_title()
    assert "learning curves" not in fig.get_suptitle()

    lines = variant_lines(ax)
    assert set(lines) == set(FPT)
    for v, line in lines.items():
        assert line.get_marker() == "o" and not joined(line), f"{v}: points, not joined"
        fpt = FPT[v]
        assert list(line.get_xdata()) == pytest.approx([fpt * k * TOKENS_PER_STEP for k in steps])
    assert not any(joined(ln) and len(ln.get_xdata()) > 1 for ln in ax.lines), "nothing draws a line through them"
    # the seeds' spread: a bar from the lowest to the highest seed at each point (no band between points)
    bars = sorted(tuple(sorted(y for _, y in seg)) for c in ax.collections for seg in c.get_segments())
    assert len(bars) == 2 * len(steps)
    assert all(hi - lo == pytest.approx(0.1 * (len(SEEDS) - 1)) for lo, hi in bars)
    assert curves(build_table(curve_records(steps)), tmp_path / "curves.png").stat().st_size > 10_000


def test_eight_evaluations_per_run_are_lines_with_a_marker_at_each():
    steps = curve_steps(1600, 200)
    assert len(steps) == 8 >= MIN_CURVE_POINTS
    fig = curves_figure(build_table(curve_records(steps)))
    (ax,) = fig.axes
    assert "not a curve" not in ax.get_title() and "learning curves" in fig.get_suptitle()
    lines = variant_lines(ax)
    assert len(lines) == 2
    for line in lines.values():
        assert joined(line) and line.get_marker() == "o" and len(line.get_xdata()) == 8
    assert len(ax.collections) == 2  # each variant's min..max band over its seeds


def test_the_main_jobs_default_cadence_gives_a_curve():
    cfg = compose_cfg(["experiment=qkv_sharing"])
    steps = curve_steps(int(cfg.trainer.max_steps), int(cfg.eval.every), float(cfg.eval.early_fraction))
    assert 8 <= len(steps) <= 16, steps
    assert steps[-1] == cfg.trainer.max_steps and round(0.25 * cfg.trainer.max_steps) in steps  # final, early loss
