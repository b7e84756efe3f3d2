"""``ablate --plan``'s estimate and a sweep's first line, in process: earlier records of the same
settings are used instead of timing, the range is printed, and timing stops at its cap per variant
(counted in steps). Real planner (test_planner's), real in-process jobs (``ablate.run.run_job``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_planner import TINY, planner

from ablate import preview as preview_module
from ablate.job import Job
from ablate.jobdir import job_dir_name
from ablate.preview import MIN_TIMED_STEPS, TIMING_STEPS, preview, render, start_line, time_variants
from ablate.record import read_record

SWEEP = ["qkv_sharing=independent,qk_shared", "seed=0,1", *TINY, "measure.warmup_steps=2", "measure.memory=false"]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _run(p, job: list[str], sweep_dir: Path) -> dict:
    """One job of the plan, trained in process into its directory of ``sweep_dir``."""
    from ablate.run import run_job

    record = run_job(p.compose(job), Job(sweep_dir / job_dir_name(job), job, {}, None, None))
    assert record.status == "ok", record.error
    return record


def test_earlier_records_give_the_estimate_without_timing(tmp_path: Path, cache: Path, one_thread) -> None:
    sweep_dir = tmp_path / "sweep"
    p = planner(SWEEP)
    plan = p.plan()
    first = _run(p, plan.jobs[0], sweep_dir)  # qkv_sharing=independent seed=0

    shown = preview(p, plan, sweep_dir, time_steps=False)  # nothing timed: only earlier runs count
    median = first.metrics.step_time_s["median"]
    assert shown.step_times == {"qkv_sharing=independent": median}
    assert shown.estimates["qkv_sharing=independent"].source == "runs"
    assert shown.estimates["qkv_sharing=independent"].other_s == pytest.approx(
        first.metrics.wall_time_s - first.metrics.steps * median)
    assert "from 1 earlier run(s) here" in render(shown)
    line = start_line(p, plan, sweep_dir)  # qk_shared has no earlier run: no estimate, the hint
    assert line.startswith("[ablate] 4 jobs (1 already done); for an estimate: ablate --plan ") and "\n" not in line

    _run(p, plan.jobs[2], sweep_dir)  # qkv_sharing=qk_shared seed=0
    line = start_line(p, plan, sweep_dir)
    assert line.startswith("[ablate] 4 jobs (2 already done), about ") and "from 2 earlier run(s) here" in line
    assert "\n" not in line

    # another sweep directory of the same settings: the records reach it through the cache
    elsewhere = preview(p, plan, tmp_path / "other", time_steps=False)
    assert elsewhere.step_times["qkv_sharing=independent"] == median and elsewhere.estimated
    assert (cache / "step_times.json").is_file()


def test_timing_stops_at_its_cap_and_the_range_is_printed(tmp_path: Path, cache: Path, one_thread,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    p = planner(SWEEP)
    plan = p.plan()
    configs = {"a": p.compose(plan.jobs[0]), "b": p.compose(plan.jobs[2])}
    monkeypatch.setattr(preview_module, "TIMING_CAP_S", 0.0)  # any step is over the cap
    capped = time_variants(configs)
    assert {key: e.count for key, e in capped.items()} == {"a": MIN_TIMED_STEPS, "b": MIN_TIMED_STEPS}
    monkeypatch.setattr(preview_module, "TIMING_CAP_S", 1e9)
    assert time_variants({"a": configs["a"]})["a"].count == TIMING_STEPS

    monkeypatch.setattr(preview_module, "TIMING_CAP_S", 0.0)
    shown = preview(p, plan, tmp_path / "sweep")
    text = render(shown)
    assert all(e.source == "timed" and e.low_s <= e.step_s <= e.high_s for e in shown.estimates.values())
    low, high = shown.seconds_range
    assert low <= shown.seconds <= high
    assert f"{2 * MIN_TIMED_STEPS} steps timed now, the quartiles of their times" in text, text
    assert "estimated time on this machine, one job after another: about " in text

    again = preview(p, plan, tmp_path / "sweep", time_steps=False)  # the timings are remembered
    assert again.estimated and {e.source for e in again.estimates.values()} == {"timed earlier"}
    assert "from 2 earlier timing(s) here" in start_line(p, plan, tmp_path / "sweep")
    assert read_record(tmp_path / "sweep") is None and not (tmp_path / "sweep").exists()  # nothing written there


def test_the_estimate_covers_the_rungs_that_reuse_a_rate(tmp_path: Path, cache: Path, one_thread,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """tune.rungs=smallest: a larger rung has no tuning runs, only final ones, and they are in the
    estimate too (they were left out of it, and out of the list)."""
    args = ["model.d_model=16,32", "tune.lr=[0.01]", "tune.rungs=smallest", "model.parametrization=mup",
            "model.mup_base_width=16", "seed=0,1", *[a for a in TINY if not a.startswith("model.d_model")]]
    p = planner(args)
    monkeypatch.setattr(preview_module, "TIMING_CAP_S", 0.0)  # the fewest steps timed
    shown = preview(p, p.plan(), tmp_path / "sweep")
    assert set(shown.estimates) == {"model.d_model=16", "model.d_model=32"}
    assert len(shown.jobs) == 5 and all(j.seconds for j in shown.jobs)
    wide = [j for j in shown.jobs if "model.d_model=32" in j.overrides]
    assert len(wide) == 2 and shown.seconds > sum(j.seconds for j in wide)
