"""Calibration of seeds in rounds (``ablate.sequential``): its error rates and the seeds it uses.

Simulated tables whose truth is known, each run through the shipped ``decide`` (the real rule).
A table has ``rows`` rows and one baseline; every run's accuracy (in points) is its row's true
value plus a seed effect shared by all runs of that seed (pairing cancels it) plus the run's own
noise, so each paired difference has sd ``sd`` and the rows' differences share their baseline's
noise. Noise models: ``gauss`` (Gaussian run noise only); ``bimodal shared`` (besides, with
probability 0.3 a seed lands in a bad mode 20 points down, the same for every run of that seed:
it cancels in the differences) and ``bimodal indep.`` (each run its own mode: differences of 0 or
±20 points plus the noise, heavy-tailed). Truths: ``0`` (all rows equal), ``mde`` (row 1 off by
exactly the mde, the others equal), ``3 mde`` (row 1 off by three mdes). mde = 1 point.

Per cell it prints: the rate of any false "different" among the rows whose truth is 0 (family-wise;
the fixed design's beside it: a paired t-test of every row at the cap, Holm-corrected); how often a
row whose truth is 0 is found "equivalent"; how often row 1 is found "equivalent" when it is off by
the mde (false equivalent) and "different" when it is off by three (power; the fixed design's
beside it); the seeds a row used, mean over the rows (truth 0) and of row 1 (3 mde); and the
table's runs (rows and baseline; the baseline runs as many seeds as its busiest row) as a share of
the fixed design's (rows + 1) x cap. Then the false "different" of bimodal rows with a first round
of 4 seeds, the naive rule (one row: an uncorrected paired t-test after every round,
stop at p < 0.05), one comparison alone at level α (no Holm to absorb the t scale's excess), and
the interval widths at n = 5 and 10 behind docs/fair-comparisons.md. The
Monte-Carlo SE of a rate p over N tables is sqrt(p(1-p)/N): 0.34 points at 5 % over 4000.

    .venv/bin/python scripts/sequential_calibration.py               # every cell, 4000 tables each
    .venv/bin/python scripts/sequential_calibration.py --reps 500
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
from scipy import stats

from ablate.sequential import SPENDING, Design, decide, sequential_power, t_critical

CONFIGS = [(2, (3, 5)), (4, (3, 5, 7, 9, 10)), (8, (3, 6, 9, 12, 15, 18, 20))]
NOISES = {"gauss, sd 0.5": (0.5, None), "gauss, sd 2": (2.0, None), "bimodal shared, sd 1": (1.0, "shared"),
          "bimodal indep., sd 1": (1.0, "independent")}
TRUTHS = {"0": 0.0, "mde": 1.0, "3 mde": 3.0}
MDE, BAD_MODE, BAD_P = 1.0, -20.0, 0.3


def paired_diffs(rows: int, cap: int, effect: float, sd: float, modes: str | None, reps: int,
                 rng: np.random.Generator) -> np.ndarray:
    """(reps, rows, cap) paired differences row - baseline: row 0 off by ``effect``, the rest equal."""
    runs = rng.standard_normal((reps, rows + 1, cap)) * sd / math.sqrt(2)  # [:, 0] is the baseline
    if modes == "independent":
        runs += BAD_MODE * (rng.random((reps, rows + 1, cap)) < BAD_P)
    elif modes == "shared":  # the seed's mode in every run of it: it cancels below, as pairing does
        runs += BAD_MODE * (rng.random((reps, 1, cap)) < BAD_P)
    diffs = runs[:, 1:] - runs[:, :1]
    diffs[:, 0] += effect
    return diffs


def fixed_rejections(diffs: np.ndarray, alpha: float) -> np.ndarray:
    """(reps, rows) booleans: the fixed design, a paired t-test of each row at the cap, Holm-corrected."""
    n = diffs.shape[-1]
    t = diffs.mean(-1) / (diffs.std(-1, ddof=1) / math.sqrt(n))
    p = 2 * stats.t.sf(np.abs(t), n - 1)
    m = p.shape[1]
    order = np.argsort(p, axis=1)
    ranked = np.take_along_axis(p, order, axis=1) * (m - np.arange(m))
    adjusted = np.maximum.accumulate(np.minimum(ranked, 1.0), axis=1)
    out = np.zeros_like(p, dtype=bool)
    np.put_along_axis(out, order, adjusted < alpha, axis=1)
    return out


def simulate(rows: int, looks: tuple[int, ...], effect: float, sd: float, modes: str | None, reps: int,
             spending: str = "obrien_fleming", alpha: float = 0.05, seed: int = 0) -> dict[str, float]:
    """One cell's rates (module docstring), every table decided by ``decide``."""
    design = Design(looks=looks, mde=MDE, alpha=alpha, spending=spending)
    rng = np.random.default_rng([seed, rows, len(looks), int(10 * effect), int(10 * sd), len(modes or "")])
    diffs = paired_diffs(rows, design.cap, effect, sd, modes, reps, rng)
    null = range(1 if effect else 0, rows)
    any_false, null_equiv, row0_equiv, row0_diff, seeds, row0_seeds, runs = [], [], [], [], [], [], []
    for table in diffs:
        v = decide({i: dict(enumerate(table[i].tolist())) for i in range(rows)}, design)
        any_false.append(any(v[i].verdict == "different" for i in null))
        null_equiv.extend(v[i].verdict == "equivalent" for i in null)
        row0_equiv.append(v[0].verdict == "equivalent")
        row0_diff.append(v[0].verdict == "different")
        ns = [v[i].n for i in range(rows)]
        seeds.append(np.mean(ns))
        row0_seeds.append(ns[0])
        runs.append((sum(ns) + max(ns)) / ((rows + 1) * design.cap))
    fixed = fixed_rejections(diffs, alpha)
    return dict(false_different=float(np.mean(any_false)), fixed_false_different=float(fixed[:, null].any(1).mean()),
                null_equivalent=float(np.mean(null_equiv)) if null_equiv else math.nan,
                row_equivalent=float(np.mean(row0_equiv)), row_different=float(np.mean(row0_diff)),
                fixed_power=float(fixed[:, 0].mean()), seeds=float(np.mean(seeds)), runs=float(np.mean(runs)),
                row_seeds=float(np.mean(row0_seeds)),
                cap=design.cap, reps=reps)


