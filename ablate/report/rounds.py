"""What the rounds of a ``seed=auto`` sweep have decided so far, for the sweeper: ``round_state``.

Between rounds the sweeper must know which comparisons are still undecided (their rows, and those
rows' baselines, get the next round's seeds). It asks here, and the answer is the table's own:
``round_state`` builds the table (``build_table``: its rows, baselines, comparisons and
``comparisons.decide_rounds``), so the sweeper and the table never disagree on a verdict. Keys are
variant keys (``ablate.sweep.SweepPlan.variant`` of a job): a flat table's row's, a pivoted table's
cell's (the full variant, columns key included).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ablate.report.comparisons import compared_rows
from ablate.report.layout import TableLayout
from ablate.report.records import LoadedSweep
from ablate.report.table import SweepTable, build_table
from ablate.seed_spreads import Spread, measured_now, spread_key
from ablate.sweep import job_variant

if TYPE_CHECKING:
    from ablate.sequential import Verdict


#: the layouts whose comparisons are not decided in rounds, as ``round_state`` names them
NOT_IN_ROUNDS = {"ladder": "a scale ladder (a size key swept)", "finetune": "a pretrain-then-fine-tune sweep"}


@dataclass
class RoundState:
    """The comparisons of a sweep whose seeds run in rounds, after the rounds run so far."""

    verdicts: dict[str, Verdict]   # every compared variant key -> its verdict
    baseline_of: dict[str, str]    # every compared variant key -> its baseline's variant key

    @property
    def undecided(self) -> list[str]:
        """The compared variants still undecided, in table order."""
        return [key for key, v in self.verdicts.items() if v.verdict == "undecided"]


def round_state(sweep: LoadedSweep) -> RoundState:
    """Each comparison's verdict and baseline, from the table the sweep's end would show
    (``build_table(sweep)``: the experiment's baseline, pivot and rows; a row that ``experiment.rows``
    leaves out is not compared, so it is in neither map). Empty while the sweep has no record. Raises
    ValueError for a sweep without ``rounds`` in its plan, and for one whose table is not a flat one
    (a ladder, a fine-tune sweep: their comparisons are not decided in rounds)."""
    if sweep.plan is None or sweep.plan.rounds is None:
        raise ValueError("round_state: the sweep's plan (sweep.json) has no rounds block: its seeds are "
                         "fixed (seed=auto runs them in rounds)")
    if not sweep.records:  # no job has written its record yet: nothing is compared, so nothing to extend
        return RoundState(verdicts={}, baseline_of={})
    table = build_table(sweep)
    if not isinstance(table, SweepTable):
        what = NOT_IN_ROUNDS.get(table.layout, f"a {table.layout} sweep")
        raise ValueError(f"round_state: {what}'s comparisons are not decided in rounds (seed=auto is for "
                         "flat sweeps: no size key swept, no fine-tune stage)")
    compared = compared_rows(table.rows, table.columns_key)
    return RoundState(verdicts={row.key: row.verdict for row in compared},
                      baseline_of={row.key: row.baseline_key for row in compared})


def comparison_spreads(table: TableLayout) -> dict[str, Spread]:
    """The spread of each comparison's paired differences (``Row.seed_diffs``: the table's own
    pairing, at a tuned sweep's chosen rates) where it has two seeds or more, keyed for the per-user
    cache (``ablate.seed_spreads``) by both rows' configs; a sweep's end keeps them for a later
    ``--plan``'s power advice. Empty for a layout without paired rows (a ladder, a fine-tune sweep)."""
    import statistics

    if not isinstance(table, SweepTable) or table.sweep is None:
        return {}
    configs: dict[str, dict] = {}
    for record in table.sweep.records:
        if record.ok and record.config:
            configs.setdefault(job_variant(record.overrides, table.sweep.swept), record.config)
    out = {}
    for row in compared_rows(table.rows, table.columns_key):
        diffs = list(row.seed_diffs.values())
        if len(diffs) >= 2 and row.key in configs and row.baseline_key in configs:
            out[spread_key(configs[row.key], configs[row.baseline_key])] = measured_now(
                statistics.stdev(diffs), len(diffs), table.sweep.sweep_dir or "")
    return out
