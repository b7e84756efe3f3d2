"""The statistics of a scale ladder (ablate.report.scaling) on synthetic ladders with a known answer.

The baseline follows a known saturating power law L = E + A·C^-α; a variant "shifted by k× compute"
reaches at C the loss the baseline reaches at k·C, so its compute multiplier is k at every rung.
Pure numpy: no records on disk, no subprocess."""

from __future__ import annotations

import numpy as np
import pytest

from ablate.report.loss_curve import INTERPOLATION, LINE, POWER_LAW, fit_baseline, fit_power_law, monotone_points
from ablate.report.scaling import rank_agreement, scale_ladder

E, A, ALPHA = 1.7, 7e4, 0.3                       # L ≈ 4.0 at 1e15 FLOPs, ≈ 2.4 at 6.4e16
RUNGS4 = np.array([1e15, 4e15, 1.6e16, 6.4e16])


def law(c, e=E, a=A, alpha=ALPHA):
    return e + a * np.asarray(c, dtype=float) ** -alpha


def law_compute(loss, e=E, a=A, alpha=ALPHA):
    """The true baseline's inverse, C(L)."""
    return ((np.asarray(loss) - e) / a) ** (-1 / alpha)


def ladder_records(variants, computes, seeds=1, noise=0.0, rng=None):
    """Runs of ``variants`` ({name: loss(C)}) at every rung of ``computes``; ``noise``: Gaussian
    sd on log-loss per run."""
    rng = rng or np.random.default_rng(0)
    return [(name, i, s, c, float(loss(c) * np.exp(noise * rng.normal())))
            for name, loss in variants.items() for i, c in enumerate(computes) for s in range(seeds)]


def by_variant(ladder, name):
    return [m for m in ladder.multipliers if m.variant == name]


def trend(ladder, name):
    return next(t for t in ladder.trends if t.variant == name)


# --- the baseline curve --------------------------------------------------------------------------------

def test_power_law_fit_recovers_the_curve():
    e, a, alpha, c_ref, ok = fit_power_law(RUNGS4, law(RUNGS4))
    assert ok[0]
    assert alpha[0] == pytest.approx(ALPHA, rel=1e-9)
    assert e[0] == pytest.approx(E, rel=1e-9)
    assert a[0] * c_ref[0] ** ALPHA == pytest.approx(A, rel=1e-8)


def test_power_law_fits_a_batch_of_rows_at_once():
    rows = np.stack([law(RUNGS4), law(RUNGS4, e=0.0), law(RUNGS4, alpha=0.5, a=3e7)])
    e, a, alpha, _, ok = fit_power_law(np.broadcast_to(RUNGS4, rows.shape), rows)
    assert ok.all()
    np.testing.assert_allclose(alpha, [0.3, 0.3, 0.5], rtol=1e-8)
    np.testing.assert_allclose(e, [E, 0.0, E], atol=1e-8)


def test_curve_kind_follows_the_number_of_rungs():
    assert fit_baseline(RUNGS4, law(RUNGS4))[0].kind == POWER_LAW
    curve, why = fit_baseline(RUNGS4[:3], law(RUNGS4[:3]))
    assert curve.kind == INTERPOLATION and "three parameters" in why
    curve, why = fit_baseline(RUNGS4[:2], law(RUNGS4[:2]))
    assert curve.kind == LINE and "extrapolated" in why
    curve, why = fit_baseline(RUNGS4[:1], law(RUNGS4[:1]))
    assert curve is None and "1 rung" in why


def test_a_flat_baseline_is_not_a_power_law_and_a_rising_one_has_no_curve():
    curve, why = fit_baseline(RUNGS4, np.array([3.0, 2.9, 2.9, 2.95]))
    assert curve.kind != POWER_LAW and "not identified" in why
    curve, why = fit_baseline(RUNGS4, np.array([2.0, 2.1, 2.2, 2.3]))
    assert curve is None and "does not fall" in why


