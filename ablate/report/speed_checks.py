"""Whether a table's speed ratios are results or the machine's weather (docs/measurements.md,
"Speed on a shared machine").

Three doubts, each marking the speed cell ``§`` (``table_columns.ROUNDS_MARK``) and explained in
one caption sentence:

* ``rounds``: an interleaved benchmark's rounds disagree (``stats.RoundRatios.disagree``);
* ``load``: speeds from separate runs (the records) that were timed under different conditions:
  the row's runs had a different share of their cores during their timed steps than the baseline's
  (``metrics.cpu_share``, CPU runs), by more than :data:`SHARE_GAP`;
* ``flops``: a speed ratio far from what the FLOPs ratio predicts (tokens/s ∝ 1 / FLOPs per token
  for compute-bound models): off by more than :data:`FLOPS_GAP` and by more than three times the
  measurement's own spread (the runs' tokens/s over seeds, or the rounds' IQR).

``ablate-table DIR --bench`` re-times the variants interleaved in one process: the fix for the first
two, and a check of the third (a memory-bound kernel can make it real).
"""

from __future__ import annotations

import math
from typing import Iterable

from ablate.report.rows import Row
from ablate.report.stats import mean, std

#: the gap in CPU share (CPU seconds of the timed steps / their wall time / threads) between a row's
#: runs and the baseline's above which their speeds were timed under different loads
SHARE_GAP = 0.15
#: the relative gap between the speed ratio and 1 / the FLOPs ratio above which the two contradict
FLOPS_GAP = 0.25
RERUN = "`ablate-table DIR --bench` re-times the variants interleaved"


def judge_speeds(pairs: Iterable[tuple[Row, Row | None]]) -> None:
    """Set each row's ``speed_doubt`` (its kind and its figures; ``("", "")`` when its speed ratio
    stands) against its baseline row."""
    for row, base in pairs:
        row.speed_doubt = _doubt(row, base) if base is not None and row is not base else ("", "")


def _doubt(row: Row, base: Row) -> tuple[str, str]:
    spread = row.speed_spread
    if spread is not None and spread.disagree:
        return "rounds", f"{row.label} {spread.q25:.2f}–{spread.q75:.2f}x"
    if not row.speed_rounds:  # the runs' own speeds
        mine, theirs = mean(row.cpu_shares), mean(base.cpu_shares)
        if mine is not None and theirs is not None and abs(mine - theirs) > SHARE_GAP:
            return "load", f"{row.label} {mine:.2f} against the baseline's {theirs:.2f}"
    if row.speed_ratio and row.flops_ratio:
        off = abs(math.log(row.speed_ratio * row.flops_ratio))
        if off > math.log1p(FLOPS_GAP) and off > 3 * _spread(row, base):
            return "flops", f"{row.label} {row.speed_ratio:.2f}x against {1 / row.flops_ratio:.2f}x"
    return "", ""


def _spread(row: Row, base: Row) -> float:
    """The speed ratio's own relative spread: the rounds' IQR over their median, or the runs' tokens/s
    relative sd over seeds (both rows' combined); 0 where unknown."""
    if row.speed_spread is not None:
        return (row.speed_spread.q75 - row.speed_spread.q25) / row.speed_spread.median
    parts = []
    for r in (row, base):
        m, s = mean(r.run_speeds), std(r.run_speeds)
        if m and s is not None:
            parts.append(s / m)
    return math.sqrt(sum(p * p for p in parts))


#: each doubt's caption sentence, after "§ <its rows> (<their figures>)"
WHY = {
    "rounds": ("the benchmark's rounds disagree by more than 10% (IQR of the per-round ratios)",
               "the machine's load changed while timing; read no speed-up smaller than that, or rerun "
               "`ablate-table DIR --bench` on a quieter machine"),
    "load": ("not comparable: timed under another load than the baseline (share of its cores in its timed steps)",
             RERUN),
    "flops": ("the speed ratio is far from what the FLOPs ratio predicts, beyond the measurement's spread",
              f"the load, or a memory-bound kernel; {RERUN}"),
}


def speed_doubt_note(rows: Iterable[Row]) -> str:
    """The caption's sentences on the rows whose speed is in doubt ("" when none is)."""
    rows, out = list(rows), []
    for kind, (what, then) in WHY.items():
        figures = [r.speed_doubt[1] for r in rows if r.speed_doubt[0] == kind]
        if figures:
            out.append(f"§: {what}: {', '.join(figures)}; {then}")
    return "; ".join(out)
