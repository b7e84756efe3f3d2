"""Which sweeper runs a sweep: ablate's flags as its config keys; Hydra's basic sweeper and a
third-party one (optuna) for what they can do, and a clear refusal for what only ablate's can."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from conftest import QUIET, compose_cfg, records, run_cli

from ablate.cli import FLAGS, expand_flags
from ablate.compose import tiny_overrides
from ablate.config import config_problems
from ablate.settings import optimized_value

TINY = tiny_overrides(*QUIET)


# ---------------------------------------------------------------------------------- flags

@pytest.mark.parametrize("argv,expected", [
    (["--plan", "experiment=norm"], ["-m", "hydra.sweeper.plan=true", "experiment=norm"]),
    (["-m", "--plan", "seed=0,1"], ["-m", "hydra.sweeper.plan=true", "seed=0,1"]),
    (["--redefine", "-m", "seed=0,1"], ["-m", "hydra.sweeper.redefine=true", "seed=0,1"]),
    (["--redefine", "-m", "--config-dir", "lab", "seed=0,1", "--cfg", "job"],
     ["-m", "--config-dir", "lab", "hydra.sweeper.redefine=true", "seed=0,1", "--cfg", "job"]),
    (["--smoke", "seed=3"], ["smoke=true", "seed=0"]),
    (["--smoke", "-m", "experiment=init", "seed=0,1,2"],
     ["-m", "smoke=true", "++hydra.sweeper.params.seed=0", "experiment=init", "seed=0"]),
    (["--plan"], ["-m", "hydra.sweeper.plan=true"]),
    (["-m", "seed=0,1"], ["-m", "seed=0,1"]),
])
def test_each_flag_stands_for_config_keys(argv: list[str], expected: list[str]) -> None:
    assert expand_flags(argv) == expected


@pytest.mark.slow
def test_help_lists_ablates_flags(tmp_path: Path) -> None:
    out = run_cli(["--help"], tmp_path)
    assert out.returncode == 0, out.stderr
    for flag in FLAGS:
        assert flag in out.stdout, (flag, out.stdout)
    assert "hydra.sweeper.plan=true" in out.stdout and "hydra.sweeper.redefine=true" in out.stdout


# ---------------------------------------------------------------------------------- basic

@pytest.mark.slow
def test_a_plain_sweep_under_the_basic_sweeper_records_resumes_and_tables(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    args = ["-m", "hydra/sweeper=basic", "qkv_sharing=independent,qk_shared", "seed=0,1", *TINY, "logger=none",
            f"hydra.sweep.dir={sweep}"]
    out = run_cli(args, tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    recs = records(sweep)
    assert len(recs) == 4 and {r["status"] for r in recs} == {"ok"}
    plan = json.loads((sweep / "sweep.json").read_text())
    ran = sorted(sorted(r["overrides"]) for r in recs)
    assert sorted(sorted(job) for job in plan["jobs"]) == ran == sorted(sorted(j) for j in plan["definition"])
    assert plan["swept"] == ["qkv_sharing", "seed"]
    table = (sweep / "table.md").read_text()
    assert "| independent (baseline) |" in table and "| qk\\_shared |" in table, table
    again = run_cli(args, tmp_path)
    assert again.returncode == 0 and again.stdout.count("already ok") == 4, again.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("sweeper,setting,named", [
    ("basic", ["experiment=norm"], "experiment.design"),
    ("basic", ["tune.lr=[0.001]"], "tune.lr=[0.001]"),
    ("optuna", ["budget.match=flops"], "budget.match=flops"),
    ("optuna", ["experiment=norm"], "experiment.design"),
])
def test_what_only_ablates_sweeper_can_honour_is_refused_under_another(tmp_path: Path, sweeper: str,
                                                                          setting: list[str], named: str) -> None:
    sweep = tmp_path / "sweep"
    out = run_cli(["-m", f"hydra/sweeper={sweeper}", "seed=0,1" if sweeper == "basic" else "hydra.sweeper.n_trials=2",
                   *TINY, *setting, f"hydra.sweep.dir={sweep}"], tmp_path)
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    assert named in out.stderr and "hydra/sweeper=ablate" in out.stderr and "Traceback" not in out.stderr
    assert not list(tmp_path.rglob("result.json")) and not (sweep / "sweep.json").exists()


@pytest.mark.slow
def test_plan_needs_ablates_sweeper(tmp_path: Path) -> None:
    out = run_cli(["--plan", "hydra/sweeper=basic", *TINY], tmp_path)
    assert out.returncode == 2 and "--plan (hydra.sweeper.plan) needs ablate's sweeper" in out.stderr, out.stderr


# ---------------------------------------------------------------------------------- optuna

@pytest.mark.slow
def test_an_optimiser_sweeper_chooses_its_jobs_and_the_sweep_ends_in_a_table(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    out = run_cli(["-m", "hydra/sweeper=optuna", "hydra.sweeper.n_trials=2", "hydra.sweeper.sampler.seed=0",
                   "optim.lr=interval(0.001,0.01)", *TINY, "logger=none", f"hydra.sweep.dir={sweep}"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    recs = records(sweep)
    assert len(recs) == 2 and {r["status"] for r in recs} == {"ok"}
    assert not (sweep / "sweep.json").exists(), "an optimiser's jobs are not known up front: no plan is recorded"
    assert len({r["config"]["optim"]["lr"] for r in recs}) == 2
    assert (sweep / "table.md").exists()
    # the sweeper optimised the validation loss (optimized_metric), never the test split's numbers
    best = yaml.safe_load((sweep / "optimization_results.yaml").read_text())["best_value"]
    assert best == pytest.approx(min(r["metrics"]["val"]["loss"] for r in recs))
    assert best != pytest.approx(min(r["metrics"]["loss"] for r in recs))


@pytest.mark.slow
def test_the_optimised_metric_is_a_setting(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    out = run_cli(["-m", "hydra/sweeper=optuna", "hydra.sweeper.n_trials=2", "hydra.sweeper.direction=maximize",
                   "optimized_metric=val/accuracy", "optim.lr=choice(0.001,0.01)", *TINY, "logger=none",
                   f"hydra.sweep.dir={sweep}"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    best = yaml.safe_load((sweep / "optimization_results.yaml").read_text())["best_value"]
    assert best == pytest.approx(max(r["metrics"]["val"]["accuracy"] for r in records(sweep)))


def test_the_value_returned_to_a_sweeper() -> None:
    metrics = {"loss": 2.0, "accuracy": 0.4, "val": {"loss": 2.1, "accuracy": 0.35}}
    assert optimized_value(metrics, "val/loss") == 2.1 and optimized_value(metrics, "val/accuracy") == 0.35
    assert math.isnan(optimized_value({"loss": 2.0}, "val/loss"))  # diverged before any validation
    assert any("optimized_metric='test/accuracy'; valid choices: val/loss, val/accuracy" in p
               for p in config_problems(_composed("optimized_metric=test/accuracy")))


def _composed(*overrides: str):
    return compose_cfg([*TINY, *overrides])