def test_non_monotone_rungs_are_pooled_and_the_inverse_stays_monotone():
    log_c, log_l = monotone_points(RUNGS4[:3], np.array([3.0, 2.5, 2.6]))
    assert len(log_c) == 2 and np.all(np.diff(log_l) < 0)
    np.testing.assert_allclose(np.exp(log_l[1]), np.sqrt(2.5 * 2.6))    # the pooled point: its geometric mean
    curve, why = fit_baseline(RUNGS4[:3], np.array([3.0, 2.5, 2.6]))
    assert curve.kind == LINE and "pooled" in why
    losses = np.linspace(2.3, 3.2, 50)
    assert np.all(np.diff(curve.compute_for(losses)) < 0)                 # lower loss, more compute


def test_the_curve_inverts_its_own_loss():
    for n in (2, 3, 4):
        curve, _ = fit_baseline(RUNGS4[:n], law(RUNGS4[:n]))
        c = np.geomspace(3e14, 3e17, 7)
        np.testing.assert_allclose(curve.compute_for(curve.loss_at(c)), c, rtol=1e-8)


# --- compute multipliers -------------------------------------------------------------------------------

def test_a_variant_shifted_by_2x_compute_has_cm_2_at_every_rung():
    ladder = scale_ladder(ladder_records({"base": law, "x2": lambda c: law(2 * c)}, RUNGS4), "base", range(4))
    assert ladder.curve.kind == POWER_LAW
    rows = by_variant(ladder, "x2")
    np.testing.assert_allclose([m.cm for m in rows], 2.0, rtol=1e-6)
    assert [m.extrapolated for m in rows] == [False, False, False, True]   # L(2·C_top) < the best measured
    np.testing.assert_allclose([m.cm for m in by_variant(ladder, "base")], 1.0, rtol=1e-6)
    assert abs(trend(ladder, "x2").slope) < 1e-6
    assert all(m.ci_low is None and "1 seed" in m.reason for m in rows)  # one seed: no CI, and it says so


def test_three_rungs_interpolate_cm_2_at_the_rungs_inside_the_measured_range():
    computes = RUNGS4[:3]
    ladder = scale_ladder(ladder_records({"base": law, "x2": lambda c: law(2 * c)}, computes), "base", range(3))
    assert ladder.curve.kind == INTERPOLATION
    rows = by_variant(ladder, "x2")
    # rungs 0 and 1: L(2C) lies between two measured rungs, interpolated in log-log; the error is the
    # curvature of log L in log C over a 4x step (E makes it bend)
    np.testing.assert_allclose([m.cm for m in rows[:2]], 2.0, rtol=0.05)
    # rung 2: L(2C) is below the best measured loss, read off the pure power law through the top two
    # rungs, which ignores the asymptote E: it under-states the compute needed there
    assert rows[2].extrapolated and 1.7 < rows[2].cm < 2.0
    assert -0.1 < trend(ladder, "x2").slope < 0                       # that top rung tilts the slope down


def test_two_rungs_of_a_pure_power_law_give_cm_exactly_but_no_trend():
    pure = lambda c: law(c, e=0.0)                                      # a line in log-log: exact
    ladder = scale_ladder(ladder_records({"base": pure, "x2": lambda c: pure(2 * c)}, RUNGS4[:2], seeds=3),
                          "base", range(2))
    assert ladder.curve.kind == LINE
    np.testing.assert_allclose([m.cm for m in by_variant(ladder, "x2")], 2.0, rtol=1e-9)
    t = trend(ladder, "x2")
    assert t.slope is None and t.reason.startswith("2 rungs")


def test_one_rung_has_no_curve_and_says_why():
    ladder = scale_ladder(ladder_records({"base": law, "x2": lambda c: law(2 * c)}, RUNGS4[:1]), "base", [0])
    assert ladder.curve is None and "1 rung" in ladder.curve_reason
    assert all(m.cm is None and m.reason == ladder.curve_reason for m in ladder.multipliers)
    assert all(t.slope is None for t in ladder.trends)
    assert ladder.ranks.tau is None and "1 rung" in ladder.ranks.reason


