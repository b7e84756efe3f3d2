"""The statistics of a table: mean, sample std and Welch's t-test over the seeds of a variant."""

from __future__ import annotations

import math
import warnings
from typing import Any, Iterable

SIGNIFICANCE_TEST = "Welch's two-sided t-test on accuracy vs the baseline (unequal variances)"


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


def welch_p(a: list[float], b: list[float]) -> float | None:
    """Two-sided Welch t-test p-value, None when either side has fewer than two runs or it is undefined."""
    if len(a) < 2 or len(b) < 2:
        return None
    from scipy import stats

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = float(stats.ttest_ind(a, b, equal_var=False).pvalue)
    return p if math.isfinite(p) else None


def ratio(value: float | None, base: float | None) -> float | None:
    return value / base if value is not None and base else None
