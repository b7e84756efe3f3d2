"""Seeds in rounds: deciding each comparison with a baseline as its seeds come in.

Every row runs a first round of seeds; after each round each row's paired differences to its
baseline are looked at again, and only the rows still undecided get more seeds, up to a cap. A
t-test looked at after every round would be wrong about as often as the number of looks allows (the
classic result of Armitage, McPherson & Rowe 1969), so each look here is a *repeated confidence
interval* (Jennison & Turnbull 1989; Jennison & Turnbull 2000, "Group Sequential Methods with
Applications to Clinical Trials", ch. 9): intervals wide enough that, with probability at least
1 - alpha, every one of them covers the true difference at once, however many of the planned looks
are taken.

Their widths come from a group-sequential design. The alpha is spent over the looks by a Lan & DeMets
(1983) spending function of the information fraction t = n / cap (n: paired seeds at the look):
O'Brien–Fleming-type ``2 - 2Φ(z_{1-α'/2}/√t)`` on each side with α' = α/2, so
``4 - 4Φ(z_{1-α/4}/√t)`` in all (little spent early, nearly a fixed test at the cap; this is the
convention of the published two-sided tables: 4.877, 3.357, 2.680, 2.290, 2.031 for 5 equal looks
at α = 0.05), or Pocock-type ``α·ln(1 + (e - 1)t)`` (even spending: earlier stops, a wider last
look; 2.44 .. 2.39). Both spend all of α at t = 1. The z
boundaries c_1..c_K follow by recursive numerical integration of the score process (Armitage,
McPherson & Rowe 1969; Jennison & Turnbull 2000, ch. 19): the density of the score on the
continuation region of one look, convolved with the normal increment to the next, and each c_k
found so that the chance of first crossing at look k is what the spending function allots it. The
seed-to-seed variance is unknown, so the boundaries used are those of an exact sequential t-test
with the same spending (Jennison & Turnbull 1991), set by simulation (``t_boundaries``): the nominal
conversion of each c_k to Student's t at the same level (Jennison & Turnbull 2000, sec. 3.8) runs
0.3-0.6 points above a 5 % alpha at the 2-9 degrees of freedom of a few seeds.

At each look the interval mean ± t_k·sd/√n decides: it excludes 0, "different"; it lies inside
(-mde, +mde), "equivalent" (what a TOST at that margin would say); otherwise "undecided", and the
comparison gets the next round. A decided comparison stops. Stopping for equivalence only ever
removes chances to reject, so the error rate of "different" holds; and since every interval has
coverage at least 1 - alpha at every look, a row whose true difference is mde or more is called
"equivalent" with probability at most alpha.

A table compares m rows with their baselines, so "different" is controlled family-wise by Holm's
step-down procedure written as a graph (Maurer & Bretz 2013, "Multiple testing in group sequential
trials using graphical approaches"): each comparison starts at alpha/m; when one is found
"different" its level is passed equally to the others not yet "different" (each then holds
alpha/(m - rejected)), which are tested again at their latest look with the boundaries of the new
level, until nothing changes. Boundaries are computed for each comparison's own seeds at its looks
(a failed seed leaves a pair out), so comparisons need not share them.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from functools import lru_cache
from typing import Hashable, Mapping, TypeVar

import numpy as np
from scipy import optimize, special, stats

SPENDING = ("obrien_fleming", "pocock")
VERDICTS = ("different", "equivalent", "undecided")
K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Design:
    """The rounds: ``looks`` are the paired seeds a comparison has after each round (strictly
    increasing, the last is the cap), ``mde`` the smallest difference of interest in the units of
    the differences, ``alpha`` the family-wise two-sided error rate, ``spending`` the Lan–DeMets
    spending function."""

    looks: tuple[int, ...]
    mde: float
    alpha: float = 0.05
    spending: str = "obrien_fleming"

    def __post_init__(self) -> None:
        looks = tuple(self.looks)
        object.__setattr__(self, "looks", looks)
        counts = looks and all(int(n) == n >= 2 for n in looks) and all(a < b for a, b in zip(looks, looks[1:]))
        bad = [] if counts else [f"looks={looks}: must be strictly increasing seed counts, the first >= 2"]
        bad += problems(2, 2, 1, self.mde, self.alpha, self.spending)
        if bad:
            raise ValueError("; ".join(bad))

    @property
    def cap(self) -> int:
        return self.looks[-1]


@dataclass
class Verdict:
    """One comparison's answer (see :func:`decide`)."""

    verdict: str            # "different" | "equivalent" | "undecided"
    n: int                  # paired seeds the verdict rests on
    round: int              # 1-based round it was decided at; undecided: the last round with data
    at_cap: bool            # undecided after the design's last round
    delta: float | None     # mean paired difference at that round
    ci_low: float | None    # the repeated confidence interval at the final level
    ci_high: float | None
    level: float            # the alpha it was finally tested at (after Holm's passing)


