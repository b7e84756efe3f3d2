"""A table's comparisons: its baseline(s) marked, each row (or pivoted cell) against its own
baseline (speed, memory and FLOPs ratios; Δ with its CI and p from the paired t-test over seeds or
Welch's test), and the Holm–Bonferroni correction over the comparisons shown (``build_table``'s
last stages). A sweep whose seeds ran in rounds (``seed=auto``: sweep.json's ``rounds``) has its
comparisons decided instead (``decide_rounds``: ``ablate.sequential.decide`` over each one's paired
differences per seed, Holm across them inside it).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from ablate.report.rows import Row, resolve_baseline
from ablate.report.speed_checks import judge_speeds
from ablate.report.stats import Comparison, holm, paired_test, ratio, round_ratios, welch_test
from ablate.sweep import split_override_string

if TYPE_CHECKING:
    from ablate.sweep import Rounds


def mark_baselines(given: str | None, default: Any, shown: list[Row],
                    col_key: str | None) -> tuple[Row, dict[str, Row], str]:
    """The baseline row, each row's own baseline (sweeps over several keys; else empty) and the
    table's name for the baseline; marks them ``is_baseline`` (a pivoted baseline row's cells too).

    ``given`` (strict: an unknown one raises) > ``experiment.baseline`` > the first row. Pivoted,
    the baseline is a row, so the columns key is dropped from it: every column has its own."""
    spec = given or default
    if spec and col_key:
        spec = ",".join(f"{k}={v}" for k, v in split_override_string(str(spec)).items() if k != col_key) or \
            (None if "=" in str(spec) else spec)
    base, base_of = _baselines(str(spec) if spec else None, shown, strict=bool(given))
    base.is_baseline = True
    for row in base_of.values():
        row.is_baseline = True
    for row in shown:
        if row.is_baseline:
            for cell in row.cells.values():
                cell.is_baseline = True
    per_group = len(set(map(id, base_of.values()))) > 1
    return base, base_of, f"{spec} (per {', '.join(_other_keys(base_of, spec))})" if per_group else base.label


def _baselines(spec: str | None, rows: list[Row], strict: bool) -> tuple[Row, dict[str, Row]]:
    """The baseline row, and for sweeps over several keys each row's own baseline.

    A baseline that names only some swept keys (``qkv_sharing=independent`` in a sweep of
    task x qkv_sharing) matches several rows: each row is then compared with the matching row
    that has its other values (independent QKV on the same task)."""
    if not spec:
        return rows[0], {}
    wanted = split_override_string(spec) if "=" in spec else {}
    matches = [r for r in rows if wanted and wanted.items() <= r.overrides.items()]
    exact = [r for r in matches if r.overrides == wanted]
    if exact and len({frozenset(r.overrides) for r in matches}) > 1:
        # a design's rows: one row is the baseline exactly, the others set keys it leaves at the
        # config's value (norm.placement=post): they are compared with it, not with themselves
        return exact[0], {}
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
            warnings.warn(f"experiment baseline {spec!r} has no records; using the first variant", stacklevel=3)
        return rows[0], {}


def _other_keys(base_of: dict[str, Row], spec: str) -> list[str]:
    wanted = split_override_string(spec)
    return sorted({k for row in base_of.values() for k in row.overrides if k not in wanted})


def compare_with_baselines(shown: list[Row], base: Row, base_of: dict[str, Row], col_key: str | None,
                            test: str, tuned: bool) -> None:
    """Each variant against its baseline: the speed, memory and FLOPs ratios, and (the baselines
    aside) Δ with its CI and p from ``test``, and a tuned sweep's Δ at the default lr. Pivoted, each
    cell is compared with the baseline row's cell in its column."""
    pairs: list[tuple[Row, Row | None]] = []
    for row in shown:
        row_base = base_of.get(row.key, base)
        if col_key:
            pairs += [(cell, row_base.cells.get(v)) for v, cell in row.cells.items()]
        else:
            pairs.append((row, row_base))
    for row, row_base in pairs:
        if row_base is None:
            continue
        # an interleaved benchmark's rounds: the median of each round's ratio (load drifts between rounds)
        row.speed_spread = round_ratios(row.speed_rounds, row_base.speed_rounds) if row_base.speed_rounds else None
        row.speed_ratio = (row.speed_spread.median if row.speed_spread is not None
                           else ratio(row.tokens_per_s, row_base.tokens_per_s))
        row.memory_ratio = ratio(row.memory_bytes, row_base.memory_bytes)
        row.flops_ratio = ratio(row.train_flops, row_base.train_flops)
        if row is not row_base and not row.is_baseline:
            row.baseline_key = row_base.key
            row.seed_diffs = paired_differences(row.by_seed, row_base.by_seed)
            row.compare(_compare(test, row.by_seed, row_base.by_seed, row.accuracies, row_base.accuracies))
            if tuned:
                row.delta_default_lr = _compare(test, row.by_seed_default, row_base.by_seed_default,
                                                row.accuracies_default, row_base.accuracies_default).delta
    judge_speeds(pairs)  # a speed ratio timed under other loads, or far from the FLOPs ratio: marked


