"""Estimates that know what they know (docs/measurements.md, "Estimates on a shared machine").

In process: test_planner's planner and ``ablate.preview`` as ``--plan`` and a sweep's first line
call them, over a step-time cache written here; ``ablate.pace`` as a job calls it; and one real
Lightning fit of a sweep's job whose estimate its steps cannot meet."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from conftest import IN_PROCESS, compose_cfg
from test_plan_estimate import SWEEP
from test_planner import planner

from ablate import preview as preview_module
from ablate.compose import tiny_overrides
from ablate.console import duration_text
from ablate.job import Job
from ablate.pace import DEPARTURE, ESTIMATE_FILE, MIN_STEPS, SweepEstimate, departure, jobs_left, pace_line
from ablate.preview import preview, render, start, start_line
from ablate.run import run_job
from ablate.step_times import LOADED_SHARE, cache_path

FIRST, SECOND = "qkv_sharing=independent", "qkv_sharing=qk_shared"


@pytest.fixture
def sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """SWEEP's planner and plan, with a cache of its own; ``write(variant -> samples)`` fills it."""
    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path / "cache"))
    p = planner(SWEEP)
    plan = p.plan()
    keys = preview(p, plan, tmp_path / "sweep", time_steps=False).keys

    def write(samples: dict[str, list[dict]]) -> None:
        cache_path().parent.mkdir(exist_ok=True)
        cache_path().write_text(json.dumps({keys[v]: {"samples": s, "at": time.time()} for v, s in samples.items()}))

    return p, plan, tmp_path / "sweep", write


def run(step_s: float, share: float | None, age_s: float, n: int = 0) -> dict:
    """A cached measurement from an earlier run's record."""
    return {"step_s": step_s, "low_s": step_s, "high_s": step_s, "other_s": 1.0, "source": "runs",
            "id": f"run-{step_s}-{share}-{n}", "cpu_share": share, "at": time.time() - age_s}


def test_runs_timed_under_load_are_left_out_where_quieter_ones_are_at_hand(sweep) -> None:
    p, plan, sweep_dir, write = sweep
    write({FIRST: [run(0.010, 0.97, 3600), run(0.040, 0.45, 60)],   # the newer one under a hog
           SECOND: [run(0.011, None, 7200)]})                         # recorded before shares were
    shown = preview(p, plan, sweep_dir, time_steps=False)
    assert shown.estimates[FIRST].step_s == 0.010 and shown.estimates[FIRST].left_out == 1
    assert shown.estimates[SECOND].step_s == 0.011
    line = start_line(p, plan, sweep_dir)
    assert "from 2 earlier run(s) here, the newest 1 h 00 min old" in line, line
    assert "1 taken under load left out" in line and "under load only" not in line, line
    assert "from 2 earlier run(s) here" in render(shown)


def test_an_estimate_from_loaded_runs_only_says_so(sweep) -> None:
    p, plan, sweep_dir, write = sweep
    write({FIRST: [run(0.040, 0.45, 30)], SECOND: [run(0.011, 0.95, 30)]})
    shown = preview(p, plan, sweep_dir, time_steps=False)
    assert shown.estimates[FIRST].loaded and shown.estimates[FIRST].step_s == 0.040
    assert not shown.estimates[SECOND].loaded
    line = start_line(p, plan, sweep_dir)
    assert f"{FIRST} timed under load only (steps with under {LOADED_SHARE:.0%}" in line, line
    assert SECOND not in line.split("timed under load only")[0].split(";")[-1], line


def test_step_times_far_from_the_flops_are_named_at_the_start_and_retimed_by_plan(sweep, monkeypatch) -> None:
    """Q=K (one projection fewer) has about Q=K's FLOPs: a 30x longer step from other moments is said
    on the sweep's first line, and ``--plan`` times every variant now, side by side, instead."""
    p, plan, sweep_dir, write = sweep
    write({FIRST: [run(0.010, 0.97, 60)], SECOND: [run(0.300, 0.97, 60)]})
    line = start_line(p, plan, sweep_dir)
    assert f"note: {SECOND} steps 30.0x as long as {FIRST} at 0." in line, line
    assert "ablate --plan times them side by side" in line
    monkeypatch.setattr(preview_module, "TIMING_CAP_S", 0.0)  # the fewest steps timed
    shown = preview(p, plan, sweep_dir)
    assert {e.source for e in shown.estimates.values()} == {"timed"}, shown.estimates
    assert shown.estimates[SECOND].step_s < 5 * shown.estimates[FIRST].step_s  # tiny models, near-equal FLOPs
    assert "every variant timed now, side by side: earlier step times disagreed with the FLOPs" in render(shown)
    assert all(e.cpu_share is not None and 0 < e.cpu_share <= 1.5 for e in shown.estimates.values())
    again = json.loads(cache_path().read_text())  # the timings are cached with their share of the threads
    assert all(any("cpu_share" in s for s in entry["samples"]) for entry in again.values())


def test_a_sweeps_start_leaves_its_estimate_for_its_jobs(sweep) -> None:
    p, plan, sweep_dir, write = sweep
    line, estimate = start(p, plan, sweep_dir)
    assert estimate is None and "for an estimate" in line  # nothing measured yet: nothing to check against
    write({FIRST: [run(0.010, 0.97, 60)], SECOND: [run(0.011, 0.97, 60)]})
    line, estimate = start(p, plan, sweep_dir)
    assert estimate is not None and estimate.jobs == len(plan.jobs) and len(estimate.step_s) == 2
    assert f"about {duration_text(estimate.seconds)} here" in line
    sweep_dir.mkdir()
    estimate.write(sweep_dir)
    assert SweepEstimate.read(sweep_dir) == estimate
    SweepEstimate.clear(sweep_dir)
    assert SweepEstimate.read(sweep_dir) is None and not (sweep_dir / ESTIMATE_FILE).exists()