# --- the boundaries ----------------------------------------------------------------------------

def spent(t: float, alpha: float, spending: str = "obrien_fleming") -> float:
    """Lan & DeMets (1983): the two-sided alpha spent by information fraction ``t`` (α at t >= 1);
    O'Brien–Fleming-type as α/2 a side, each side's ``2 - 2Φ(z_{1-α/4}/√t)``."""
    t = min(max(t, 0.0), 1.0)
    if t == 0.0:
        return 0.0
    if spending == "obrien_fleming":
        return float(4.0 * special.ndtr(-stats.norm.isf(alpha / 4) / math.sqrt(t)))  # α/2 a side
    if spending == "pocock":
        return alpha * math.log(1.0 + (math.e - 1.0) * t)
    raise ValueError(f"unknown spending function {spending!r} (one of {', '.join(SPENDING)})")


def _grid(half: float, step: float) -> tuple[np.ndarray, np.ndarray]:
    """Points on [-half, half] (an odd number, at most 1201) and their Simpson's-rule weights."""
    intervals = 2 * min(600, max(8, math.ceil(half / step)))
    x, h = np.linspace(-half, half, intervals + 1, retstep=True)
    w = np.full(intervals + 1, 2.0)
    w[1::2] = 4.0
    w[0] = w[-1] = 1.0
    return x, w * h / 3.0


@lru_cache(maxsize=4096)
def boundaries(fractions: tuple[float, ...], alpha: float, spending: str = "obrien_fleming") -> tuple[float, ...]:
    """Two-sided z boundaries c_1..c_K at the information ``fractions`` (increasing, in (0, 1]).

    Recursive numerical integration (Armitage, McPherson & Rowe 1969; Jennison & Turnbull 2000,
    ch. 19) of the score S_k = Z_k·√t_k, which under no difference is a Gaussian random walk with
    Var S_k = t_k: ``f`` holds the (Simpson-weighted) density of S_k on the continuation region
    |S_k| < c_k·√t_k, and c_{k+1} is the root (``brentq``) of P(exit at k+1) = α(t_{k+1}) - α(t_k),
    the exit probability being f integrated against the N(0, t_{k+1} - t_k) increment's tails."""
    if not fractions or not all(a < b for a, b in zip((0.0, *fractions), fractions)) or fractions[-1] > 1:
        raise ValueError(f"information fractions must increase within (0, 1], not {fractions}")
    alphas = [spent(t, alpha, spending) for t in fractions]
    sds = [math.sqrt(t) for t in fractions]
    steps = [math.sqrt(b - a) for a, b in zip(fractions, fractions[1:])]
    cs = [float(stats.norm.isf(alphas[0] / 2))]
    s, w = _grid(cs[0] * sds[0], min([sds[0], *steps[:1]]) / 10)
    f = w * np.exp(-0.5 * (s / sds[0]) ** 2) / (sds[0] * math.sqrt(2 * math.pi))
    for k in range(1, len(fractions)):
        sigma, target, root_t = steps[k - 1], alphas[k] - alphas[k - 1], sds[k]

        def exit_minus_target(c: float) -> float:
            b = c * root_t
            return float(f @ (special.ndtr((-b - s) / sigma) + special.ndtr((s - b) / sigma))) - target

        hi = 10.0  # exit(0) is all the mass still in play, 1 - α(t_{k-1}) > target
        while exit_minus_target(hi) > 0:
            hi *= 2
        cs.append(float(optimize.brentq(exit_minus_target, 0.0, hi, xtol=1e-10)))
        if k + 1 < len(fractions):  # the density of S_k on its continuation region, for the next look
            y, wy = _grid(cs[k] * root_t, min(root_t, steps[k]) / 10)
            kernel = np.exp(-0.5 * ((y[:, None] - s[None, :]) / sigma) ** 2) / (sigma * math.sqrt(2 * math.pi))
            s, f = y, wy * (kernel @ f)
    return tuple(cs)


