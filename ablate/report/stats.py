"""The statistics of a table: mean, sample std, and each row's comparison with its baseline.

Seeds are paired across variants: seed s gives every variant the same data order and the same
held-out data, so whatever a seed does to accuracy it does to every row. The default test is
therefore the paired t-test over seeds (Student 1908; the runs of two rows paired by their seed,
only the seeds both rows have count): the seed-to-seed spread cancels in the differences.
``welch`` keeps the unpaired Welch test (Welch 1947) for records whose seeds are not comparable.

Either way a comparison gives the difference to the baseline with its 95% confidence interval
and a two-sided p-value; the p-values of one table are then corrected for the number of rows
compared with Holm's step-down method (Holm 1979), which bounds the chance that *any* row of a
table of identical variants is marked at the nominal level.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

TESTS = ("paired", "welch")
#: what each test is, as the caption says it (it adds the correction: ``, Holm–Bonferroni-corrected ...``)
TEST_NAMES = {
    "paired": "paired t-test over seeds",
    "welch": "Welch's t-test (unpaired, unequal variances)",
}
#: the longer description wandb records (``significance_test``)
SIGNIFICANCE_TEST = "two-sided paired t-test over seeds on accuracy vs the baseline (runs paired by seed)"
SIGNIFICANCE_TESTS = {
    "paired": SIGNIFICANCE_TEST,
    "welch": "Welch's two-sided t-test on accuracy vs the baseline (unequal variances)",
}
CONFIDENCE = 0.95


def finite(values: Iterable[Any]) -> list[float]:
    """The finite numbers among ``values`` (booleans, None, NaN and infinities left out)."""
    out = []
    for v in values:
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out.append(float(v))
    return out


def mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def std(values: list[float]) -> float | None:
    """Sample standard deviation (ddof=1); None for fewer than two values."""
    if len(values) < 2:
        return None
    m = sum(values) / len(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))


#: the per-round speed ratios' interquartile range, relative to their median, above which an
#: interleaved benchmark's rounds disagree. On this project's 2-core machine, quiet, two near-identical
#: tiny variants gave 3% (printed by tests/test_bench_spread.py); a speed-up smaller than the IQR is not
#: shown by the rounds, and 10% is about the smallest difference a table's speed column is read for.
ROUNDS_DISAGREE = 0.10


@dataclass(frozen=True)
class RoundRatios:
    """An interleaved benchmark's speed ratio: each round's tokens/s over the baseline's in the same
    round, summarised. ``median`` is the speed ratio (the table's and ``ablate-bench``'s one statistic)."""

    min: float
    q25: float
    median: float
    q75: float
    max: float
    rounds: int

    @property
    def disagree(self) -> bool:
        """Whether the rounds disagree: their IQR is over ``ROUNDS_DISAGREE`` of their median."""
        return (self.q75 - self.q25) > ROUNDS_DISAGREE * self.median


def round_ratios(values: list[float], base: list[float]) -> RoundRatios | None:
    """The per-round ratios ``values[i] / base[i]`` (rounds both timed), or None without any."""
    import statistics

    ratios = [v / b for v, b in zip(values, base) if finite([v, b]) == [v, b] and b > 0]
    if not ratios:
        return None
    q25, median, q75 = statistics.quantiles(ratios, n=4, method="inclusive") if len(ratios) > 1 else ratios * 3
    return RoundRatios(min(ratios), q25, median, q75, max(ratios), len(ratios))


def ratio(value: float | None, base: float | None) -> float | None:
    return value / base if value is not None and base else None


@dataclass
class Comparison:
    """A row against its baseline: ``delta`` = row - baseline (accuracy as a fraction), its 95%
    confidence interval, the two-sided p-value, and how many seeds were paired (paired test)."""

    delta: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    p_value: float | None = None
    n: int | None = None          # paired seeds (paired test) or None (Welch)


def _t_quantile(df: float) -> float:
    from scipy import stats

    return float(stats.t.ppf(0.5 + CONFIDENCE / 2, df))


def _two_sided_p(t: float, df: float) -> float:
    from scipy import stats

    return float(2 * stats.t.sf(abs(t), df))


def _zero_spread(sd: float, values: Iterable[float]) -> bool:
    """Whether a spread is zero up to rounding (then t is ±inf or undefined, not a number to trust)."""
    scale = max((abs(v) for v in values), default=0.0)
    return sd <= 1e-12 * max(scale, 1e-300)


def _degenerate(out: Comparison, scale: float) -> Comparison:
    """No spread at all: as scipy's t-tests, p = 0 for a nonzero difference (t = ±inf) and
    undefined (None) for none; the interval is the difference itself."""
    out.ci_low = out.ci_high = out.delta
    if abs(out.delta) > 1e-12 * max(scale, 1e-300):
        out.p_value = 0.0
    return out


def paired_test(row: Mapping[Any, float], base: Mapping[Any, float]) -> Comparison:
    """Paired t-test of ``row`` against ``base``, both ``{seed: accuracy}``; only shared seeds count.

    delta = mean of the paired differences; CI = delta ± t_{0.975, n-1} · sd / √n; p two-sided.
    With one shared seed only the difference is known; differences that do not vary at all give
    p = 0 (or None when they are all zero), as scipy's ``ttest_rel`` does."""
    seeds = [s for s in row if s in base]
    diffs = [row[s] - base[s] for s in seeds]
    if not diffs:
        return Comparison(n=0)
    d = sum(diffs) / len(diffs)
    out = Comparison(delta=d, n=len(diffs))
    sd = std(diffs)
    if sd is None:
        return out
    if _zero_spread(sd, diffs):
        return _degenerate(out, max(abs(v) for v in [*row.values(), *base.values()]))
    n = len(diffs)
    half = _t_quantile(n - 1) * sd / math.sqrt(n)
    out.ci_low, out.ci_high = d - half, d + half
    out.p_value = _two_sided_p(d / (sd / math.sqrt(n)), n - 1)
    return out


