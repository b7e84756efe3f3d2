"""Jobs of a parallel launcher share the machine's cores instead of each taking all of them
(real CLI, real submitit local executor; the records say how each job ran)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import records, run_cli
from test_jobdirs import LAUNCHER_ARGS, check_path_sweep, path_sweep, same_named_files

from ablate.compose import tiny_overrides
from ablate.record import jobs_at_once, load_records
from ablate.job import cpu_cores

pytestmark = pytest.mark.slow  # real submitit sweeps through the `ablate` CLI


VARIANTS = ["independent", "qk_shared", "qkv_shared", "kv_shared", "mqa"]


def submitit_sweep(tmp_path: Path, tiny: list[str], n_jobs: int, *extra: str) -> tuple[Path, list[dict]]:
    """A sweep of ``n_jobs`` variants under submitit's local executor (each job its own process), 10
    steps each: what it checks (threads, jobs at once) needs no more."""
    sweep = tmp_path / "sweep"
    out = run_cli(["-m", f"qkv_sharing={','.join(VARIANTS[:n_jobs])}", *tiny, "trainer.max_steps=10",
                   "logger=none",
                   "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10", *extra,
                   f"hydra.sweep.dir={sweep}"], tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    recs = records(sweep)
    assert len(recs) == n_jobs and {r["status"] for r in recs} == {"ok"}
    assert all(r["job"]["started_at"] is not None and r["metrics"]["wall_time_s"] > 0 for r in recs)
    # the jobs' output goes to log files: the launching process says each job's line, once, and the sweep's time
    assert out.stdout.count(": ok  ") == n_jobs and "[ablate] the sweep took" in out.stdout, out.stdout[-3000:]
    return sweep, recs


def test_submitit_local_jobs_share_the_cores(tmp_path: Path, tiny: list[str]) -> None:
    """By default each job gets one core and as many jobs run at once as there are cores (at most 4):
    one job more than that waits for a slot. The sweep is test_jobdirs' over same-named files in nested
    directories, whose checks it passes too (directories, records, wandb runs, a process per job)."""
    n = cpu_cores()
    paths = same_named_files(tmp_path, min(n, 4) + 1)
    sweep = tmp_path / "sweep"
    out = run_cli([*path_sweep(paths, sweep), *tiny_overrides("measure.retime=auto"), "trainer.max_steps=100",
                   *LAUNCHER_ARGS["submitit_local"]], tmp_path, timeout=400)
    assert out.returncode == 0, out.stderr[-3000:]
    # the jobs' output goes to log files: the launching process says each job's line, once, and the sweep's time
    assert out.stdout.count(": ok  ") == len(paths) and "[ablate] the sweep took" in out.stdout, out.stdout[-3000:]
    recs = check_path_sweep(sweep, paths, "submitit_local")
    for r in recs:
        m = r["metrics"]
        assert r["job"]["launcher"] == "submitit_local" and m["cpu_cores"] == n
        assert m["concurrent_jobs"] == min(n, 4)
        assert m["torch_threads"] * m["concurrent_jobs"] <= n, m
        assert m["torch_threads"] == max(1, n // min(n, 4))
    assert jobs_at_once(load_records(sweep)) <= min(n, 4)
    caption = (sweep / "table.md").read_text().replace("\\", "")
    if min(n, 4) > 1:  # jobs ran at once: the sweep's end timed the variants again, interleaved (measure.retime)
        assert "timing the variants again, interleaved" in out.stdout, out.stdout[-3000:]
        assert (sweep / "bench.json").exists() and "speed: interleaved benchmark (ablate-bench)" in caption, caption
        assert "competing for the CPU" not in caption


def test_submitit_local_cpus_per_task_sets_threads_and_how_many_run_at_once(tmp_path: Path, tiny: list[str]) -> None:
    n = cpu_cores()
    sweep, recs = submitit_sweep(tmp_path, tiny, 2, f"hydra.launcher.cpus_per_task={n}")  # one after the other
    for r in recs:
        assert r["metrics"]["torch_threads"] == n and r["metrics"]["concurrent_jobs"] == 1
    assert jobs_at_once(load_records(sweep)) == 1, "one job at a time holds all the cores"
    assert "shared the machine" not in (sweep / "table.md").read_text()
    assert not (sweep / "bench.json").exists(), "one job at a time, none under another load: nothing to re-time"