#: paths simulated under no difference to set the t-scale boundaries (``t_boundaries``), from a fixed seed
CALIBRATION_PATHS = 200_000
CALIBRATION_SEED = 20261204
#: past this many pairs the nominal conversion is used: at 40 degrees of freedom and more, t and z agree
#: closely enough that its excess over alpha is within the calibration's own Monte-Carlo error
SIMULATED_PAIRS = 40
#: a look whose allotted alpha is fewer paths than this keeps the nominal conversion (its quantile
#: would rest on a handful of paths; such a look rejects almost never either way)
FEWEST_PATHS = 25


def _nominal(c: float, n: int) -> float:
    """A z boundary carried to Student's t with n - 1 degrees of freedom at the same two-sided level."""
    return float(stats.t.isf(special.ndtr(-c), n - 1))


@lru_cache(maxsize=4096)
def t_boundaries(ns: tuple[int, ...], cap: int, level: float, spending: str = "obrien_fleming") -> tuple[float, ...]:
    """The repeated CI's t multipliers at the looks ``ns`` (paired seeds at each, increasing) of a
    comparison whose cap is ``cap``: an exact sequential t-test's boundaries for Gaussian differences
    (Jennison & Turnbull 1991, "Exact calculations for sequential t, chi-square and F tests"), found
    by simulation. The t statistic is pivotal under no difference, so :data:`CALIBRATION_PATHS` paths
    of standard normal pairs give its joint law at the looks; the first boundary is Student's t
    quantile at the alpha spent there, and each later one the quantile of |t| among the paths not
    stopped yet that lets through exactly the alpha the spending function allots that look. The
    paths are drawn seed by seed from one fixed seed, so a prefix of ``ns`` gives a prefix of the
    boundaries."""
    nominal = [_nominal(c, n) for c, n in zip(boundaries(tuple(n / cap for n in ns), level, spending), ns)]
    if ns[-1] > SIMULATED_PAIRS:
        return tuple(nominal)
    allotted = [spent(n / cap, level, spending) for n in ns]
    rng = np.random.default_rng(CALIBRATION_SEED)
    total, squares = np.zeros(CALIBRATION_PATHS), np.zeros(CALIBRATION_PATHS)
    going = np.ones(CALIBRATION_PATHS, dtype=bool)
    out, drawn = [], 0
    for k, n in enumerate(ns):
        for _ in range(n - drawn):
            x = rng.standard_normal(CALIBRATION_PATHS)
            total += x
            squares += x * x
        drawn = n
        mean = total / n
        t = np.abs(mean) / np.sqrt(np.maximum(squares - n * mean * mean, 1e-300) / (n - 1) / n)
        passing = (allotted[k] - (allotted[k - 1] if k else 0.0)) * CALIBRATION_PATHS
        if k == 0:
            c = float(stats.t.isf(allotted[0] / 2, n - 1))
        elif passing < FEWEST_PATHS:
            c = nominal[k]
        else:
            ranked = np.sort(t[going])[::-1]
            i = min(int(round(passing)), len(ranked) - 1)
            c = float((ranked[i - 1] + ranked[i]) / 2)
        out.append(c)
        going &= t < c
    return tuple(out)


