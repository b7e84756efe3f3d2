"""The baseline's loss-compute curve of a scale ladder, and its inverse (``ablate.report.scaling``).

Fitted to the baseline's rung means (mean C, mean L over seeds), as in Kaplan et al. 2020 and
Hoffmann et al. 2022; which curve depends on how many rungs there are (:func:`fit_baseline`):
a saturating power law L = E + A·C^-α from 4 rungs (:func:`fit_power_law`: for a fixed α the model
is linear in E and A, solved exactly under E >= 0, A >= 0; α by a grid and golden-section search),
monotone log-log interpolation from 3 (three points cannot identify three parameters), a log-log
line from 2, none from 1. ``ablate.report.scaling`` explains the choices; this module holds the
fitting, so that the ladder's statistics read apart from it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

POWER_LAW = "power law"
INTERPOLATION = "log-log interpolation"
LINE = "log-log line"
#: the exponents a power-law fit may take; an optimum at either edge is "not identified"
ALPHA_BOUNDS = (1e-3, 3.0)
_GRID = 64           # α grid (log-spaced) that brackets the optimum
_GOLDEN_STEPS = 48   # golden-section steps within the bracket (2 grid steps): 0.618^48 · 0.25 ≈ 2e-11
_BOOT_STEPS = 24     # in the bootstrap replicates: 0.618^24 · 0.25 ≈ 2e-6 in log α


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


def replicate_compute(kind: str, base_c: np.ndarray, base_l: np.ndarray, loss: np.ndarray,
                      identified_only: bool = False) -> np.ndarray:
    """C_base(loss) in each bootstrap replicate: the baseline refitted (``kind`` as on the data) to
    the replicate's rung means ``base_c``, ``base_l`` (B, R); ``loss`` is (B, K). With
    ``identified_only`` a replicate whose power law is not identified (``fit_power_law``'s ``ok``)
    gives NaN rather than the edge fit."""
    if kind == POWER_LAW:
        e, a, alpha, c_ref, ok = fit_power_law(base_c, base_l, steps=_BOOT_STEPS)
        c = power_law_compute(loss, e[:, None], a[:, None], alpha[:, None], c_ref[:, None])
        return np.where(ok[:, None], c, np.nan) if identified_only else c
    return _replicate_loglog(base_c, base_l, loss)


def _interp_rows(x: np.ndarray, xp: np.ndarray, fp: np.ndarray) -> np.ndarray:
    """``_interp_extrap`` row by row: x (B, K), xp (B, R) ascending, fp (B, R)."""
    seg = np.clip((x[..., None] > xp[:, None, :]).sum(-1), 1, xp.shape[1] - 1)
    x0, x1 = np.take_along_axis(xp, seg - 1, 1), np.take_along_axis(xp, seg, 1)
    f0, f1 = np.take_along_axis(fp, seg - 1, 1), np.take_along_axis(fp, seg, 1)
    return f0 + (x - x0) * (f1 - f0) / (x1 - x0)


def _replicate_loglog(base_c: np.ndarray, base_l: np.ndarray, loss: np.ndarray) -> np.ndarray:
    """C_base(loss) in each replicate (rows): the monotone log-log inverse; NaN where the replicate's
    baseline loss does not fall with compute (its rungs pool into one point): a fall within the
    seeds' spread does so in some replicates, and such a replicate has no curve to invert
    (``scaling`` counts them). Replicates already monotone at once, the others one by one."""
    order = np.argsort(base_c, axis=1)
    log_c = np.log(np.take_along_axis(base_c, order, 1))
    log_l = np.log(np.take_along_axis(base_l, order, 1))
    mono = np.all(np.diff(log_l, axis=1) < 0, axis=1) & np.all(np.diff(log_c, axis=1) > 0, axis=1)
    out = np.full(np.shape(loss), np.nan)
    if mono.any():
        with np.errstate(over="ignore"):        # a far tail of the replicates: C = inf, kept as such
            out[mono] = np.exp(_interp_rows(np.log(loss[mono]), log_l[mono][:, ::-1], log_c[mono][:, ::-1]))
    for b in np.flatnonzero(~mono):
        points = monotone_points(base_c[b], base_l[b])
        if len(points[0]) >= 2:
            out[b] = loglog_compute(loss[b], *points)
    return out
