"""Launcher overhead: the same sweep, end to end, under hydra/launcher=joblib and =submitit_local.

Each run is the real `ablate -m ...` command in a fresh sweep directory, timed from start to exit
(composition, the sweep-start check, every job, the table and its wandb run included), the way a
user meets it. Runs alternate joblib / submitit_local so that a noisy spell on this shared machine
hits both; each launcher's figure is the median of its runs. From the records it also prints how
the jobs shared the cores: torch threads per job, the most jobs that trained at the same moment
(from each record's job.started_at and metrics.wall_time_s), and the median step time.

    .venv/bin/python scripts/bench_launchers.py                   # 8 small LM jobs, 3 runs each
    .venv/bin/python scripts/bench_launchers.py --sweep pos_enc   # the 18 six-step jobs of experiment=pos_enc
    .venv/bin/python scripts/bench_launchers.py --repeats 5 -- trainer.max_steps=100

Target: submitit_local within 1.5x of joblib. Each submitit job is a new Python process that imports
torch and Lightning again (~5 s of CPU here) where joblib's workers import them once, so the ratio
is largest for sweeps of many tiny jobs and goes to 1 as jobs get longer.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ablate.record import jobs_at_once, load_records
from ablate.job import cpu_cores

BIN = Path(sys.executable).parent
SWEEPS = {
    # 4 variants x 2 seeds of the default byte-level LM, 6 steps each
    "small": ["qkv_sharing=independent,qk_shared,qkv_shared,kv_shared", "seed=0,1", "trainer.max_steps=6",
              "measure.warmup_steps=2"],
    # the sweep: experiment=pos_enc (6 variants x 3 seeds), 6 steps each
    "pos_enc": ["experiment=pos_enc", "trainer.max_steps=6", "measure.warmup_steps=2"],
}
LAUNCHERS = {"joblib": ["hydra/launcher=joblib"], "submitit_local": ["hydra/launcher=submitit_local"]}


def run_sweep(args: list[str], workdir: Path) -> dict:
    sweep = workdir / "sweep"
    env = {**os.environ, "WANDB_MODE": os.environ.get("WANDB_MODE", "offline"), "WANDB_SILENT": "true"}
    started = time.perf_counter()
    out = subprocess.run([str(BIN / "ablate"), "-m", *args, f"hydra.sweep.dir={sweep}"], cwd=workdir, env=env,
                         capture_output=True, text=True)
    wall = time.perf_counter() - started
    if out.returncode != 0:
        sys.exit(f"ablate failed ({out.returncode}):\n{out.stderr[-3000:]}")
    records = load_records(sweep)
    steps = [r.metrics.step_time_s["median"] for r in records if r.metrics.step_time_s]
    return {"wall_s": wall, "jobs": len(records), "at_once": jobs_at_once(records),
            "threads": sorted({r.metrics.torch_threads for r in records}),
            "concurrent_jobs": sorted({r.metrics.concurrent_jobs for r in records}),
            "step_ms": 1000 * statistics.median(steps) if steps else float("nan")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sweep", choices=SWEEPS, default="small", help="which sweep to time (default: small)")
    p.add_argument("--repeats", type=int, default=3, help="runs per launcher (default: 3)")
    p.add_argument("overrides", nargs="*", help="more overrides for every run (after --)")
    args = p.parse_args()
    by_key = {o.split("=", 1)[0]: o for o in [*SWEEPS[args.sweep], *args.overrides]}  # later ones win
    sweep = list(by_key.values())
    print(f"sweep: ablate -m {' '.join(sweep)}  ({cpu_cores()} cores, {args.repeats} runs per launcher, alternating)")
    results: dict[str, list[dict]] = {name: [] for name in LAUNCHERS}
    for i in range(args.repeats):
        for name, launcher in LAUNCHERS.items():
            with tempfile.TemporaryDirectory(prefix=f"bench-{name}-") as tmp:
                r = run_sweep([*sweep, *launcher], Path(tmp))
            results[name].append(r)
            print(f"  run {i + 1} {name:<15} {r['wall_s']:6.1f} s  {r['jobs']} jobs, at most {r['at_once']} "
                  f"training at once, torch threads {r['threads']}, concurrent_jobs {r['concurrent_jobs']}, "
                  f"median step {r['step_ms']:.1f} ms", flush=True)
    medians = {name: statistics.median(r["wall_s"] for r in runs) for name, runs in results.items()}
    print()
    for name, runs in results.items():
        walls = ", ".join(f"{r['wall_s']:.1f}" for r in runs)
        print(f"{name:<15} median {medians[name]:6.1f} s  (runs: {walls} s)")
    ratio = medians["submitit_local"] / medians["joblib"]
    print(f"submitit_local / joblib: {ratio:.2f}x  (target <= 1.5x: {'met' if ratio <= 1.5 else 'NOT met'})")


if __name__ == "__main__":
    main()