def t_critical(ns: tuple[int, ...], cap: int, level: float, spending: str = "obrien_fleming") -> float:
    """The t-scale multiplier of the repeated CI at the last of the looks ``ns`` (``t_boundaries``)."""
    return t_boundaries(tuple(ns), cap, level, spending)[-1]


def interval(values: list[float], ns: tuple[int, ...], cap: int, level: float,
             spending: str) -> tuple[float, float, float]:
    """(mean, low, high): the repeated CI at the last look of ``ns`` from its ``values``."""
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    if sd <= 1e-12 * max(max(abs(v) for v in values), 1e-300):  # zero spread: the interval is the mean
        return mean, mean, mean
    half = t_critical(ns, cap, level, spending) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def judge(low: float, high: float, mde: float) -> str:
    """"different" when [low, high] excludes 0 (it wins), "equivalent" inside (-mde, mde)."""
    if low > 0 or high < 0:
        return "different"
    return "equivalent" if -mde < low and high < mde else "undecided"


# --- the decision --------------------------------------------------------------------------------

def decide(diffs: Mapping[K, Mapping[int, float]], design: Design, rounds_run: int | None = None) -> dict[K, Verdict]:
    """Each comparison's verdict after ``rounds_run`` rounds (default: all of ``design.looks``).

    ``diffs[k] = {seed: row - baseline}``; round j uses the seeds below ``design.looks[j-1]``
    (non-finite values count as missing). The rounds are replayed in order: every comparison still
    undecided gets a look when it has 2 or more pairs and more than at its previous look; a
    comparison decided "different" or "equivalent" stops. After each round Holm's alpha is passed
    (module docstring) until nothing changes: a comparison not yet "different" is tested again at
    its latest look at its new level, and one that had stopped "equivalent" may so become
    "different"."""
    looks = design.looks
    rounds = len(looks) if rounds_run is None else max(0, min(int(rounds_run), len(looks)))
    keys = list(diffs)
    pairs = {k: sorted((s, float(v)) for s, v in diffs[k].items()
                       if isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)) for k in keys}
    verdict = {k: "undecided" for k in keys}
    history: dict[K, list[tuple[int, int]]] = {k: [] for k in keys}  # (round, n) of each look
    rejected_at: dict[K, float] = {}

    def level() -> float:
        return design.alpha / (len(keys) - len(rejected_at)) if len(rejected_at) < len(keys) else design.alpha

    def test(k: K, at: float) -> str:
        ns = tuple(n for _, n in history[k])
        values = [v for _, v in pairs[k][:ns[-1]]]
        return judge(*interval(values, ns, design.cap, at, design.spending)[1:], design.mde)

    for j in range(1, rounds + 1):
        for k in keys:
            n = sum(1 for s, _ in pairs[k] if s < looks[j - 1])
            if verdict[k] == "undecided" and n >= 2 and n > (history[k][-1][1] if history[k] else 0):
                history[k].append((j, n))
        changed = True
        while changed:  # Holm as a graph: test at the current level, pass the level of each rejection
            changed = False
            for k in keys:
                if verdict[k] == "different" or not history[k]:
                    continue
                at = level()
                new = test(k, at)
                if new == "different" or (verdict[k] == "undecided" and new == "equivalent"):
                    verdict[k] = new
                    if new == "different":
                        rejected_at[k] = at
                        changed = True

    out = {}
    for k in keys:
        at = rejected_at.get(k, level())
        if history[k]:
            j, n = history[k][-1]
            values = [v for _, v in pairs[k][:n]]
            delta, low, high = interval(values, tuple(m for _, m in history[k]), design.cap, at, design.spending)
        else:  # no look: the pairs so far and the last round that added one (0: none)
            seen = [(s, v) for s, v in pairs[k] if s < looks[rounds - 1]] if rounds else []
            j = next(r for r, m in enumerate(looks, 1) if seen[-1][0] < m) if seen else 0
            n, low, high = len(seen), None, None
            delta = sum(v for _, v in seen) / n if n else None
        out[k] = Verdict(verdict[k], n, j, verdict[k] == "undecided" and rounds == len(looks),
                         delta, low, high, at)
    return out


