"""The statistics of a scale ladder: compute multipliers, their trend with scale, rank agreement.

A *ladder* is a sweep in which model size is a swept key (the *rungs*, ordered by compute) and every
variant is trained at every rung with several seeds. Its records give, per variant, rung and seed,
the training compute C (``metrics.train_flops``) and the final validation loss L
(``metrics.val.loss``). This module is pure numpy/scipy; the table layer prints what it returns. The
baseline's curve is fitted in ``ablate.report.loss_curve`` (item 1 below).

1. **The baseline's loss–compute curve** L_base(C) and its inverse C_base(L), fitted to the
   baseline's rung means (mean C, mean L over seeds), as in Kaplan et al. 2020 ("Scaling Laws for
   Neural Language Models") and Hoffmann et al. 2022 ("Training Compute-Optimal Large Language
   Models"). Which curve depends on how many rungs there are (``fit_baseline``):

   * >= 4 rungs: the saturating power law L = E + A·C^-α (E >= 0, A > 0, α > 0), fitted by
     relative least squares (``fit_power_law``). It is decreasing, so its inverse is unique; a fit
     that does not identify its parameters (α at an edge of ``ALPHA_BOUNDS``, or a flat curve)
     falls back to the next option.
   * 3 rungs: three points cannot identify three parameters (the fit would pass through them with
     no residual left to tell a good fit from a bad one), so: monotone piecewise-linear
     interpolation in log C against log L between the measured rungs and, outside them, the pure
     power law (a straight line in log-log) through the nearest two.
   * 2 rungs: the log-log line through both; any loss off the two rungs is read off that line, and
     every loss outside their range is extrapolated.
   * 1 rung: no curve (None and the reason).

   Interpolation needs a loss that falls with compute; noisy rung means may not. They are made
   monotone first by isotonic (decreasing) regression of log L on the rungs in compute order
   (pool-adjacent-violators): rungs that violate the order are pooled into one point at their mean
   log C and mean log L (``monotone_points``). If everything pools into one point the baseline's
   loss does not fall with compute and there is no curve.

2. **The compute multiplier** (the convention of the algorithmic-progress literature: how much more
   compute the baseline needs for the same loss) of a variant at a rung:
   CM = C_base(L_variant) / C_variant, both the variant's means over seeds at that rung.
   CM = 2 means the variant reaches, with C, the loss the baseline needs 2C for. It is
   ``extrapolated`` when L_variant lies outside the baseline's measured loss range (then C_base is
   read off the curve beyond the data). A loss at or below a fitted power law's asymptote E is
   never reached by the baseline: CM = inf.

3. **The scale trend** of a variant: the least-squares slope of log CM against log C over its rungs
   (C the variant's own compute). A variant whose advantage grows with scale has a positive slope;
   "On the Origin of Algorithmic Progress in AI" (arXiv 2511.21622) argues that much of measured
   algorithmic progress is of this scale-dependent kind, so a multiplier measured at small scale
   need not transfer. ``scale_dependent`` when the slope's CI excludes 0, from ``VERDICT_RUNGS``
   (4) rungs; with 3 the slope and its CI are given but no verdict (None, and the reason: between
   3 rungs the curve is interpolated, whose bend tilts the slope; see Calibration). Below 3 rungs
   there is no trend: a line through two points has no residual and so no uncertainty to judge.

4. **Rank agreement** across rungs (``rank_agreement``): Kendall's τ between the variants' orders
   at every pair of rungs, and the *decision accuracy* of DataDecide (Magnusson et al. 2025,
   "DataDecide: How to Predict Best Pretraining Data with Small Experiments"): the fraction of
   variant pairs the smallest rung orders as the largest does. Does the cheap rung pick the same
   winner as the expensive one?

**Confidence intervals** (``scale_ladder``): a parametric bootstrap over seeds (``_replicate_means``).
In each of ``n_boot`` replicates every (variant, rung) cell's mean loss, the baseline's included, is
drawn as mean·exp(s/sqrt(n)·T), T Student's t with df degrees of freedom: s is the sd of log loss
over seeds pooled over the variants at that rung (df = the sum of their n - 1; seed noise depends
on the model size more than on the switch a variant flips), so a mean from 2 or 3 seeds gets the
heavy tails a percentile bootstrap of its seeds cannot have. The baseline curve is refitted to each
replicate's means (the kind chosen on the data) and every CM and slope recomputed; the CI is the
(2.5%, 97.5%) percentile interval of the replicates (order statistics, not interpolated, so an
infinite CM stays infinite). Where the curve is interpolated (3 rungs) the replicates are read off
the saturating power law refitted through the rungs as well (replicates where it is not identified
left out), and the CI is the union of the two intervals: the interpolation's bend error is the
curve method's own, which no resampling of seeds shows. With 2 monotone baseline points (a line)
nothing can show the bend, so a CM has no CI (the reason says so). The RNG is seeded (``seed``),
so a table is reproducible. A cell with fewer than 2 seeds: the CIs it enters (its CM; its
variant's trend; everything, if it is a baseline cell) are None and say so.

**Calibration** (``scripts/ladder_calibration.py``; asserted in tests/test_ladder_calibration.py;
the figures in docs/fair-comparisons.md): on simulated ladders with a known answer (loss noise sd
0.02, 200 ladders a cell, E = 0 and E > 0, 2, 3 and 5 seeds) the CM interval covers the truth
94-98% of the time at 4 to 6 rungs (the old percentile bootstrap: 79-92%) and 97-98% at 3 rungs
(old: 37-52% with E > 0); a constant CM is marked scale-dependent in 0.5-8.5% of ladders at 4 to 6
rungs, 3.9% over them (old: 5.5-19%; 64-92% at 3 rungs with E > 0), and a trend of ±0.2 is found
at 4 rungs x 5 seeds in 98-100% of them at that noise and at 2.5 times it.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Mapping, Sequence, Union

import numpy as np

from ablate.report.loss_curve import INTERPOLATION, LINE, POWER_LAW, Curve, fit_baseline, replicate_compute
from ablate.report.stats import CONFIDENCE

Rung = Union[str, int]
#: one run: (variant, rung, seed, compute [FLOPs], final validation loss)
Record = tuple[str, Rung, int, float, float]

_ZERO = 1e-9         # a slope CI within ±_ZERO of 0 (rounding; e.g. the baseline against itself) does not exclude it


# --- results -----------------------------------------------------------------------------------------

@dataclass
class Multiplier:
    """A variant's compute multiplier at one rung: CM = C_base(loss) / compute, with its bootstrap CI.
    ``compute`` and ``loss`` are the variant's means over seeds there; ``reason`` says why a value
    or the CI is missing."""

    variant: str
    rung: Rung
    compute: float
    loss: float
    cm: float | None
    ci_low: float | None = None
    ci_high: float | None = None
    extrapolated: bool = False
    seeds: int = 0
    reason: str = ""


@dataclass
class Trend:
    """A variant's scale trend: the slope of log CM against log C over its rungs, its bootstrap CI,
    and ``scale_dependent`` (the CI excludes 0; None without a CI, or with fewer than ``VERDICT_RUNGS``
    rungs). ``reason`` says why not."""

    variant: str
    slope: float | None
    ci_low: float | None = None
    ci_high: float | None = None
    scale_dependent: bool | None = None
    reason: str = ""


@dataclass
class RankAgreement:
    """How the variants' order at the smallest rung agrees with their order at the largest: Kendall's
    ``tau`` and the DataDecide ``decision_accuracy``; ``matrix[i][j]`` is τ between rungs i and j
    (``rungs`` order; NaN where a rung does not order its variants at all). None and a reason when
    there is nothing to compare."""

    tau: float | None
    decision_accuracy: float | None
    matrix: np.ndarray | None
    rungs: list[Rung] = field(default_factory=list)
    variants: list[str] = field(default_factory=list)
    reason: str = ""


@dataclass
class Ladder:
    """Everything ``scale_ladder`` finds: the baseline curve (or None, and ``curve_reason``), one
    ``Multiplier`` per variant and rung, one ``Trend`` per variant, and the rank agreement."""

    curve: Curve | None
    curve_reason: str
    multipliers: list[Multiplier]
    trends: list[Trend]
    ranks: RankAgreement


# --- trend and rank agreement --------------------------------------------------------------------------

def slope(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least-squares slope of y on x along the last axis (NaN where y is not finite)."""
    dx = x - x.mean(-1, keepdims=True)
    with np.errstate(invalid="ignore"):
        return (dx * (y - y.mean(-1, keepdims=True))).sum(-1) / (dx * dx).sum(-1)


