"""Where a sweep's time goes outside the training steps: start-up, set-up, evaluation, the table.

Runs the real `ablate -m ...` command (by default `make main`'s 9 jobs cut to 6 steps each, so that
what is not training shows) under each launcher asked for, and reads every job's record:
`job.process_started_at` and `job.started_at` (the process's start-up: interpreter, imports,
Hydra), `metrics.time_s` (wandb init, set-up, the memory pass, fit, the timed steps, the test
evaluation). It prints the median job and the sweep's own phases: before the first job (imports,
composing and validating every job) and after the last (the table and its wandb run).

    .venv/bin/python scripts/bench_startup.py                                # basic and submitit_local
    .venv/bin/python scripts/bench_startup.py --launchers joblib -- trainer.max_steps=50

Figures are seconds of wall time on this machine; compare launchers or commits measured in one
run, never absolute figures from another day (the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

BIN = Path(sys.executable).parent
SWEEP = ["experiment=qkv_sharing", "trainer.max_steps=6", "measure.warmup_steps=2"]
PHASES = ("startup", "validate", "wandb_init", "setup", "memory", "loop", "steps", "test")


def job_phases(record: dict, own_process: bool) -> dict[str, float]:
    """One job's seconds per phase; ``loop`` is fit minus the timed steps (Lightning's loop, the
    learning curve's evaluations), ``startup`` only for a job that had its process to itself."""
    job, t = record["job"], record["metrics"].get("time_s") or {}
    startup = job["started_at"] - job["slot_wait_s"] - job["process_started_at"] if own_process else 0.0
    own = {k: t.get(k, 0.0) for k in ("validate", "wandb_init", "setup", "memory", "steps", "test")}
    return {"startup": startup, **own, "loop": t.get("fit", 0.0) - own["steps"]}


def run_sweep(launcher: str, overrides: list[str], workdir: Path) -> dict:
    sweep = workdir / "sweep"
    env = {**os.environ, "WANDB_MODE": os.environ.get("WANDB_MODE", "offline"), "WANDB_SILENT": "true"}
    started = time.time()
    out = subprocess.run([str(BIN / "ablate"), "-m", *overrides, f"hydra/launcher={launcher}",
                          f"hydra.sweep.dir={sweep}"], cwd=workdir, env=env, capture_output=True, text=True)
    ended = time.time()
    if out.returncode != 0:
        sys.exit(f"ablate failed ({out.returncode}):\n{out.stderr[-3000:]}")
    records = [json.loads(p.read_text()) for p in sweep.glob("*/result.json")]
    processes = [r["job"]["process_started_at"] for r in records]
    own = [processes.count(p) == 1 for p in processes]  # a process per job (submitit), or shared
    phases = [job_phases(r, o) for r, o in zip(records, own)]
    job_end = [r["job"]["started_at"] + sum(ph[k] for k in PHASES if k != "startup")
               for r, ph in zip(records, phases)]
    first_start = min(min(processes) if all(own) else min(r["job"]["started_at"] for r in records), ended)
    return {"wall": ended - started, "jobs": len(records), "before": first_start - started,
            "after": ended - max(job_end), "phases": phases}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--launchers", nargs="+", default=["basic", "submitit_local"],
                   help="hydra/launcher choices to time (default: basic submitit_local)")
    p.add_argument("--repeats", type=int, default=1, help="runs per launcher, alternating (default: 1)")
    p.add_argument("overrides", nargs="*", help="more overrides (after --); later ones win")
    args = p.parse_args()
    by_key = {o.split("=", 1)[0]: o for o in [*SWEEP, *args.overrides]}
    overrides = list(by_key.values())
    print(f"sweep: ablate -m {' '.join(overrides)}")
    runs: dict[str, list[dict]] = {name: [] for name in args.launchers}
    for _ in range(args.repeats):
        for name in args.launchers:
            with tempfile.TemporaryDirectory(prefix=f"bench-startup-{name}-") as tmp:
                runs[name].append(run_sweep(name, overrides, Path(tmp)))
    header = f"{'launcher':<15} {'wall':>6} {'before':>7} {'after':>6} | median job: " + " ".join(
        f"{k:>10}" for k in PHASES) + f" {'not steps':>10}"
    print(header)
    for name, results in runs.items():
        phases = [ph for r in results for ph in r["phases"]]
        per = {k: median([ph[k] for ph in phases]) for k in PHASES}
        outside = median([sum(v for k, v in ph.items() if k != "steps") for ph in phases])
        print(f"{name:<15} {median([r['wall'] for r in results]):6.1f} {median([r['before'] for r in results]):7.2f} "
              f"{median([r['after'] for r in results]):6.2f} |             "
              + " ".join(f"{per[k]:10.3f}" for k in PHASES) + f" {outside:10.3f}")
    print("(seconds; before: command start to the first job (or its process) starting; after: the last job's "
          "end to the command's exit; startup: a job's own process until the job starts)")


if __name__ == "__main__":
    main()
