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
   need not transfer. ``scale_dependent`` when the slope's CI excludes 0. Below 3 rungs there is no
   trend: a line through two points has no residual and so no uncertainty to judge.

4. **Rank agreement** across rungs (``rank_agreement``): Kendall's τ between the variants' orders
   at every pair of rungs, and the *decision accuracy* of DataDecide (Magnusson et al. 2025,
   "DataDecide: How to Predict Best Pretraining Data with Small Experiments"): the fraction of
   variant pairs the smallest rung orders as the largest does. Does the cheap rung pick the same
   winner as the expensive one?

**Confidence intervals** (``scale_ladder``): a percentile bootstrap over seeds. In each of
``n_boot`` replicates the seeds of every (variant, rung) cell, the baseline's included, are
resampled with replacement, independently per cell (after spreading them about their mean by
sqrt(n/(n-1)), so that a resampled mean varies as s^2/n rather than the plain bootstrap's
(n-1)/n of that, which matters with 5 seeds; cf. Davison & Hinkley 1997 on rescaled residuals);
the rung means are recomputed, the baseline curve refitted (the kind chosen on the data, refitted
to the replicate's means), and every CM and slope recomputed. The CI is the (2.5%, 97.5%)
percentile interval of the replicates (the lower and upper order statistics, not interpolated, so
an infinite CM stays infinite). The RNG is seeded (``seed``), so a table is reproducible. A cell
with fewer than 2 seeds has no spread to resample: the CIs it enters (its CM; its variant's trend;
everything, if it is a baseline cell) are None and say so. Even so, a percentile interval from 5 seeds cannot have the t distribution's heavy
tails: on simulated ladders (4 rungs, 5 seeds, tests/test_scaling_math.py) the 95% CI of a CM
covers the truth about 90% of the time. Read the intervals as approximate.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Mapping, Sequence, Union

import numpy as np

from ablate.report.loss_curve import Curve, fit_baseline, replicate_compute
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
    and ``scale_dependent`` (the CI excludes 0; None without a CI). ``reason`` says why not."""

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


def _widened(cell: np.ndarray) -> np.ndarray:
    """A cell's seeds spread about their mean by sqrt(n/(n-1)): the mean of n values resampled from
    them then varies as s^2/n (s the sample sd), not (n-1)/n of it as with the raw values."""
    n = len(cell)
    if n < 2:
        return cell
    mean = cell.mean(0)
    return mean + (cell - mean) * np.sqrt(n / (n - 1))


def _bootstrap_means(cells: dict[str, dict[Rung, np.ndarray]], n_boot: int,
                     rng: np.random.Generator) -> dict[str, np.ndarray]:
    """variant -> (n_boot, rungs, 2): the rung means of (compute, loss) with each cell's seeds
    (``_widened``) resampled with replacement."""
    out = {}
    for v, by_rung in cells.items():
        means = [_widened(cell)[rng.integers(0, len(cell), size=(n_boot, len(cell)))].mean(1)
                 for cell in by_rung.values()]
        out[v] = np.stack(means, axis=1)
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


def _trend(variant: str, log_c: np.ndarray, log_cm: np.ndarray, boot_log_c: np.ndarray,
           boot_log_cm: np.ndarray, no_ci: str, confidence: float) -> Trend:
    """The slope of log CM on log C at the data, and its percentile CI over the replicates."""
    n = len(log_c)
    if n < 3:
        return Trend(variant, None, reason=f"{n} rungs: a slope through {n} points has no uncertainty to judge")
    if not np.isfinite(log_cm).all():
        return Trend(variant, None, reason="the baseline never reaches this variant's loss at some rung (CM = inf)")
    point = float(slope(log_c, log_cm))
    if no_ci:
        return Trend(variant, point, reason=no_ci)
    with np.errstate(invalid="ignore"):
        slopes = slope(boot_log_c, boot_log_cm)
    slopes = np.where(np.isfinite(slopes), slopes, np.nan)
    low, high = (float(x) for x in _interval(slopes, confidence))
    dropped = int(np.isnan(slopes).sum())
    reason = f"{dropped} of {len(slopes)} replicates left out (CM = inf at some rung)" if dropped else ""
    return Trend(variant, point, low, high, bool(low > _ZERO or high < -_ZERO), reason)


def _variant_stats(variant: str, cells: dict[Rung, np.ndarray], means: np.ndarray, boot: np.ndarray,
                   boot_c_base: np.ndarray, curve: Curve, no_ci: str,
                   confidence: float) -> tuple[list[Multiplier], Trend]:
    """One variant's multipliers (one per rung) and trend: ``means`` (rungs, 2) its rung means of
    (compute, loss), ``boot`` (B, rungs, 2) theirs in the replicates, ``boot_c_base`` (B, rungs) the
    baseline's compute for its losses there."""
    c, l = means[:, 0], means[:, 1]
    cm = curve.compute_for(l) / c
    boot_cm = boot_c_base / boot[..., 0]
    low, high = _interval(boot_cm, confidence)
    rows = []
    for i, (r, cell) in enumerate(cells.items()):
        never = "" if np.isfinite(cm[i]) else "the baseline never reaches this loss (the curve's asymptote)"
        rows.append(Multiplier(variant, r, float(c[i]), float(l[i]), float(cm[i]),
                               None if no_ci else float(low[i]), None if no_ci else float(high[i]),
                               bool(curve.extrapolated(l[i])), len(cell), "; ".join(x for x in (never, no_ci) if x)))
    with np.errstate(divide="ignore"):
        trend = _trend(variant, np.log(c), np.log(cm), np.log(boot[..., 0]), np.log(boot_cm), no_ci, confidence)
    return rows, trend


def scale_ladder(records: Sequence[Record], baseline: str, rungs: Sequence[Rung], *, n_boot: int = 1000,
                 seed: int = 0, confidence: float = CONFIDENCE) -> Ladder:
    """The statistics of a ladder from its runs, each ``(variant, rung, seed, compute, loss)``:
    ``baseline`` names the variant the multipliers are relative to, ``rungs`` lists the rungs
    smallest (least compute) first. Means are over seeds; CIs are the percentile bootstrap over
    seeds with ``n_boot`` replicates from ``np.random.default_rng(seed)`` (module docstring)."""
    rungs = list(rungs)
    cells = _cells(records, rungs)
    if baseline not in cells:
        raise ValueError(f"baseline {baseline!r} has no runs; variants: {sorted(cells)}")
    means = {v: np.stack([cell.mean(0) for cell in by_rung.values()]) for v, by_rung in cells.items()}
    ranks = rank_agreement({v: dict(zip(cells[v], means[v][:, 1])) for v in cells}, rungs)
    curve, why = fit_baseline(means[baseline][:, 0], means[baseline][:, 1])
    if curve is None:
        return _without_curve(cells, means, why, ranks)

    boot = _bootstrap_means(cells, n_boot, np.random.default_rng(seed))
    variants = list(cells)
    widths = np.cumsum([0] + [len(cells[v]) for v in variants])
    boot_c_base = replicate_compute(curve.kind, boot[baseline][..., 0], boot[baseline][..., 1],
                                     np.concatenate([boot[v][..., 1] for v in variants], axis=1))
    flat, note = _flat_replicates(boot_c_base, confidence)
    if flat:
        return _without_curve(cells, means, flat, ranks)
    multipliers, trends = [], []
    for v, start, stop in zip(variants, widths[:-1], widths[1:]):
        rows, trend = _variant_stats(v, cells[v], means[v], boot[v], boot_c_base[:, start:stop], curve,
                                     _no_ci_reason(cells, v, baseline), confidence)
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