def naive_false_positive(looks: tuple[int, ...], reps: int, sd: float = 1.0, seed: int = 0) -> float:
    """One row, no difference: a paired t-test at p < 0.05 after every round, seeds added until it passes."""
    x = np.random.default_rng([seed, len(looks), looks[-1]]).standard_normal((reps, looks[-1])) * sd
    hit = np.zeros(reps, dtype=bool)
    for n in looks:
        t = x[:, :n].mean(1) / (x[:, :n].std(1, ddof=1) / math.sqrt(n))
        hit |= 2 * stats.t.sf(np.abs(t), n - 1) < 0.05
    return float(hit.mean())


def lai_half_width(n: int, alpha: float, rho: float) -> float:
    """Half-width, in units of the sample sd, of Lai's t-mixture confidence sequence at n (valid at
    every n at once): {μ : sqrt(ρ/(ρ+n))·(1 - S²/((ρ+n)V))^(-n/2) < 1/α}, S = Σ(x-μ), V = Σ(x-μ)²."""
    b = (rho + n) * (1 - (alpha ** 2 * rho / (rho + n)) ** (1 / n))
    return math.sqrt(b * (n - 1) / (n * (n - b))) if b < n else math.inf


def widths(alpha: float = 0.05, looks: tuple[int, ...] = (3, 5, 7, 9, 10)) -> list[str]:
    """The half-widths at n = 5 and 10 relative to the fixed t interval's (one comparison at alpha)."""
    out = ["| interval at α = 0.05, one comparison | n = 5 | n = 10 |", "|:---|---:|---:|"]
    fixed = {n: stats.t.isf(alpha / 2, n - 1) / math.sqrt(n) for n in (5, 10)}
    row = lambda name, w: out.append(f"| {name} | {w[5] / fixed[5]:.2f}× | {w[10] / fixed[10]:.2f}× |")
    row("fixed t interval (valid at that n only)", fixed)
    for spending in SPENDING:
        w = {n: t_critical(tuple(m for m in looks if m <= n), looks[-1], alpha, spending) / math.sqrt(n)
             for n in (5, 10)}
        row(f"repeated CI, {spending}, looks {','.join(map(str, looks))}", w)
    grid = np.logspace(-3, 3, 601)
    for at in (5, 10):  # the mixture's ρ tuned for the narrowest interval at one n, as it must be chosen in advance
        rho = float(grid[np.argmin([lai_half_width(at, alpha, r) for r in grid])])
        row(f"Lai's t-mixture confidence sequence, ρ = {rho:.2f} (narrowest at n = {at})",
            {n: lai_half_width(n, alpha, rho) for n in (5, 10)})
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=4000)
    a = p.parse_args()
    start = time.time()
    pct = lambda v: "–" if math.isnan(v) else f"{100 * v:.1f}"
    for spending in SPENDING:
        print(f"\n**{spending}** ({a.reps} tables a cell; rates in %; fixed: paired t-test at the cap, Holm)\n")
        print("| rows × cap | noise | false different, truth 0: rounds / fixed | equivalent, truth 0 "
              "| false equivalent, mde row | power, 3-mde row: rounds / fixed | seeds a row, truth 0 "
              "| seeds of the 3-mde row | runs vs fixed, truth 0 / 3 mde |")
        print("|:---|:---|---:|---:|---:|---:|---:|---:|---:|")
        for rows, looks in CONFIGS:
            for noise, (sd, modes) in NOISES.items():
                x = {t: simulate(rows, looks, e, sd, modes, a.reps, spending) for t, e in TRUTHS.items()}
                print(f"| {rows} × {looks[-1]} | {noise} | {pct(x['0']['false_different'])} / "
                      f"{pct(x['0']['fixed_false_different'])} | {pct(x['0']['null_equivalent'])} | "
                      f"{pct(x['mde']['row_equivalent'])} | {pct(x['3 mde']['row_different'])} / "
                      f"{pct(x['3 mde']['fixed_power'])} | {x['0']['seeds']:.1f} | {x['3 mde']['row_seeds']:.1f} | "
                      f"{pct(x['0']['runs'])} / {pct(x['3 mde']['runs'])} |", flush=True)
    print("\n**A first round of 4** (bimodal indep., sd 1, truth 0: false different in %)\n")
    print("| rows | looks | obrien_fleming | pocock |\n|:---|:---|---:|---:|")
    for rows, looks in [(4, (4, 6, 8, 10)), (8, (4, 6, 8, 10, 12, 14, 16, 18, 20))]:
        x = [simulate(rows, looks, 0.0, 1.0, "independent", a.reps, sp)["false_different"] for sp in SPENDING]
        print(f"| {rows} | {', '.join(map(str, looks))} | {pct(x[0])} | {pct(x[1])} |", flush=True)
    print("\n**One comparison alone** (level α, Gaussian, truth 0, no stop for equivalence: false different in %, "
          "200000 simulated comparisons, SE 0.05)\n")
    print("| looks | obrien_fleming | pocock |\n|:---|---:|---:|")
    for _, looks in CONFIGS:
        x = [sequential_power(Design(looks, mde=1e-9, spending=sp), 1.0, 0.0, 0.05, reps=200_000, seed=7)[0]
             for sp in SPENDING]
        print(f"| {', '.join(map(str, looks))} | {pct(x[0])} | {pct(x[1])} |", flush=True)
    print("\n**The naive rule** (one row, truth 0: a paired t-test after every round, stop at p < 0.05)\n")
    print("| looks | false different |\n|:---|---:|")
    for _, looks in CONFIGS:
        print(f"| {', '.join(map(str, looks))} | {pct(naive_false_positive(looks, 4 * a.reps))} |")
    print()
    print("\n".join(widths()))
    print(f"\n({time.time() - start:.0f} s)")


if __name__ == "__main__":
    main()
