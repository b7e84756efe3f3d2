"""The inputs of a table: a sweep's records (``ablate.results``) and its ``bench.json``."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

from ablate.report.stats import finite
from ablate.results import load_records, sort_records
from ablate.sweep import split_override_string, variant_key

__all__ = ["BENCH_FILE", "bench_speeds", "load_bench", "load_records", "sort_records"]

BENCH_FILE = "bench.json"


def load_bench(sweep_dir: str | Path) -> dict | None:
    """``<sweep_dir>/bench.json`` when it exists and parses, else None (with a warning if corrupt)."""
    path = Path(sweep_dir) / BENCH_FILE
    if not path.is_file():
        return None
    try:
        bench = json.loads(path.read_text())
        if not isinstance(bench, dict):
            raise ValueError("expected a JSON object")
        return bench
    except (OSError, ValueError) as err:
        warnings.warn(f"ignoring {path}: {err}", stacklevel=2)
        return None


def bench_speeds(bench: dict, swept: set[str]) -> dict[str, float]:
    """``{variant_key: median tokens/s}`` from ``bench.json``; its keys may also carry the sweep's
    common overrides (``ablate-bench experiment=x model.d_model=64``): only the swept keys count.
    An entry whose speed is not a finite number > 0 is named in a warning and left out (its row
    then has no speed, rather than a wrong one)."""
    out = {}
    variants = bench.get("variants")
    for key, entry in (variants if isinstance(variants, dict) else {}).items():
        tps = entry.get("tokens_per_s") if isinstance(entry, dict) else entry
        if isinstance(tps, dict):
            tps = tps.get("median")
        if finite([tps]) and tps > 0:
            ov = split_override_string(key)
            out[variant_key({k: v for k, v in ov.items() if k in swept})] = float(tps)
        else:
            warnings.warn(f"{BENCH_FILE}: ignoring variants[{key!r}]: tokens_per_s={tps!r} "
                          "(expected a finite number > 0)", stacklevel=2)
    return out
