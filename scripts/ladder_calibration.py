"""Calibration of a scale ladder's intervals and its scale-dependent mark (``ablate.report.scaling``).

Simulated ladders whose true answer is known: the baseline follows L = E + A·C^-α (E = 2.1, a
saturating curve, or E = 0, a pure power law: 3e5·C^-0.35), the rungs 4x apart from 2e14 FLOPs,
every run's loss the truth plus Gaussian noise of sd ``--noise`` (0.02 by default). Three variants
beside the baseline: ``const`` (the baseline at 1.6x compute: CM = 1.6 at every rung, trend 0),
``up`` and ``down`` (CM = 1.6·(C/C_mid)^±0.2: a real trend of ±0.2). Per cell (rungs x seeds x E)
it runs ``--ladders`` ladders through the shipped ``scale_ladder`` (default bootstrap size) and
prints: how often a CM gets an interval at all; how often a CM interval covers the true CM (every
variant's, every rung; and only the rungs not extrapolated); for ``const``, how often its trend gets
a verdict and how often it is marked scale-dependent (the false-positive rate); for ``up``/``down``,
how often each is marked scale-dependent with the right sign (the detection rate). The Monte-Carlo SE of a rate p over N trials is sqrt(p(1-p)/N).

    .venv/bin/python scripts/ladder_calibration.py                    # every cell, 200 ladders each
    .venv/bin/python scripts/ladder_calibration.py --rungs 4 --seeds 5 --ladders 100
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ablate.report.scaling import scale_ladder

CM, TREND, C0 = 1.6, 0.2, 2e14


def baseline_law(e: float):
    return lambda c: e + 3e5 * np.asarray(c, dtype=float) ** -0.35


def ladder_runs(rungs: int, seeds: int, e: float, noise: float, rng: np.random.Generator) -> list[tuple]:
    law = baseline_law(e)
    computes = C0 * 4.0 ** np.arange(rungs)
    mid = np.exp(np.log(computes).mean())
    truth = {"base": lambda c: law(c), "const": lambda c: law(CM * c),
             "up": lambda c: law(CM * (c / mid) ** TREND * c), "down": lambda c: law(CM * (c / mid) ** -TREND * c)}
    losses = {v: f(computes) for v, f in truth.items()}
    noise_draws = rng.normal(0.0, noise, size=(len(truth), rungs, seeds))
    return [(v, i, s, float(c), float(losses[v][i] + noise_draws[k, i, s]))
            for k, v in enumerate(truth) for i, c in enumerate(computes) for s in range(seeds)]


def true_cm(variant: str, rungs: int) -> np.ndarray:
    computes = C0 * 4.0 ** np.arange(rungs)
    mid = np.exp(np.log(computes).mean())
    return CM * (computes / mid) ** {"const": 0.0, "up": TREND, "down": -TREND}[variant]


def calibrate(rungs: int, seeds: int, e: float, noise: float, ladders: int, seed: int = 0,
              n_boot: int | None = None) -> dict[str, float]:
    """The rates of one cell (see the module docstring), each over ``ladders`` simulated ladders."""
    rng = np.random.default_rng([seed, rungs, seeds, int(e * 10)])
    kw = {} if n_boot is None else {"n_boot": n_boot}
    cover, cover_in, fp, verdict, det = [], [], [], [], {"up": [], "down": []}
    cover_trend, given = [], []
    for k in range(ladders):
        ladder = scale_ladder(ladder_runs(rungs, seeds, e, noise, rng), "base", range(rungs), seed=k, **kw)
        for v in ("const", "up", "down"):
            rows = [m for m in ladder.multipliers if m.variant == v]
            truth = true_cm(v, rungs)
            for m, t in zip(rows, truth):
                if v == "const":
                    given.append(m.ci_low is not None)
                if m.ci_low is None:
                    continue
                hit = m.ci_low <= t <= m.ci_high
                cover.append(hit)
                if not m.extrapolated:
                    cover_in.append(hit)
            trend = next(t for t in ladder.trends if t.variant == v)
            if v == "const":
                verdict.append(trend.scale_dependent is not None)
                fp.append(bool(trend.scale_dependent))
                if trend.ci_low is not None:
                    cover_trend.append(trend.ci_low <= 0 <= trend.ci_high)
            else:
                sign = 1 if v == "up" else -1
                det[v].append(bool(trend.scale_dependent) and sign * trend.slope > 0)
    rate = lambda xs: float(np.mean(xs)) if xs else float("nan")
    return dict(given=rate(given), cover=rate(cover), cover_in=rate(cover_in), n_cover=len(cover), fp=rate(fp),
                verdict=rate(verdict), det_up=rate(det["up"]), det_down=rate(det["down"]),
                cover_trend=rate(cover_trend))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rungs", type=int, nargs="*", default=[2, 3, 4, 6])
    p.add_argument("--seeds", type=int, nargs="*", default=[2, 3, 5])
    p.add_argument("--E", type=float, nargs="*", default=[2.1, 0.0])
    p.add_argument("--noise", type=float, default=0.02)
    p.add_argument("--ladders", type=int, default=200)
    p.add_argument("--n-boot", type=int, default=None)
    a = p.parse_args()
    print(f"noise sd {a.noise}, {a.ladders} ladders per cell, CM = {CM}, trends ±{TREND}; rates in %")
    print("rungs seeds    E | CM CI given | CM cover (all / inner) | const: verdict  ‡ (FP) | up ‡  down ‡ | s")
    pct = lambda v: "     -" if np.isnan(v) else f"{100 * v:6.1f}"
    for e in a.E:
        for r in a.rungs:
            for s in a.seeds:
                t = time.time()
                x = calibrate(r, s, e, a.noise, a.ladders, n_boot=a.n_boot)
                print(f"{r:5d} {s:5d} {e:4.1f} |      {pct(x['given'])} | {pct(x['cover'])} / {pct(x['cover_in'])}"
                      f"      |      {pct(x['verdict'])} {pct(x['fp'])}     | {pct(x['det_up'])} "
                      f"{pct(x['det_down'])} | {time.time() - t:4.0f}", flush=True)

if __name__ == "__main__":
    main()