def test_extrapolated_when_the_variant_beats_the_baselines_best_loss():
    variants = {"base": law, "much better": lambda c: law(100 * c), "worse": lambda c: law(c / 100),
                "slightly better": lambda c: law(1.5 * c)}
    ladder = scale_ladder(ladder_records(variants, RUNGS4), "base", range(4))
    best = law(RUNGS4).min()
    for m in ladder.multipliers:
        assert m.extrapolated == (m.loss < best - 1e-12 or m.loss > law(RUNGS4).max() + 1e-12)
    assert all(m.extrapolated for m in by_variant(ladder, "much better")[1:])
    assert all(m.extrapolated for m in by_variant(ladder, "worse")[:-1])
    assert not any(m.extrapolated for m in by_variant(ladder, "slightly better")[:-1])
    np.testing.assert_allclose([m.cm for m in by_variant(ladder, "much better")], 100, rtol=1e-6)


def test_a_loss_below_the_asymptote_is_never_reached():
    ladder = scale_ladder(ladder_records({"base": law, "magic": lambda c: 0.9 * E}, RUNGS4), "base", range(4))
    rows = by_variant(ladder, "magic")
    assert all(m.cm == np.inf and "never reaches" in m.reason for m in rows)
    assert trend(ladder, "magic").slope is None


# --- the scale trend -----------------------------------------------------------------------------------

ALPHA2 = 0.36
A2 = A * RUNGS4[0] ** (ALPHA2 - ALPHA)                  # equal to the baseline at the smallest rung


def steeper(c):
    return law(c, a=A2, alpha=ALPHA2)


def test_a_different_exponent_gives_the_analytic_slope():
    # CM(C) = C_base(L'(C)) / C with C_base(L) = ((L - E)/A)^(-1/α) and L'(C) - E = A'·C^-α', so
    # log CM = -(log A' - α'·log C - log A)/α - log C: a line in log C of slope α'/α - 1
    analytic = ALPHA2 / ALPHA - 1
    true_cm = law_compute(steeper(RUNGS4)) / RUNGS4
    assert np.polyfit(np.log(RUNGS4), np.log(true_cm), 1)[0] == pytest.approx(analytic, rel=1e-9)
    ladder = scale_ladder(ladder_records({"base": law, "steeper": steeper}, RUNGS4), "base", range(4))
    assert trend(ladder, "steeper").slope == pytest.approx(analytic, rel=1e-6)
    np.testing.assert_allclose([m.cm for m in by_variant(ladder, "steeper")], true_cm, rtol=1e-6)


def test_a_different_exponent_is_scale_dependent_under_small_noise_and_a_shift_is_not():
    variants = {"base": law, "steeper": steeper, "x2": lambda c: law(2 * c)}
    records = ladder_records(variants, RUNGS4, seeds=5, noise=0.002, rng=np.random.default_rng(1))
    ladder = scale_ladder(records, "base", range(4), n_boot=300)
    t = trend(ladder, "steeper")
    assert t.scale_dependent and t.ci_low < ALPHA2 / ALPHA - 1 < t.ci_high
    assert abs(t.slope - (ALPHA2 / ALPHA - 1)) < 0.05
    t = trend(ladder, "x2")
    assert t.scale_dependent is False and t.ci_low < 0 < t.ci_high
    assert not trend(ladder, "base").scale_dependent                 # the baseline against itself


def test_the_bootstrap_is_reproducible_and_its_size_configurable():
    records = ladder_records({"base": law, "x2": lambda c: law(2 * c)}, RUNGS4, seeds=4, noise=0.01)
    one, two = (scale_ladder(records, "base", range(4), n_boot=100, seed=7) for _ in range(2))
    assert [(m.ci_low, m.ci_high) for m in one.multipliers] == [(m.ci_low, m.ci_high) for m in two.multipliers]
    other = scale_ladder(records, "base", range(4), n_boot=100, seed=8)
    assert [m.ci_low for m in one.multipliers] != [m.ci_low for m in other.multipliers]


def test_bootstrap_cis_cover_the_true_multiplier_on_simulated_ladders():
    """100 ladders of 4 rungs x 5 seeds, 1% Gaussian noise on log-loss, a 1.5x-shifted variant."""
    rng = np.random.default_rng(2025)
    variants = {"base": law, "x1.5": lambda c: law(1.5 * c)}
    covered, widths = [], []
    for _ in range(100):
        ladder = scale_ladder(ladder_records(variants, RUNGS4, seeds=5, noise=0.01, rng=rng), "base", range(4),
                              n_boot=200, seed=int(rng.integers(1 << 31)))
        for m in by_variant(ladder, "x1.5"):
            covered.append(m.ci_low <= 1.5 <= m.ci_high)
            widths.append(np.log(m.ci_high / m.ci_low))
    coverage = np.mean(covered)
    print(f"95% parametric-bootstrap CI of CM = 1.5: coverage {coverage:.3f} over {len(covered)} (ladder, rung) pairs; "
          f"median width x{np.exp(np.median(widths)):.2f}")
    assert abs(coverage - 0.95) <= 3 * np.sqrt(0.95 * 0.05 / 100)   # 3 Monte-Carlo SEs over the 100 ladders


