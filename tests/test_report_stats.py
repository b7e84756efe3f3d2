"""The table's statistics: the paired t-test over seeds, Welch's test, 95% CIs of the difference to
the baseline, the Holm–Bonferroni correction, and what they do to a table's false-positive rate.

The records are synthetic ``result.json`` dicts (tests/test_table.py's ``record``); everything under
test is the real code, checked against scipy where scipy has the same test."""

from __future__ import annotations

import csv
import io
import math

import numpy as np
import pytest
from scipy import stats
from test_table import record, write_sweep

from ablate.report import build_table, holm, load_records, paired_test, render, welch_test
from ablate.report.cli import main

ALPHA = 0.05


# --- the tests themselves, against scipy -----------------------------------------------------------

def test_paired_test_matches_scipy_on_the_shared_seeds():
    rng = np.random.default_rng(0)
    base = {s: 0.8 + 0.05 * rng.normal() for s in range(6)}
    row = {s: base.get(s, 0.8) - 0.02 + 0.01 * rng.normal() for s in range(1, 7)}  # no seed 0; 6 has no pair
    cmp = paired_test(row, base)
    shared = [1, 2, 3, 4, 5]
    ref = stats.ttest_rel([row[s] for s in shared], [base[s] for s in shared])
    ci = ref.confidence_interval(0.95)
    assert cmp.n == 5
    assert cmp.delta == pytest.approx(np.mean([row[s] - base[s] for s in shared]))
    assert cmp.p_value == pytest.approx(ref.pvalue)
    assert (cmp.ci_low, cmp.ci_high) == pytest.approx((ci.low, ci.high))
    # the CI is mean ± t_{0.975,n-1}·sd/√n of the differences
    d = np.array([row[s] - base[s] for s in shared])
    half = stats.t.ppf(0.975, 4) * d.std(ddof=1) / math.sqrt(5)
    assert cmp.ci_high - cmp.delta == pytest.approx(half)


def test_welch_test_matches_scipy():
    a, b = [0.71, 0.74, 0.69, 0.73], [0.80, 0.78, 0.83]
    cmp = welch_test(a, b)
    ref = stats.ttest_ind(a, b, equal_var=False)
    ci = ref.confidence_interval(0.95)
    assert cmp.p_value == pytest.approx(ref.pvalue)
    assert cmp.delta == pytest.approx(np.mean(a) - np.mean(b))
    assert (cmp.ci_low, cmp.ci_high) == pytest.approx((ci.low, ci.high))
    assert cmp.n is None


def test_small_and_degenerate_comparisons():
    one = paired_test({0: 0.9}, {0: 0.8, 1: 0.7})  # one shared seed: the difference, nothing more
    assert one.n == 1 and one.delta == pytest.approx(0.1) and one.p_value is None and one.ci_low is None
    assert paired_test({3: 0.9}, {0: 0.8}).delta is None  # no shared seed
    same = paired_test({0: 0.5, 1: 0.6}, {0: 0.5, 1: 0.6})  # identical runs: undefined, as in scipy
    assert same.delta == 0 and same.p_value is None
    shifted = paired_test({0: 0.6, 1: 0.7}, {0: 0.5, 1: 0.6})  # a constant difference: t = inf, p = 0
    assert shifted.p_value == 0.0 and shifted.ci_low == pytest.approx(0.1) == shifted.ci_high
    assert welch_test([0.9], [0.8, 0.7]).p_value is None


def test_holm_step_down():
    # sorted 0.005, 0.01, 0.03, 0.04 -> x4, x3, x2, x1 = 0.02, 0.03, 0.06, 0.04 -> monotone: 0.06 for the last
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([None, 0.02, None]) == [None, 0.02, None]  # None is no comparison
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert holm([]) == []


# --- in the table -------------------------------------------------------------------------------

def _csv(table):
    return list(csv.DictReader(io.StringIO(render(table, "csv"))))


def test_the_table_pairs_runs_by_seed(tmp_path):
    """Seed effects are shared: a variant 1 point below the baseline on every seed is significant
    paired, not unpaired; pairs come from config.seed, whatever order the jobs ran in, and a seed
    the baseline lacks does not count."""
    base = {0: 0.80, 1: 0.88, 2: 0.74}
    worse = {3: 0.83, 1: 0.868, 0: 0.791, 2: 0.731}  # 0.9-1.2 points below on every shared seed
    recs, n = [], 0
    for v, accs in (("base", base), ("worse", worse)):
        for s, acc in accs.items():
            recs.append(record(n, [f"qkv_sharing={v}", f"seed={s}"], acc=acc))
            n += 1
    t = build_table(load_records(write_sweep(tmp_path, recs)))
    row = t.rows[1]
    assert row.n == 4 and row.n_paired == 3
    assert row.delta == pytest.approx(np.mean([worse[s] - base[s] for s in (0, 1, 2)]))
    ref = stats.ttest_rel([worse[s] for s in (0, 1, 2)], [base[s] for s in (0, 1, 2)])
    assert row.p_value == pytest.approx(ref.pvalue) and row.mark == "**"
    assert row.p_corrected == row.p_value  # one comparison: Holm changes nothing
    welch = build_table(recs, test="welch").rows[1]
    assert welch.p_value > 0.5 and welch.mark == ""  # the seed spread swamps 1 point unpaired

    line = _csv(t)[1]
    for col, value in (("delta", row.delta), ("delta_ci_low", row.delta_ci_low),
                       ("delta_ci_high", row.delta_ci_high), ("p_value", row.p_value),
                       ("p_corrected", row.p_corrected)):
        assert float(line[col]) == pytest.approx(value), col
    assert line["n_paired"] == "3"
    text = " ".join(render(t, "terminal").split())
    assert "paired t-test over seeds, Holm–Bonferroni-corrected across 1 comparison" in text
    assert f"{100 * row.delta:+.1f} [{100 * row.delta_ci_low:+.1f}, {100 * row.delta_ci_high:+.1f}]" in text
    assert "Holm--Bonferroni-corrected" in render(t, "latex") and r"$\Delta$" in render(t, "latex")