# --- planning -----------------------------------------------------------------------------------

def problems(min_seeds: object, max_seeds: object, round_seeds: object, mde: object, alpha: object,
             spending: object) -> list[str]:
    """What is wrong with a rounds design's settings (``stats.*``), each with its valid range."""
    def integer(v: object) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    def number(v: object) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    out = []
    if not integer(min_seeds) or min_seeds < 2:
        out.append(f"stats.min_seeds={min_seeds!r}: must be an integer >= 2 (an interval needs 2 seeds)")
    if not integer(max_seeds) or (integer(min_seeds) and max_seeds < min_seeds):
        out.append(f"stats.max_seeds={max_seeds!r}: must be an integer >= stats.min_seeds ({min_seeds!r})")
    if not integer(round_seeds) or round_seeds < 1:
        out.append(f"stats.round_seeds={round_seeds!r}: must be an integer >= 1")
    if not number(mde) or mde <= 0:
        out.append(f"stats.mde={mde!r}: must be a number > 0 (the smallest difference of interest)")
    if not number(alpha) or not 0 < alpha <= 0.5:
        out.append(f"stats.alpha={alpha!r}: must be in (0, 0.5]")
    if spending not in SPENDING:
        out.append(f"stats.spending={spending!r}: must be one of {', '.join(SPENDING)}")
    return out


def fixed_power(n: int, sd: float, effect: float, level: float) -> float:
    """Power of the two-sided paired t-test at ``level`` over ``n`` pairs whose differences have
    standard deviation ``sd`` and mean ``effect`` (noncentral t)."""
    if n < 2:
        return 0.0
    if sd <= 0:
        return float(effect != 0)
    df, nc = n - 1, effect / (sd / math.sqrt(n))
    crit = stats.t.isf(level / 2, df)
    return float(stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc))


def seeds_for_power(sd: float, effect: float, level: float, power: float = 0.8, most: int = 1000) -> int | None:
    """The fewest pairs (>= 2) whose paired t-test has ``power``; None when more than ``most``."""
    return next((n for n in range(2, most + 1) if fixed_power(n, sd, effect, level) >= power), None)


def sequential_power(design: Design, sd: float, effect: float, level: float, reps: int = 20000,
                     seed: int = 0) -> tuple[float, float]:
    """One comparison under ``design`` at ``level``, simulated ``reps`` times with Gaussian
    differences (mean ``effect``, sd ``sd``): (P(different), mean paired seeds used)."""
    rng = np.random.default_rng(seed)
    x = effect + sd * rng.standard_normal((reps, design.cap))
    ns = np.array(design.looks)
    means = np.stack([x[:, :n].mean(axis=1) for n in ns], axis=1)
    var = np.stack([x[:, :n].var(axis=1, ddof=1) for n in ns], axis=1)
    var[var <= (1e-12 * np.abs(x).max(initial=0.0)) ** 2] = 0.0  # zero spread: the interval is the mean
    crit = np.array(t_boundaries(tuple(design.looks), design.cap, level, design.spending))
    half = crit * np.sqrt(var / ns)
    different = np.abs(means) > half
    stop = different | (np.abs(means) + half < design.mde)
    first = np.where(stop.any(axis=1), stop.argmax(axis=1), len(ns) - 1)
    rows = np.arange(reps)
    return float(different[rows, first].mean()), float(ns[first].mean())