# --- rank agreement ------------------------------------------------------------------------------------

def scores(*orders):
    """{variant: {rung: loss}} with variant v's loss at rung i = orders[i][v]."""
    return {v: {i: float(o[v]) for i, o in enumerate(orders)} for v in range(len(orders[0]))}


def test_identical_rankings_agree_fully():
    r = rank_agreement(scores([1, 2, 3, 4], [0.5, 0.6, 0.7, 0.8], [0.1, 0.2, 0.3, 0.4]), [0, 1, 2])
    assert r.tau == pytest.approx(1.0) and r.decision_accuracy == 1.0
    np.testing.assert_allclose(r.matrix, np.ones((3, 3)))


def test_reversed_rankings_disagree_fully():
    r = rank_agreement(scores([1, 2, 3, 4], [4, 3, 2, 1]), [0, 1])
    assert r.tau == pytest.approx(-1.0) and r.decision_accuracy == 0.0


def test_one_swapped_pair_of_four():
    r = rank_agreement(scores([1, 2, 3, 4], [1.5, 3, 2, 4], [1, 3, 2, 4]), [0, 1, 2])
    assert r.decision_accuracy == pytest.approx(5 / 6)
    assert r.tau == pytest.approx(2 / 3)                                 # (5 concordant - 1 discordant) / 6
    assert r.matrix[1, 2] == pytest.approx(1.0)


def test_ties_count_half():
    r = rank_agreement(scores([1, 1, 3], [1, 2, 3]), [0, 1])
    assert r.decision_accuracy == pytest.approx(2.5 / 3)


def test_rank_agreement_needs_two_rungs_and_two_variants():
    r = rank_agreement(scores([1, 2, 3]), [0])
    assert r.tau is None and r.decision_accuracy is None and "1 rung" in r.reason
    r = rank_agreement({"only": {0: 1.0, 1: 0.5}}, [0, 1])
    assert r.tau is None and "1 variant" in r.reason


def _spread_runs(fall: float, spread: float) -> list:
    """2 rungs x 3 seeds: the baseline's loss falls by ``fall`` with seeds ``spread`` apart; ``x2``
    sits well below it with little noise (the shape of a tiny real μP ladder)."""
    runs = []
    for i, c in enumerate(RUNGS4[:2]):
        for s, d in enumerate((-spread, 0.0, spread)):
            runs += [("base", i, s, c, 3.0 - fall * i + d), ("x2", i, s, c, 2.5 - 0.3 * i + d / 100)]
    return runs


def test_a_baseline_falling_by_less_than_its_seed_spread_has_no_cm_and_says_why():
    """On the old code the bootstrap replicates in which the baseline's loss did not fall pooled into
    one point and the log-log inverse indexed a second one: IndexError, no table."""
    ladder = scale_ladder(_spread_runs(fall=0.01, spread=0.5), "base", range(2), n_boot=200)
    assert ladder.curve is None and "flat within its seeds' spread" in ladder.curve_reason
    assert all(m.cm is None and m.reason == ladder.curve_reason for m in ladder.multipliers)
    assert all(t.slope is None for t in ladder.trends)


def test_a_few_flat_replicates_are_left_out_of_the_cis_and_named():
    ladder = scale_ladder(_spread_runs(fall=0.3, spread=0.15), "base", range(2), n_boot=400)
    assert ladder.curve is not None and "left out of the CIs" in ladder.curve_reason
    m = by_variant(ladder, "x2")[1]
    assert m.cm is not None                       # the CM stands; 2 rungs give it no CI, and say why
    assert m.ci_low is None and "cannot show its bend" in m.reason
