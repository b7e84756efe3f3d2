"""The statistics of a scale ladder: compute multipliers, their trend with scale, rank agreement.

A *ladder* is a sweep in which model size is a swept key (the *rungs*, ordered by compute) and every
variant is trained at every rung with several seeds. Its records give, per variant, rung and seed,
the training compute C (``metrics.train_flops``) and the final validation loss L
(``metrics.val.loss``). This module is pure numpy/scipy; the table layer prints what it returns.

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

from ablate.report.stats import CONFIDENCE

Rung = Union[str, int]
#: one run: (variant, rung, seed, compute [FLOPs], final validation loss)
Record = tuple[str, Rung, int, float, float]

POWER_LAW = "power law"
INTERPOLATION = "log-log interpolation"
LINE = "log-log line"
#: the exponents a power-law fit may take; an optimum at either edge is "not identified"
ALPHA_BOUNDS = (1e-3, 3.0)
_GRID = 64           # α grid (log-spaced) that brackets the optimum
_GOLDEN_STEPS = 48   # golden-section steps within the bracket (2 grid steps): 0.618^48 · 0.25 ≈ 2e-11
_BOOT_STEPS = 24     # in the bootstrap replicates: 0.618^24 · 0.25 ≈ 2e-6 in log α
_ZERO = 1e-9         # a slope CI within ±_ZERO of 0 (rounding; e.g. the baseline against itself) does not exclude it


# --- results -----------------------------------------------------------------------------------------

@dataclass
class Curve:
    """The baseline's loss–compute curve, fitted to its rung means (``compute`` ascending).

    ``params`` (power law only): E, A, alpha and c_ref, the curve being L = E + A·(C/c_ref)^-alpha.
    ``points`` (interpolation, line): the monotone (log C, log L) points it interpolates."""

    kind: str
    reason: str
    compute: np.ndarray
    loss: np.ndarray
    params: dict[str, float] | None = None
    points: tuple[np.ndarray, np.ndarray] | None = None

    def loss_at(self, compute) -> np.ndarray:
        """L_base(C)."""
        c = np.asarray(compute, dtype=float)
        if self.kind == POWER_LAW:
            p = self.params
            return p["E"] + p["A"] * (c / p["c_ref"]) ** -p["alpha"]
        log_c, log_l = self.points
        return np.exp(_interp_extrap(np.log(c), log_c, log_l))

    def compute_for(self, loss) -> np.ndarray:
        """C_base(L): the compute at which the baseline reaches ``loss`` (inf if it never does)."""
        loss = np.asarray(loss, dtype=float)
        if self.kind == POWER_LAW:
            p = self.params
            return power_law_compute(loss, p["E"], p["A"], p["alpha"], p["c_ref"])
        return loglog_compute(loss, *self.points)

    def extrapolated(self, loss) -> np.ndarray:
        """Whether ``loss`` lies outside the baseline's measured loss range (its rung means)."""
        loss = np.asarray(loss, dtype=float)
        return (loss < self.loss.min()) | (loss > self.loss.max())


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


# --- the power law -------------------------------------------------------------------------------------