def _pair_agreement(small: np.ndarray, large: np.ndarray) -> float:
    """DataDecide's decision accuracy: the fraction of variant pairs ordered alike at both rungs; a
    pair tied at either rung counts as half (the rung does not decide it: a coin flip would)."""
    agree, pairs = 0.0, 0
    for i in range(len(small)):
        for j in range(i + 1, len(small)):
            a, b = np.sign(small[i] - small[j]), np.sign(large[i] - large[j])
            agree += 0.5 if a == 0 or b == 0 else float(a == b)
            pairs += 1
    return agree / pairs


def rank_agreement(scores: Mapping[str, Mapping[Rung, float]], rungs: Sequence[Rung]) -> RankAgreement:
    """Kendall's τ (scipy's tau-b: ties as scipy handles them) between the variants' scores (lower is
    better; mean loss) at every pair of rungs, and the decision accuracy from the smallest rung
    (``rungs[0]``) to the largest (``rungs[-1]``). Only variants scored at every rung count."""
    from scipy.stats import kendalltau

    rungs = list(rungs)
    variants = [v for v, s in scores.items() if all(r in s for r in rungs)]
    if len(rungs) < 2:
        return RankAgreement(None, None, None, rungs, variants, f"{len(rungs)} rung: no two rungs to compare")
    if len(variants) < 2:
        return RankAgreement(None, None, None, rungs, variants,
                             f"{len(variants)} variant scored at every rung: nothing to rank")
    table = np.array([[scores[v][r] for r in rungs] for v in variants])   # (variants, rungs)
    matrix = np.ones((len(rungs), len(rungs)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # a rung with all scores equal: tau is NaN
        for i in range(len(rungs)):
            for j in range(i + 1, len(rungs)):
                matrix[i, j] = matrix[j, i] = kendalltau(table[:, i], table[:, j]).statistic
    return RankAgreement(float(matrix[0, -1]), _pair_agreement(table[:, 0], table[:, -1]), matrix, rungs, variants)


# --- the ladder ----------------------------------------------------------------------------------------

def _cells(records: Sequence[Record], rungs: Sequence[Rung]) -> dict[str, dict[Rung, np.ndarray]]:
    """variant -> rung (in ``rungs`` order) -> its seeds' (compute, loss) as an (n_seeds, 2) array."""
    runs: dict[str, dict[Rung, dict[int, tuple[float, float]]]] = {}
    for variant, rung, seed, compute, loss in records:
        if rung not in rungs:
            raise ValueError(f"rung {rung!r} of variant {variant!r} is not among the rungs {list(rungs)}")
        cell = runs.setdefault(variant, {}).setdefault(rung, {})
        if seed in cell:
            raise ValueError(f"two runs of variant {variant!r} at rung {rung!r} with seed {seed}")
        cell[seed] = (float(compute), float(loss))
    return {v: {r: np.array(list(cells[r].values())) for r in rungs if r in cells} for v, cells in runs.items()}


def _replicate_means(cells: dict[str, dict[Rung, np.ndarray]], n_boot: int,
                     rng: np.random.Generator) -> dict[str, np.ndarray]:
    """variant -> (n_boot, rungs, 2): the rung means of (compute, loss) in ``n_boot`` parametric
    replicates. A cell's compute stays at its mean (a rung's FLOPs do not vary with the seed); its
    mean loss is drawn as mean·exp(s/sqrt(n)·Z/sqrt(W)), Z standard normal, W ~ chi2(df)/df, with s
    the sd of log loss over seeds pooled over the variants at that rung (df = the sum of their
    n - 1) and one W per rung and replicate: the mean's distribution given the seeds (Student's t
    with df degrees of freedom, the small-sample correction a plain bootstrap lacks)."""
    out = {v: np.empty((n_boot, len(by_rung), 2)) for v, by_rung in cells.items()}
    rungs = list(dict.fromkeys(r for by_rung in cells.values() for r in by_rung))
    for rung in rungs:
        here = [(v, list(by_rung).index(rung), by_rung[rung]) for v, by_rung in cells.items() if rung in by_rung]
        logs = [np.log(cell[:, 1]) for _, _, cell in here]
        df = sum(len(x) - 1 for x in logs)
        sd = np.sqrt(sum(((x - x.mean()) ** 2).sum() for x in logs) / df) if df else 0.0
        scale = 1.0 / np.sqrt(rng.chisquare(df, n_boot) / df) if df else np.ones(n_boot)
        for v, i, cell in here:
            z = rng.standard_normal(n_boot)
            out[v][:, i, 0] = cell[:, 0].mean()
            out[v][:, i, 1] = cell[:, 1].mean() * np.exp(sd / np.sqrt(len(cell)) * z * scale)
    return out


def _interval(samples: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval along axis 0: the order statistics (not interpolated, so inf stays inf);
    NaN replicates are left out."""
    tail = 100 * (1 - confidence) / 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # all-NaN columns
        return (np.nanpercentile(samples, tail, axis=0, method="lower"),
                np.nanpercentile(samples, 100 - tail, axis=0, method="higher"))


def _no_ci_reason(cells, variant: str, baseline: str) -> str:
    """Why a variant's CIs cannot be bootstrapped ("" if they can): a cell with fewer than 2 seeds."""
    for v in dict.fromkeys([baseline, variant]):
        few = [r for r, cell in cells[v].items() if len(cell) < 2]
        if few:
            return f"{v} has 1 seed at rung {few[0]!r}: no bootstrap CI"
    return ""


#: the fewest rungs whose trend gets a verdict (scale-dependent or not): below it the slope and its CI
#: are shown, the ‡ verdict is not (module docstring, "Calibration")
VERDICT_RUNGS = 4


def _union(intervals: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The smallest interval holding each of ``intervals`` (elementwise; NaN ends ignored)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return (np.nanmin(np.stack([lo for lo, _ in intervals]), 0),
                np.nanmax(np.stack([hi for _, hi in intervals]), 0))


def _trend(variant: str, log_c: np.ndarray, log_cm: np.ndarray, boot_log_c: np.ndarray,
           boot_log_cms: list[np.ndarray], no_ci: str, confidence: float) -> Trend:
    """The slope of log CM on log C at the data, and its percentile CI over the replicates (the
    union over the curve methods, one replicate array each); a verdict from ``VERDICT_RUNGS``."""
    n = len(log_c)
    if n < 3:
        return Trend(variant, None, reason=f"{n} rungs: a slope through {n} points has no uncertainty to judge")
    if not np.isfinite(log_cm).all():
        return Trend(variant, None, reason="the baseline never reaches this variant's loss at some rung (CM = inf)")
    point = float(slope(log_c, log_cm))
    if no_ci:
        return Trend(variant, point, reason=no_ci)
    intervals = []
    for k, boot_log_cm in enumerate(boot_log_cms):
        with np.errstate(invalid="ignore"):
            slopes = slope(boot_log_c, boot_log_cm)
        slopes = np.where(np.isfinite(slopes), slopes, np.nan)
        if k == 0:                       # the curve on the data (the others leave out unidentified fits)
            dropped, total = int(np.isnan(slopes).sum()), len(slopes)
        intervals.append(tuple(np.atleast_1d(x) for x in _interval(slopes, confidence)))
    low, high = (float(x[0]) for x in _union(intervals))
    notes = [f"{dropped} of {total} replicates left out (CM = inf at some rung)"] if dropped else []
    if n < VERDICT_RUNGS:
        notes.insert(0, f"{n} rungs: too few for a scale-dependent verdict (the curve between them is "
                        f"interpolated, not fitted; a verdict needs {VERDICT_RUNGS} rungs)")
        return Trend(variant, point, low, high, None, "; ".join(notes))
    return Trend(variant, point, low, high, bool(low > _ZERO or high < -_ZERO), "; ".join(notes))


def _variant_stats(variant: str, cells: dict[Rung, np.ndarray], means: np.ndarray, boot: np.ndarray,
                   boot_c_bases: list[np.ndarray], curve: Curve, no_ci: str,
                   confidence: float) -> tuple[list[Multiplier], Trend]:
    """One variant's multipliers (one per rung) and trend: ``means`` (rungs, 2) its rung means of
    (compute, loss), ``boot`` (B, rungs, 2) theirs in the replicates, ``boot_c_bases`` one (B, rungs)
    array per curve method: the baseline's compute for its losses there (the CIs: their union)."""
    c, l = means[:, 0], means[:, 1]
    cm = curve.compute_for(l) / c
    boot_cms = [boot_c_base / boot[..., 0] for boot_c_base in boot_c_bases]
    low, high = _union([_interval(boot_cm, confidence) for boot_cm in boot_cms])
    rows = []
    for i, (r, cell) in enumerate(cells.items()):
        never = "" if np.isfinite(cm[i]) else "the baseline never reaches this loss (the curve's asymptote)"
        rows.append(Multiplier(variant, r, float(c[i]), float(l[i]), float(cm[i]),
                               None if no_ci else float(low[i]), None if no_ci else float(high[i]),
                               bool(curve.extrapolated(l[i])), len(cell), "; ".join(x for x in (never, no_ci) if x)))
    with np.errstate(divide="ignore"):
        trend = _trend(variant, np.log(c), np.log(cm), np.log(boot[..., 0]), [np.log(x) for x in boot_cms],
                       no_ci, confidence)
    return rows, trend


def scale_ladder(records: Sequence[Record], baseline: str, rungs: Sequence[Rung], *, n_boot: int = 1000,
                 seed: int = 0, confidence: float = CONFIDENCE) -> Ladder:
    """The statistics of a ladder from its runs, each ``(variant, rung, seed, compute, loss)``:
    ``baseline`` names the variant the multipliers are relative to, ``rungs`` lists the rungs
    smallest (least compute) first. Means are over seeds; CIs are a parametric bootstrap over seeds
    with ``n_boot`` replicates from ``np.random.default_rng(seed)`` (module docstring)."""
    rungs = list(rungs)
    cells = _cells(records, rungs)
    if baseline not in cells:
        raise ValueError(f"baseline {baseline!r} has no runs; variants: {sorted(cells)}")
    means = {v: np.stack([cell.mean(0) for cell in by_rung.values()]) for v, by_rung in cells.items()}
    ranks = rank_agreement({v: dict(zip(cells[v], means[v][:, 1])) for v in cells}, rungs)
    curve, why = fit_baseline(means[baseline][:, 0], means[baseline][:, 1])
    if curve is None:
        return _without_curve(cells, means, why, ranks)

    boot = _replicate_means(cells, n_boot, np.random.default_rng(seed))
    variants = list(cells)
    widths = np.cumsum([0] + [len(cells[v]) for v in variants])
    losses = np.concatenate([boot[v][..., 1] for v in variants], axis=1)
    boot_c_base = replicate_compute(curve.kind, boot[baseline][..., 0], boot[baseline][..., 1], losses)
    flat, note = _flat_replicates(boot_c_base, confidence)
    if flat:
        return _without_curve(cells, means, flat, ranks)
    methods = [boot_c_base]
    if curve.kind == INTERPOLATION:      # the curve method's own error: the power law through the rungs too
        methods.append(replicate_compute(POWER_LAW, boot[baseline][..., 0], boot[baseline][..., 1], losses,
                                         identified_only=True))
    bend = "" if curve.kind != LINE else (
        f"{len(curve.points[0])} monotone baseline points: no CI (a curve through 2 points cannot show its "
        "bend, which biases a CM read between or beyond them by more than the seeds' spread; 3 rungs give one)")
    multipliers, trends = [], []
    for v, start, stop in zip(variants, widths[:-1], widths[1:]):
        rows, trend = _variant_stats(v, cells[v], means[v], boot[v], [m[:, start:stop] for m in methods], curve,
                                     _no_ci_reason(cells, v, baseline) or bend, confidence)
        multipliers += rows
        trends.append(trend)
    return Ladder(curve, f"{why}; {note}" if note else why, multipliers, trends, ranks)


def _without_curve(cells: dict[str, dict[Rung, np.ndarray]], means: dict[str, np.ndarray], why: str,
                   ranks: RankAgreement) -> Ladder:
    """A ladder whose baseline has no usable curve: every multiplier and trend None, saying ``why``."""
    rows = [Multiplier(v, r, float(c), float(l), None, seeds=len(cells[v][r]), reason=why)
            for v in cells for r, (c, l) in zip(cells[v], means[v])]
    return Ladder(None, why, rows, [Trend(v, None, reason=why) for v in cells], ranks)


def _flat_replicates(boot_c_base: np.ndarray, confidence: float) -> tuple[str, str]:
    """The bootstrap replicates without a baseline curve (all NaN in ``boot_c_base``: the baseline's
    loss does not fall with compute in them). More of them than a tail of the interval holds: the
    baseline's fall is not told apart from its seeds' spread, so there is no curve to read a CM off
    (the reason, ""); fewer: ("", a note that they are left out of the CIs)."""
    n_flat, n = int(np.isnan(boot_c_base).all(axis=1).sum()), len(boot_c_base)
    if not n_flat:
        return "", ""
    seen = f"the baseline's loss does not fall with compute in {n_flat} of {n} bootstrap replicates"
    if n_flat > n * (1 - confidence) / 2:
        return (f"baseline flat within its seeds' spread: {seen}, so there is no curve to read a compute "
                "multiplier off (more seeds, or rungs further apart)"), ""
    return "", f"{seen}: those replicates are left out of the CIs"