def paired_differences(by_seed: dict, base_by_seed: dict) -> dict[Any, float]:
    """``{seed: accuracy - the baseline's}`` over the seeds both have, in the row's seed order."""
    return {s: acc - base_by_seed[s] for s, acc in by_seed.items() if s in base_by_seed}


def _compare(test: str, by_seed: dict, base_by_seed: dict, accuracies: list[float],
             base_accuracies: list[float]) -> Comparison:
    """One set of runs against its baseline's: paired by seed, or Welch's test of the accuracies."""
    if test == "paired":
        return paired_test(by_seed, base_by_seed)
    return welch_test(accuracies, base_accuracies)


def _shown_flat(shown: list[Row], col_key: str | None) -> list[Row]:
    """The variants shown: the rows chosen, or pivoted their cells."""
    return [c for r in shown for c in r.cells.values()] if col_key else shown


def correct(shown: list[Row], col_key: str | None) -> int:
    """Holm–Bonferroni over the comparisons shown (the rows chosen, or their cells): sets each
    one's ``p_corrected``; returns how many there were."""
    compared = [r for r in _shown_flat(shown, col_key) if not r.is_baseline and r.p_value is not None]
    for row, p in zip(compared, holm([r.p_value for r in compared])):
        row.p_corrected = p
    return len(compared)


def compared_rows(shown: list[Row], col_key: str | None) -> list[Row]:
    """The comparisons shown: each row (or pivoted cell) compared with a baseline of its own."""
    return [r for r in _shown_flat(shown, col_key) if not r.is_baseline and r.baseline_key is not None]


def rounds_run(rounds: Rounds) -> int:
    """The rounds whose seeds a table's records can hold: those launched (``rounds.run``), at least
    the first (records exist) and at most the design's last."""
    return min(max(rounds.run, 1), len(rounds.looks()))


def decide_rounds(shown: list[Row], col_key: str | None, rounds: Rounds) -> int:
    """A sweep's seeds run in rounds (``seed=auto``): each comparison shown decided from its paired
    differences per seed (``Row.seed_diffs``) under the rounds' design (``ablate.sequential.decide``:
    repeated CIs, Holm across the comparisons), replacing its Δ interval and p (``Row.decide``);
    returns how many comparisons there were."""
    from ablate.sequential import decide

    compared = compared_rows(shown, col_key)
    diffs = {r.key: {_seed_number(s): d for s, d in r.seed_diffs.items() if _seed_number(s) is not None}
             for r in compared}
    verdicts = decide(diffs, rounds.design(), rounds_run(rounds))
    for row in compared:
        row.decide(verdicts[row.key])
    return len(compared)


def _seed_number(seed: Any) -> int | None:
    """A seed as the rounds count them (round j runs the seeds below its look); None for one that is no integer."""
    if isinstance(seed, bool):
        return None
    if isinstance(seed, int):
        return seed
    text = str(seed).strip()
    return int(text) if text.lstrip("-").isdigit() else None