def test_a_pace_far_from_the_estimate_is_said_once(tmp_path: Path) -> None:
    estimate = SweepEstimate(at=time.time() - 10, seconds=300.0, jobs=6, step_s={"k": 0.1})
    assert departure(estimate, 0.1, [0.1] * (MIN_STEPS - 1) + [9.0]) is None     # too few steps to judge
    assert departure(estimate, 0.1, [0.14] * MIN_STEPS) is None                  # within DEPARTURE
    pace = departure(estimate, 0.1, [0.01] * 5 + [0.3] * MIN_STEPS)              # the recent steps count
    assert pace == pytest.approx(3.0)
    assert departure(estimate, 0.1, [0.05] * MIN_STEPS) == pytest.approx(0.5)    # faster is said too
    estimate.said = 3.0
    assert departure(estimate, 0.1, [0.3 * DEPARTURE * 0.9] * MIN_STEPS) is None  # near the pace said
    assert departure(estimate, 0.1, [0.3 * DEPARTURE * 1.2] * MIN_STEPS) is not None

    for n, status in enumerate(["ok", "failed", "running"]):  # two ended since the start; one runs
        job = tmp_path / f"job{n}"
        job.mkdir()
        (job / "result.json").write_text(json.dumps({"status": status}))
    assert jobs_left(tmp_path, estimate) == 4
    line = pace_line(estimate, 0.1, 3.0, steps_left=200, jobs_left=4)
    assert line.startswith("[ablate] slower than estimated: this job's steps take 0.3 s, 3.0x the 0.1 s")
    assert "this job needs about 1 min 00 s more" in line
    assert f"4 unfinished job(s) about {duration_text(3.0 * 300 * 4 / 6)}" in line
    assert f"against {duration_text(300)} estimated at its start" in line
    assert pace_line(estimate, 0.1, 0.5, 10, 1).startswith("[ablate] faster than estimated")


def test_a_job_whose_steps_run_far_slower_than_its_estimate_says_so(tmp_path: Path, capsys) -> None:
    """A real fit of a sweep's job whose sweep estimated its steps at a microsecond: one line, once,
    and the pace said is noted for the sweep's later jobs."""
    from ablate.step_times import device_name, step_time_key

    overrides = tiny_overrides(*IN_PROCESS, "trainer.max_steps=60", "measure.warmup_steps=2")
    cfg = compose_cfg(overrides)
    sweep_dir = tmp_path / "sweep"
    job = Job(sweep_dir / "0", overrides, {}, str(sweep_dir), 0)
    sweep_dir.mkdir()
    import torch

    key = step_time_key(cfg, torch.get_num_threads(), 1, device_name(cfg))
    SweepEstimate(at=time.time(), seconds=1.0, jobs=2, step_s={key: 1e-6}).write(sweep_dir)
    record = run_job(cfg, job)
    assert record.status == "ok", record.error
    lines = [line for line in capsys.readouterr().out.splitlines() if "than estimated" in line]
    assert len(lines) == 1 and lines[0].startswith("[ablate] slower than estimated"), lines
    noted = SweepEstimate.read(sweep_dir)
    assert noted.said > DEPARTURE and noted.said_line == lines[0]


def test_under_submitit_the_launching_process_prints_a_jobs_pace_line(tmp_path: Path, capsys) -> None:
    """A submitit job's output goes to its log file: the sweep's launching process prints the line
    the job noted in the sweep's estimate, once (``sweeper._JobLines``, as for the jobs' own lines)."""
    from ablate.pace import remember_said
    from ablate.sweeper import _JobLines

    SweepEstimate(at=time.time(), seconds=10.0, jobs=2, step_s={"k": 0.1}).write(tmp_path)
    with _JobLines(tmp_path, active=True, poll_s=0.05):
        remember_said(tmp_path, 3.0, "[ablate] slower than estimated: a job's line")
        time.sleep(0.3)
    assert capsys.readouterr().out.count("[ablate] slower than estimated: a job's line") == 1


def test_the_sweeps_end_re_times_what_shared_the_machine_in_a_layout_with_a_speed_column() -> None:
    """``measure.retime=auto``: a flat table whose runs ran two at once is re-timed; the same runs
    one at a time, a smoke test, ``never``, or a ladder (no speed column) are not; ``always`` is."""
    from omegaconf import OmegaConf
    from test_ladder_table import ladder_records
    from test_table import qkv_records

    from ablate.callbacks import _retime
    from ablate.report import build_table
    from ablate.report.records import LoadedSweep

    def config(**node) -> object:
        return OmegaConf.create({"measure": node, "smoke": node.pop("smoke", False)})

    def case(records) -> tuple:
        sweep = LoadedSweep(records)
        return sweep, build_table(sweep)

    alone = case(qkv_records())
    shared_records = qkv_records()
    for r in shared_records:
        r.metrics.concurrent_jobs = 2
    shared = case(shared_records)
    ladder_recs = ladder_records()
    for r in ladder_recs:
        r.metrics.concurrent_jobs = 2
    ladder = case(ladder_recs)
    assert _retime(config(), *shared) and not _retime(config(), *alone)
    assert not _retime(config(retime="never"), *shared) and not _retime(config(smoke=True), *shared)
    assert _retime(config(retime="always"), *alone)
    assert not ladder[1].shows_speed and not _retime(config(retime="always"), *ladder)
