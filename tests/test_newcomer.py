"""The newcomer's path through the real CLI: a sweep preview, a smoke switch, unknown keys named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import QUIET, records, run_cli

from ablate.compose import tiny_overrides

pytestmark = pytest.mark.slow  # every test runs the real `ablate` CLI

TINY = tiny_overrides(*QUIET, without=["trainer"])  # the default trainer, as a newcomer runs it


def _snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    """Every file's size and mtime, and every directory's mtime (it changes when an entry is added or
    removed), the directory's own included."""
    return {str(p.relative_to(directory)): (p.stat().st_size if p.is_file() else -1, p.stat().st_mtime_ns)
            for p in [directory, *sorted(directory.rglob("*"))]}


def test_plan_lists_every_job_marks_finished_ones_and_writes_nothing(tmp_path: Path) -> None:
    """One --plan, of a sweep partly done: all 9 jobs listed, each marked, the time of those to run
    estimated, and nothing written (no file, no directory: the snapshot holds every directory's mtime,
    the sweep directory's own included). The statuses themselves are tested in process too
    (tests/test_planner.py: test_preview_marks_done_rerun_and_to_run)."""
    sweep = tmp_path / "sweep"
    quiet = [*TINY, "logger=none"]  # what is planned is the point here, not what a job logs
    done = run_cli(["-m", "experiment=qkv_sharing", *quiet, f"hydra.sweep.dir={sweep}"], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    job_dirs = sorted(p.parent for p in sweep.rglob("result.json"))
    (job_dirs[0] / "result.json").unlink()                       # never finished
    failed = json.loads((job_dirs[1] / "result.json").read_text())
    failed["status"] = "failed"
    (job_dirs[1] / "result.json").write_text(json.dumps(failed))  # to rerun
    before = _snapshot(sweep)

    out = run_cli(["--plan", "experiment=qkv_sharing", *quiet, f"hydra.sweep.dir={sweep}"], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    statuses = [next(s for s in ("done", "rerun", "to run") if f"  {s} " in line)
                for line in out.stdout.splitlines() if "experiment=qkv_sharing" in line]
    assert sorted(statuses) == ["done"] * 7 + ["rerun", "to run"], out.stdout
    assert "to run: 2 job(s), 12 training steps; done already: 7" in out.stdout, out.stdout
    assert "estimated time on this machine" in out.stdout, out.stdout
    assert _snapshot(sweep) == before, "a plan writes nothing into the sweep directory"
    assert len(records(sweep)) == 8


def test_plan_of_an_invalid_sweep_names_the_problem(tmp_path: Path) -> None:
    out = run_cli(["--plan", "experiment=qkv_sharing", *TINY, "model.dropout=abc"], tmp_path)
    assert out.returncode == 2 and "model.dropout='abc'" in out.stderr


def test_smoke_shrinks_an_experiment_and_the_table_says_so(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    # no trainer.max_steps nor held-out sizes: --smoke sets them
    tiny = tiny_overrides("logger=none", without=["trainer", "task.n_val", "task.n_test"])
    out = run_cli(["--smoke", "-m", "experiment=init", *tiny, "seed=0,1,2", f"hydra.sweep.dir={sweep}"], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    recs = records(sweep)
    assert len(recs) == 7, "the experiment's 7 init schemes, one seed"
    assert {r["config"]["seed"] for r in recs} == {0} and {r["metrics"]["steps"] for r in recs} == {20}
    assert all(r["config"]["smoke"] is True and r["config"]["task"]["n_test"] == 64 for r in recs)
    assert "smoke" in (sweep / "table.md").read_text().lower()


def test_unknown_key_exits_2_with_the_valid_keys(tmp_path: Path) -> None:
    out = run_cli(["trainer=debug", "logger=none", "model.foo=1", "hydra.run.dir=run"], tmp_path)
    assert out.returncode == 2, out.stderr
    assert "model.foo=1 is not a key of the config; valid keys of model: d_model, n_heads" in out.stderr
    assert "+model.foo=1" in out.stderr and not (tmp_path / "run").exists()


def test_unknown_keys_of_a_sweep_are_all_named(tmp_path: Path) -> None:
    out = run_cli(["-m", "trainer=debug", "logger=none", "qkv_sharing=gqa", "qkv_sharing.kvheads=2",
                   "model.foo=1,2"], tmp_path)
    assert out.returncode == 2, out.stderr
    assert "qkv_sharing.kvheads=2 is not a key of the config; valid keys of qkv_sharing: _target_, name, kv_heads" \
        in out.stderr and "model.foo=1 is not a key" in out.stderr