def test_marks_use_the_corrected_p(tmp_path):
    """Three variants each at raw p just under 0.05: alone each would be marked; corrected across
    three comparisons none is."""
    recs, n = [], 0
    # differences per seed chosen so that the paired test gives p ~ 0.03 for each variant
    diffs = [0.010, 0.030, 0.011, 0.025]
    for v in ("base", "a", "b", "c"):
        for s, d in enumerate(diffs):
            recs.append(record(n, [f"qkv_sharing={v}", f"seed={s}"], acc=0.7 + (0 if v == "base" else d)))
            n += 1
    t = build_table(recs)
    raw = [r.p_value for r in t.rows[1:]]
    assert all(0.01 < p < ALPHA for p in raw), raw
    assert [r.p_corrected for r in t.rows[1:]] == pytest.approx([min(1, 3 * raw[0])] * 3)
    assert [r.mark for r in t.rows] == ["", "", "", ""]
    assert "across 3 comparisons" in t.caption()
    # the same variant alone in a table (--rows): one comparison, marked
    alone = build_table(recs, rows=["base", "a"])
    assert alone.n_comparisons == 1 and alone.rows[1].mark == "*"


def _null_or_shifted_table(rng, shift=0.0, test="paired", rows=4, seeds=5):
    """A table of ``rows`` variants x ``seeds`` seeds; every run = 0.7 + the seed's effect (shared
    by all variants: same data order and held-out data) + its own noise; the last row shifted."""
    seed_effect = rng.normal(0, 0.05, size=seeds)
    recs, n = [], 0
    for v in range(rows):
        for s in range(seeds):
            acc = 0.7 + seed_effect[s] + rng.normal(0, 0.01) + (shift if v == rows - 1 else 0.0)
            recs.append(record(n, [f"qkv_sharing=v{v}", f"seed={s}"], acc=acc))
            n += 1
    return build_table(recs, test=test)


@pytest.mark.slow  # seconds: many simulated sweeps
def test_corrected_false_positive_rate_of_identical_variants():
    """2000 tables of 4 identical variants x 5 seeds: the chance that any row is marked is at most
    alpha after the correction; uncorrected (the raw p of the same tables) it is far above.

    The bound is checked up to the Monte Carlo error of 2000 tables (3 standard errors of a 5% rate,
    1.5 points): Holm's rate here is 4.7% (20,000 tables), so a 2000-table estimate lands above
    5.0% about a quarter of the time; the uncorrected rate (~13%) is well outside the margin."""
    rng = np.random.default_rng(2026)
    reps = 2000
    marked = uncorrected = 0
    for _ in range(reps):
        table = _null_or_shifted_table(rng)
        marked += any(r.mark for r in table.rows)
        uncorrected += any(r.p_value is not None and r.p_value < ALPHA for r in table.rows)
    margin = 3 * math.sqrt(ALPHA * (1 - ALPHA) / reps)
    assert marked / reps <= ALPHA + margin, marked / reps
    assert uncorrected / reps > ALPHA + margin, uncorrected / reps
    assert 0.02 < marked / reps  # the test is not simply switched off


def test_a_real_difference_is_detected_and_pairing_is_what_detects_it():
    """One variant 4 points better (per-run noise 1 point, seed effects 5 points): the paired test
    marks it in most tables; Welch's, blind to the pairing, almost never."""
    reps = 300
    paired = sum(bool(_null_or_shifted_table(np.random.default_rng(i), 0.04).rows[-1].mark) for i in range(reps))
    welch = sum(bool(_null_or_shifted_table(np.random.default_rng(i), 0.04, "welch").rows[-1].mark)
                for i in range(reps))
    assert paired / reps >= 0.85, paired / reps
    assert welch / reps <= 0.2, welch / reps


def test_cli_test_flag(tmp_path, capsys):
    recs = [record(n, [f"qkv_sharing={v}", f"seed={s}"], acc=0.8 - 0.05 * i + 0.01 * s * (i + 1))
            for n, (i, v, s) in enumerate((i, v, s) for i, v in enumerate("abc") for s in range(3))]
    sweep = write_sweep(tmp_path / "sweep", recs)
    assert main([str(sweep), "--format", "markdown", "--test", "welch", "--no-wandb"]) == 0
    out = capsys.readouterr().out
    assert "Welch's t-test (unpaired, unequal variances), Holm–Bonferroni-corrected across 2 comparisons" in out
    assert main([str(sweep), "--format", "markdown", "--no-wandb"]) == 0
    assert "paired t-test over seeds, Holm–Bonferroni-corrected across 2 comparisons" in capsys.readouterr().out
    with pytest.raises(SystemExit) as err:
        main([str(sweep), "--test", "mannwhitney"])
    assert err.value.code == 2
