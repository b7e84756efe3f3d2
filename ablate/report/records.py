"""The inputs of a table: a sweep's records (``ablate.record.load_records``), its plan (``sweep.json``) and its
``bench.json``, read once into a ``LoadedSweep`` (``load_sweep``) that the table, the page, the
figures and the DataFrames all take from there."""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from pathlib import Path

from ablate.report.stats import finite
from ablate.record import Record, load_records, sort_records
from ablate.sweep import (SweepPlan, read_sweep, records_swept_keys, split_override_string, variant_key,
                          varying_keys)

__all__ = ["BENCH_FILE", "LoadedSweep", "bench_rounds", "bench_speeds", "load_bench", "load_records", "load_sweep",
           "save_bench", "sort_records",
           "sweep_of_records"]

BENCH_FILE = "bench.json"


@dataclass
class LoadedSweep:
    """A sweep read once (``load_sweep``): its records in sweep order, its plan (``sweep.json``;
    None without one) and its ``bench.json`` (None without one). Pass it along instead of a path:
    ``build_table``, ``to_html``, the figures and ``load`` read nothing again."""

    records: list[Record]
    plan: SweepPlan | None = None
    bench: dict | None = None
    sweep_dir: Path | None = None
    swept: set[str] | None = None  # the keys that name its variants; default: the plan's, else those that vary

    def __post_init__(self) -> None:
        self.records = sort_records(self.records)
        if self.swept is None:
            self.swept = set(self.plan.swept) if self.plan is not None else varying_keys(self.records)


def load_sweep(sweep_dir: str | Path) -> LoadedSweep:
    """The sweep in ``sweep_dir`` (or in one directory below it), each file read once; raises
    ``ablate.sweep.SeveralSweeps`` (a ValueError naming them) when it holds several sweeps."""
    records, plan = read_sweep(sweep_dir)
    return LoadedSweep(records, plan, load_bench(sweep_dir), Path(sweep_dir))


def sweep_of_records(records: list[Record]) -> LoadedSweep:
    """Records given in Python (``load_records``, or made by hand) as a ``LoadedSweep``: the plan of
    their one sweep directory (the one above each job directory) and the ``bench.json`` of the one
    directory they were loaded from, when they have one."""
    job_parents = {str(Path(r.path).parent.parent) if r.path else None for r in records}
    one = len(job_parents) == 1 and None not in job_parents
    plan = SweepPlan.read(job_parents.pop()) if one else None
    searched = {r.sweep_dir for r in records}
    sweep_dir = Path(searched.pop()) if len(searched) == 1 and None not in searched else None
    # records of several sweeps put together in Python: the keys any of their plans swept
    swept = None if one else records_swept_keys(records)
    return LoadedSweep(records, plan, load_bench(sweep_dir) if sweep_dir is not None else None, sweep_dir, swept)


def save_bench(sweep_dir: str | Path, bench: dict) -> Path:
    """Write ``bench`` (``ablate.bench.bench_sweep``'s figures) as ``<sweep_dir>/bench.json``, atomically."""
    from ablate.results import write_text_atomic

    return write_text_atomic(Path(sweep_dir) / BENCH_FILE, json.dumps(bench, indent=2) + "\n")


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


def bench_rounds(bench: dict, swept: set[str]) -> dict[str, list[float]]:
    """``{variant_key: tokens/s in each interleaved round}`` from ``bench.json`` (``round_tokens_per_s``),
    for the variants that have them (keys as :func:`bench_speeds`')."""
    out = {}
    variants = bench.get("variants")
    for key, entry in (variants if isinstance(variants, dict) else {}).items():
        rounds = entry.get("round_tokens_per_s") if isinstance(entry, dict) else None
        if isinstance(rounds, list) and rounds and len(finite(rounds)) == len(rounds):
            ov = split_override_string(key)
            out[variant_key({k: v for k, v in ov.items() if k in swept})] = [float(x) for x in rounds]
    return out


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
