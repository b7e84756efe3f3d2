"""A speed column under a real CPU hog (docs/measurements.md, "Speed on a shared machine").

A sweep of two variants that cost the same (two learning rates), pinned to one core (its process's
affinity, as ``taskset -c`` sets it), runs once quietly (its records give the next sweep's
estimate), then again into another directory while two busy-looping processes pinned to the same
core run during the second variant's job only. That variant's steps then get about a third of the
core: its runs' own speed is marked as timed under another load, and the sweep's end re-times the
two interleaved so that the speed column shows their true ratio (within ~10%, or marked where the
rounds disagree); the job says that its steps run slower than the sweep's estimate; and its record,
timed under load, does not set later estimates while the quiet ones are at hand. In its own file, so
that under ``--dist loadfile`` it shares a worker with nothing else."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import cli_env, records, run_cli, start_cli

from ablate.compose import tiny_overrides
from ablate.report import build_table
from ablate.report.records import load_sweep
from ablate.preview import _from_samples
from ablate.step_times import LOADED_SHARE, cache_path, loaded

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not shutil.which("taskset") or not hasattr(os, "sched_getaffinity"),
                                 reason="pins processes to a core with taskset (Linux)")]


def test_a_hog_during_one_variant_is_flagged_not_shown_as_a_slowdown(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    core = min(os.sched_getaffinity(0))
    env = cli_env(ABLATE_CACHE_DIR=str(tmp_path / "cache"))  # this test's step times only
    common = ["-m", "optim.lr=1e-3,2e-3", "seed=0", *tiny_overrides("logger=none", "trainer.max_steps=300",
                                                                    "measure.retime=auto"),
              "eval.every=0", "measure.memory=false"]
    # both sweeps on that one core (the warm processes' affinity: what `taskset -c CORE ablate ...` gives)
    quiet = run_cli([*common, f"hydra.sweep.dir={tmp_path / 'quiet'}"], tmp_path, env=env, cpus=[core])
    assert quiet.returncode == 0 and "than estimated" not in quiet.stdout, quiet.stderr[-3000:]
    sweep = tmp_path / "sweep"
    args = [*common, f"hydra.sweep.dir={sweep}"]
    run = start_cli(args, tmp_path, env=env, cpus=[core])
    hogs: list[subprocess.Popen] = []
    try:
        deadline = time.monotonic() + 180
        # the first variant's job has ended (its record is written at its end only; the basic launcher runs
        # the jobs one after another), so the hogs are there before the second one's first step, however
        # late a busy machine lets this loop look
        while not any(sweep.glob("*/result.json")):
            assert run.poll() is None and time.monotonic() < deadline, run.communicate()[1][-3000:]
            time.sleep(0.02)
        # two hogs: the job keeps at most a third of the core, a clear step back even where the quiet
        # sweep itself shared the core with another process of a busy test run. Each hog is its own
        # session, as the job is: where the kernel shares a core between sessions first (Linux's
        # sched_autogroup), two hogs of one session would leave the job half of the core, not a third
        hogs = [subprocess.Popen(["taskset", "-c", str(core), sys.executable, "-c", "while True: pass"],
                                 start_new_session=True) for _ in range(2)]
        out, err = run.communicate(timeout=240)
    finally:
        for process in (*hogs, run):
            if process.poll() is None:
                process.kill()
    assert run.returncode == 0, err[-3000:]
    # the estimate is the quiet sweep's two runs; one that shared its core with another process of a busy
    # test run (under LOADED_SHARE of its threads' time) is left out while the other is at hand
    quiet_loaded = sum(r["metrics"]["cpu_share"] < LOADED_SHARE for r in records(tmp_path / "quiet"))
    said_sources = ("from 1 earlier run(s) here", "1 taken under load left out") if quiet_loaded == 1 else \
        ("from 2 earlier run(s) here",)
    assert "2 jobs (0 already done), about" in out and all(s in out for s in said_sources), (quiet_loaded, out[-3000:])
    said = [line for line in out.splitlines() if line.startswith("[ablate] slower than estimated")]
    assert said, out[-3000:]  # (a first job quieter than the quiet sweep may say "faster" first)
    print(f"\n{said[0]}")

    shares = {r["config"]["optim"]["lr"]: r["metrics"]["cpu_share"] for r in records(sweep)}
    assert shares[0.002] < shares[0.001] - 0.2, shares  # the hog took its share of the second variant's core
    # the runs' own timings are marked as not comparable, not shown as a slowdown ...
    own = build_table(dataclasses.replace(load_sweep(sweep), bench=None))
    (row,) = [r for r in own.rows if not r.is_baseline]
    assert row.speed_doubt[0] == "load" and "timed under another load than the baseline" in own.caption()
    # ... and the sweep's end re-timed the two interleaved (measure.retime=auto), hogs still running: the
    # speed column shows the true ratio of two variants of equal cost
    assert "timing the variants again, interleaved" in out and (sweep / "bench.json").exists(), out[-3000:]
    rows = {r["variant"]: r for r in csv.DictReader(io.StringIO((sweep / "table.csv").read_text()))}
    hogged = next(r for v, r in rows.items() if "0.002" in v)
    marked = "§" in next(line for line in (sweep / "table.md").read_text().splitlines() if "0.002" in line)
    print(f"\ncpu_share {shares}, the runs' own speed ratio {row.speed_ratio:.2f}, re-timed {hogged['speed_ratio']}")
    assert hogged["speed_source"] == "bench" and (abs(float(hogged["speed_ratio"]) - 1) <= 0.1 or marked), hogged

    # the sweep's end cached its records' step times; the hogged one is left out of later estimates
    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path / "cache"))
    (samples,) = [entry["samples"] for entry in json.loads(cache_path().read_text()).values()]
    under_load = sum(loaded(s) for s in samples)  # the hogged run's; on a quiet machine the only one
    assert len(samples) == 4 and loaded(min(samples, key=lambda s: s["cpu_share"])), samples
    estimate = _from_samples(samples, 0.0)
    assert (estimate.left_out, estimate.loaded) == ((under_load, False) if under_load < 4 else (0, True)), samples