def _linear_fit(x: np.ndarray, y: np.ndarray, w: np.ndarray):
    """min over E >= 0, A >= 0 of sum w·(y - E - A·x)^2 along the last axis (broadcast), in closed
    form: the best feasible one of the free solution, the one with E = 0 and the one with A = 0."""
    sw, sx, sy = w.sum(-1), (w * x).sum(-1), (w * y).sum(-1)
    sxx, sxy = (w * x * x).sum(-1), (w * x * y).sum(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        a_free = (sw * sxy - sx * sy) / (sw * sxx - sx * sx)
        e_free = (sy - a_free * sx) / sw
        a_zero_e = sxy / sxx
    zero = np.zeros_like(sxy)                  # the candidates, stacked on a new axis 0
    e = np.stack(np.broadcast_arrays(e_free, zero, sy / sw))
    a = np.stack(np.broadcast_arrays(a_free, a_zero_e, zero))
    sse = (w * (y - e[..., None] - a[..., None] * x) ** 2).sum(-1)
    sse = np.where((e >= 0) & (a >= 0) & np.isfinite(sse), sse, np.inf)
    best = sse.argmin(0)[None]
    return tuple(np.take_along_axis(v, best, 0)[0] for v in (e, a, sse))


def _profile(log_alpha: np.ndarray, z: np.ndarray, loss: np.ndarray):
    """The best E, A (and its error) for each α = exp(log_alpha), with x = exp(-α·z); the residuals
    are relative, (L - fit)/L, which is the log residual to first order."""
    x = np.exp(-np.exp(log_alpha)[..., None] * z)
    return _linear_fit(x, loss, 1.0 / loss ** 2)


def fit_power_law(compute: np.ndarray, loss: np.ndarray, steps: int = _GOLDEN_STEPS):
    """Fit L = E + A·(C/c_ref)^-α to each row of ``compute`` and ``loss`` (shape (B, R), or (R,)).

    For a fixed α the model is linear in (E, A), solved in closed form under E >= 0, A >= 0; what is
    left is a one-dimensional search over log α (variable projection): a log-spaced grid over
    ``ALPHA_BOUNDS`` brackets the optimum, golden-section search refines it. No starting point to
    choose, no overflow (C is scaled by c_ref, the geometric mean of the row's compute), and it runs
    on all bootstrap replicates at once (``steps`` of golden section: fewer for the replicates,
    whose spread dwarfs 1e-6 in log α). Returns (E, A, alpha, c_ref, ok), arrays of shape (B,);
    ``ok`` is False where the fit does not identify a decreasing power law (the optimum at an edge
    of the α grid, or A = 0)."""
    compute, loss = np.atleast_2d(compute).astype(float), np.atleast_2d(loss).astype(float)
    log_c = np.log(compute)
    c_ref = np.exp(log_c.mean(-1))
    z = (log_c - log_c.mean(-1, keepdims=True))[:, None, :]
    grid = np.linspace(*np.log(ALPHA_BOUNDS), _GRID)
    _, _, sse = _profile(grid[None, :], z, loss[:, None, :])
    k = sse.argmin(-1)
    lo, hi = grid[np.maximum(k - 1, 0)], grid[np.minimum(k + 1, _GRID - 1)]
    log_alpha = _golden_min(lambda u: _profile(u, z[:, 0, :], loss)[2], lo, hi, steps)
    e, a, _ = _profile(log_alpha, z[:, 0, :], loss)
    ok = (k > 0) & (k < _GRID - 1) & (a > 0)
    return e, a, np.exp(log_alpha), c_ref, ok


def _golden_min(f, lo: np.ndarray, hi: np.ndarray, steps: int) -> np.ndarray:
    """Golden-section search for the minimum of the elementwise function ``f`` in [lo, hi], every
    element at once; one evaluation of f a step."""
    g = (np.sqrt(5) - 1) / 2
    c, d = hi - g * (hi - lo), lo + g * (hi - lo)
    fc, fd = f(c), f(d)
    for _ in range(steps):
        left = fc <= fd                   # the minimum is in [lo, d]: d becomes hi, c becomes d
        lo, hi = np.where(left, lo, c), np.where(left, d, hi)
        new = np.where(left, hi - g * (hi - lo), lo + g * (hi - lo))
        fnew = f(new)
        c, d, fc, fd = (np.where(left, new, d), np.where(left, c, new),
                        np.where(left, fnew, fd), np.where(left, fc, fnew))
    return (lo + hi) / 2


def power_law_compute(loss, e, a, alpha, c_ref) -> np.ndarray:
    """The inverse of L = E + A·(C/c_ref)^-α: C = c_ref·((L - E)/A)^(-1/α); inf for L <= E."""
    with np.errstate(divide="ignore", invalid="ignore"):
        c = c_ref * ((loss - e) / a) ** (-1.0 / alpha)
    return np.where(loss > e, c, np.inf)


# --- interpolation -------------------------------------------------------------------------------------

def _pool_violators(y: np.ndarray) -> list[list[int]]:
    """Isotonic (non-increasing) regression by pool-adjacent-violators: the blocks of indices whose
    mean values strictly decrease from one block to the next."""
    blocks: list[list[int]] = []
    for i in range(len(y)):
        blocks.append([i])
        while len(blocks) > 1 and y[blocks[-2]].mean() <= y[blocks[-1]].mean():
            blocks[-2:] = [blocks[-2] + blocks[-1]]
    return blocks


def monotone_points(compute: np.ndarray, loss: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The (log C, log L) points to interpolate, log C ascending and log L strictly decreasing:
    rungs that break the order pooled (isotonic regression) into one point at their means."""
    order = np.argsort(compute)
    log_c, log_l = np.log(compute[order]), np.log(loss[order])
    blocks = _pool_violators(log_l)
    return np.array([log_c[b].mean() for b in blocks]), np.array([log_l[b].mean() for b in blocks])


def _interp_extrap(x, xp: np.ndarray, fp: np.ndarray) -> np.ndarray:
    """Piecewise-linear interpolation of (xp ascending, fp); outside xp the line through the nearest
    two points."""
    x = np.asarray(x, dtype=float)
    left = fp[0] + (x - xp[0]) * (fp[1] - fp[0]) / (xp[1] - xp[0])
    right = fp[-1] + (x - xp[-1]) * (fp[-1] - fp[-2]) / (xp[-1] - xp[-2])
    return np.where(x < xp[0], left, np.where(x > xp[-1], right, np.interp(x, xp, fp)))


def loglog_compute(loss, log_c: np.ndarray, log_l: np.ndarray) -> np.ndarray:
    """C_base(L) from monotone log-log points (``monotone_points``)."""
    return np.exp(_interp_extrap(np.log(loss), log_l[::-1], log_c[::-1]))


# --- the baseline curve --------------------------------------------------------------------------------

def fit_baseline(compute, loss) -> tuple[Curve | None, str]:
    """The baseline's curve from its rung means (see the module docstring for the choice), and why
    that one; (None, reason) where there is none."""
    order = np.argsort(compute)
    c, l = np.asarray(compute, dtype=float)[order], np.asarray(loss, dtype=float)[order]
    n = len(c)
    if n < 2:
        return None, f"{n} rung: a loss-compute curve needs at least 2 rungs"
    if n >= 4:
        e, a, alpha, c_ref, ok = fit_power_law(c, l)
        if ok[0]:
            params = dict(E=float(e[0]), A=float(a[0]), alpha=float(alpha[0]), c_ref=float(c_ref[0]))
            return _named(Curve(POWER_LAW, f"power law L = E + A*C^-alpha fitted to {n} rungs", c, l, params))
        why = f"{n} rungs, but the power law is not identified (alpha at an edge of {ALPHA_BOUNDS} or a flat fit)"
    else:
        why = f"{n} rungs cannot identify the power law's three parameters (E, A, alpha)"
    points = monotone_points(c, l)
    if len(points[0]) < 2:
        return None, f"the baseline's loss does not fall with compute over its {n} rungs: no curve to invert"
    pooled = f"; {n} rungs pooled into {len(points[0])} monotone points (isotonic)" if len(points[0]) < n else ""
    if len(points[0]) == 2:
        reason = f"{why}: the log-log line through 2 points{pooled}; every loss outside them is extrapolated"
        return _named(Curve(LINE, reason, c, l, points=points))
    reason = f"{why}: log-log interpolation, a power law through the nearest 2 rungs outside them{pooled}"
    return _named(Curve(INTERPOLATION, reason, c, l, points=points))


def _named(curve: Curve) -> tuple[Curve, str]:
    return curve, curve.reason


def _replicate_compute(kind: str, base_c: np.ndarray, base_l: np.ndarray, loss: np.ndarray) -> np.ndarray:
    """C_base(loss) in each bootstrap replicate: the baseline refitted (``kind`` as on the data) to
    the replicate's rung means ``base_c``, ``base_l`` (B, R); ``loss`` is (B, K)."""
    if kind == POWER_LAW:
        e, a, alpha, c_ref, _ = fit_power_law(base_c, base_l, steps=_BOOT_STEPS)
        return power_law_compute(loss, e[:, None], a[:, None], alpha[:, None], c_ref[:, None])
    return np.stack([loglog_compute(q, *monotone_points(c, l)) for c, l, q in zip(base_c, base_l, loss)])


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
        rows = [Multiplier(v, r, float(c), float(l), None, seeds=len(cells[v][r]), reason=why)
                for v in cells for r, (c, l) in zip(cells[v], means[v])]
        return Ladder(None, why, rows, [Trend(v, None, reason=why) for v in cells], ranks)

    boot = _bootstrap_means(cells, n_boot, np.random.default_rng(seed))
    variants = list(cells)
    widths = np.cumsum([0] + [len(cells[v]) for v in variants])
    boot_c_base = _replicate_compute(curve.kind, boot[baseline][..., 0], boot[baseline][..., 1],
                                     np.concatenate([boot[v][..., 1] for v in variants], axis=1))
    multipliers, trends = [], []
    for v, start, stop in zip(variants, widths[:-1], widths[1:]):
        rows, trend = _variant_stats(v, cells[v], means[v], boot[v], boot_c_base[:, start:stop], curve,
                                     _no_ci_reason(cells, v, baseline), confidence)
        multipliers += rows
        trends.append(trend)
    return Ladder(curve, why, multipliers, trends, ranks)