def welch_test(a: list[float], b: list[float]) -> Comparison:
    """Welch's unpaired t-test of ``a`` against ``b``: delta = mean(a) - mean(b), its 95% CI with the
    Welch–Satterthwaite degrees of freedom, and the two-sided p-value (None below two runs a side)."""
    if not a or not b:
        return Comparison()
    out = Comparison(delta=mean(a) - mean(b))
    if len(a) < 2 or len(b) < 2:
        return out
    va, vb = std(a) ** 2 / len(a), std(b) ** 2 / len(b)
    se = math.sqrt(va + vb)
    if _zero_spread(se, a + b):
        return _degenerate(out, max(abs(v) for v in a + b))
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    half = _t_quantile(df) * se
    out.ci_low, out.ci_high = out.delta - half, out.delta + half
    out.p_value = _two_sided_p(out.delta / se, df)
    return out


def welch_p(a: list[float], b: list[float]) -> float | None:
    """Two-sided Welch t-test p-value, None when either side has fewer than two runs or it is undefined."""
    if len(a) < 2 or len(b) < 2:
        return None
    from scipy import stats

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = float(stats.ttest_ind(a, b, equal_var=False).pvalue)
    return p if math.isfinite(p) else None


def holm(p_values: list[float | None]) -> list[float | None]:
    """Holm–Bonferroni adjusted p-values (Holm 1979), in the input's order; None stays None and
    does not count as a comparison. The i-th smallest of m p-values becomes
    max over j <= i of min(1, (m - j + 1) p_(j)): rejecting where the adjusted p < alpha keeps the
    family-wise error rate (any false mark in the table) at most alpha."""
    order = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    m = len(order)
    out: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


def mark(p: float | None) -> str:
    """``**`` for p < 0.01, ``*`` for p < 0.05, else nothing."""
    if p is None:
        return ""
    return "**" if p < 0.01 else "*" if p < 0.05 else ""
