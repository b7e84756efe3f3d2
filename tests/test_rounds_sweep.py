"""Seeds in rounds (``seed=auto``) as a sweep: the plan, the refusals, ``--plan``'s rounds and power,
and real sweeps through the CLI under the basic, joblib and submitit launchers, resumed mid-round.

The statistics (``ablate.sequential``) are tested in tests/test_sequential.py, the table's verdicts
in tests/test_rounds_table.py; here, what the sweeper launches round by round: every row's first
round, then the next round's seeds only for the comparisons the records leave undecided and their
baselines, the plan's record of it (``sweep.json``'s ``rounds``), and the table at the end agreeing.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from conftest import QUIET, records, run_cli
from test_planner import planner

from ablate.compose import tiny_overrides
from ablate.planner import SweepError
from ablate.power import baselines
from ablate.preview import preview, render
from ablate.seed_spreads import Spread, remember, spread_key
from ablate.sweep import SweepPlan, job_value

TINY = tiny_overrides(*QUIET)
ROUNDS = ["seed=auto", "stats.mde=2", "stats.min_seeds=3", "stats.max_seeds=7", "stats.round_seeds=2"]


def _seeds(jobs: list[list[str]]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for job in jobs:
        variant = ",".join(o for o in job if o.startswith("qkv_sharing="))
        out.setdefault(variant, []).append(int(job_value(job, "seed")))
    return {k: sorted(v) for k, v in out.items()}


# ---------------------------------------------------------------------------------- the plan

def test_seed_auto_plans_every_seed_to_the_cap_and_launches_the_first_round() -> None:
    plan = planner(["qkv_sharing=independent,qk_shared,qkv_shared", *ROUNDS, *TINY]).plan()
    assert plan.rounds is not None and plan.rounds.looks() == (3, 5, 7) and plan.rounds.run == 1
    assert plan.rounds.mde == 2.0 and plan.rounds.alpha == 0.05 and plan.rounds.spending == "obrien_fleming"
    assert all(seeds == list(range(7)) for seeds in _seeds(plan.definition).values())
    assert all(seeds == [0, 1, 2] for seeds in _seeds(plan.jobs).values())
    assert "seed" in plan.swept


def test_the_rounds_looks_end_at_the_cap() -> None:
    plan = planner(["qkv_sharing=independent,qk_shared", "seed=auto", "stats.mde=1", "stats.min_seeds=4",
                    "stats.max_seeds=9", "stats.round_seeds=3", *TINY]).plan()
    assert plan.rounds.looks() == (4, 7, 9)
    assert [plan.rounds.round_of(s) for s in range(9)] == [1, 1, 1, 1, 2, 2, 2, 3, 3]


def test_the_rounds_are_recorded_in_sweep_json_and_read_back(tmp_path: Path) -> None:
    plan = planner(["qkv_sharing=independent,qk_shared", *ROUNDS, *TINY]).plan()
    plan.rounds.verdicts = {"qkv_sharing=qk_shared": {"verdict": "undecided", "n": 3, "round": 1}}
    plan.write(tmp_path)
    back = SweepPlan.read(tmp_path)
    assert back.rounds == plan.rounds and back.definition == plan.definition
    fixed = planner(["qkv_sharing=independent,qk_shared", "seed=0,1", *TINY]).plan()
    fixed.write(tmp_path)
    assert "rounds" not in json.loads((tmp_path / "sweep.json").read_text()) and SweepPlan.read(tmp_path).rounds is None


@pytest.mark.parametrize("arguments,named", [
    (["qkv_sharing=independent,qk_shared", "seed=auto"], "set stats.mde"),
    (["qkv_sharing=independent,qk_shared", "seed=auto", "stats.mde=0"], "stats.mde=0"),
    (["qkv_sharing=independent,qk_shared", "seed=auto", "stats.mde=-1"], "stats.mde=-1"),
    (["qkv_sharing=independent,qk_shared", "seed=auto", "stats.mde=1", "stats.min_seeds=5", "stats.max_seeds=4"],
     "stats.max_seeds=4 is below stats.min_seeds=5"),
    (["qkv_sharing=independent,qk_shared", "seed=auto", "stats.mde=1", "stats.min_seeds=1"], "stats.min_seeds=1"),
    (["qkv_sharing=independent,qk_shared", "seed=auto", "stats.mde=1", "stats.round_seeds=0"], "stats.round_seeds=0"),
    (["qkv_sharing=independent,qk_shared", "seed=auto", "stats.mde=1", "stats.alpha=0"], "stats.alpha=0"),
    (["qkv_sharing=independent,qk_shared", "seed=auto", "stats.mde=1", "stats.spending=linear"], "obrien_fleming"),
    (["qkv_sharing=independent,qk_shared", "seed=auto,0,1", "stats.mde=1"], "explicit seeds (0, 1)"),
    (["qkv_sharing=independent", "seed=auto", "stats.mde=1"], "one variant"),
    (["model.size=3xs,2xs", "ffn=gelu,swiglu", "seed=auto", "stats.mde=1"], "scale ladder"),
    (["qkv_sharing=independent,qk_shared", "seed=auto", "stats.mde=1", "task=lm", "finetune.tasks=[py_module]"],
     "finetune.tasks is not supported yet"),
])
def test_bad_rounds_are_refused_before_anything_trains(arguments: list[str], named: str) -> None:
    with pytest.raises(SweepError) as error:
        planner([*arguments, *TINY]).plan()
    message = str(error.value)
    assert named in message and "othing was trained" in message, message


def test_rounds_under_another_sweeper_are_refused() -> None:
    with pytest.raises(SweepError, match="seed=auto"):
        planner(["qkv_sharing=independent,qk_shared", "seed=auto", "stats.mde=1", *TINY], sweeper="basic").plan()


def test_a_single_run_with_seed_auto_is_told_to_sweep(tiny) -> None:
    from ablate.compose import compose
    from ablate.config import config_problems

    problems = config_problems(compose([*tiny, "seed=auto"]))
    assert any("seed=auto runs a sweep's seeds in rounds" in p and "ablate -m" in p for p in problems), problems


def test_a_tuned_sweep_runs_its_rounds_after_the_tuning() -> None:
    """tune.lr with rounds: the tuning runs (tune.seeds) first, then the final runs in rounds at the
    chosen rate; a tuning run at a round's seed and the chosen rate is that round's run."""
    plan = planner(["qkv_sharing=independent,qk_shared", *ROUNDS, "tune.lr=[0.001]", *TINY]).plan()
    assert plan.tune is not None and plan.rounds is not None
    assert {job_value(job, "seed") for job in plan.jobs} == {"0"}, "the first stage is the tuning runs"
    assert plan.tune.final_seeds == list(range(7))


def test_baselines_pair_each_variant_as_the_table_does() -> None:
    plan = planner(["qkv_sharing=independent,qk_shared", "task=reverse,sort", *ROUNDS, *TINY]).plan()
    pairs = baselines(plan, "qkv_sharing=independent")
    assert pairs == {"qkv_sharing=qk_shared,task=reverse": "qkv_sharing=independent,task=reverse",
                     "qkv_sharing=qk_shared,task=sort": "qkv_sharing=independent,task=sort"}
    first = baselines(planner(["qkv_sharing=qk_shared,independent", *ROUNDS, *TINY]).plan(), None)
    assert first == {"qkv_sharing=independent": "qkv_sharing=qk_shared"}


# ---------------------------------------------------------------------------------- --plan

def test_plan_lists_the_first_round_and_the_most_the_rounds_can_run(tmp_path: Path) -> None:
    p = planner(["qkv_sharing=independent,qk_shared", *ROUNDS, *TINY])
    plan = p.plan()
    shown = preview(p, plan, tmp_path, time_steps=False)
    statuses = [job.status for job in shown.jobs]
    assert statuses.count("to run") == 6 and statuses.count("round 2") == 4 and statuses.count("round 3") == 4
    text = render(shown)
    assert "round 1: seeds 0-2 of every row: 6 job(s)" in text and "at most 8 job(s)" in text, text
    assert "to run: at most 14 job(s)" in text
    assert "no spread of paired differences known for these settings" in text, text


def test_plan_sizes_the_seeds_from_a_spread_measured_before(tmp_path: Path, monkeypatch) -> None:
    from omegaconf import OmegaConf

    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path / "cache"))
    p = planner(["qkv_sharing=independent,qk_shared", *ROUNDS, *TINY])
    plan = p.plan()
    configs = [OmegaConf.to_container(p.compose(plan.definition[k]), resolve=True) for k in (7, 0)]  # qk_shared, base
    remember({spread_key(*configs): Spread(sd=0.02, n=5, at=1.7e9, source="/earlier/sweep")})
    text = render(preview(p, plan, tmp_path / "sweep", time_steps=False))
    assert "sd of paired differences 2.00 points over 5 seeds (/earlier/sweep" in text, text
    from ablate.sequential import seeds_for_power

    assert f"{seeds_for_power(0.02, 0.02, 0.05, 0.8)} paired seeds" in text
    assert "the rounds:" in text and "power at the cap" in text


# ---------------------------------------------------------------------------------- sweeps through the CLI

def _sweep(tmp_path: Path, name: str, *extra: str, variants: str = "independent,qk_shared,qkv_shared",
           ) -> tuple[Path, list[str]]:
    sweep = tmp_path / name
    return sweep, ["-m", f"qkv_sharing={variants}", *ROUNDS, *TINY, *extra, f"hydra.sweep.dir={sweep}"]


def _check_rounds(sweep: Path) -> dict:
    """What every rounds sweep must show: the first round for every row; a later round's seeds only
    for the rows undecided after the round before and their baseline; the baseline with every seed
    any row has; sweep.json's verdicts equal to the table's; one table at the end."""
    plan = json.loads((sweep / "sweep.json").read_text())
    rounds = plan["rounds"]
    looks = [3, 5, 7]
    ran = [r for r in records(sweep) if r["status"] == "ok"]
    seeds: dict[str, set[int]] = {}
    for record in ran:
        variant = next(o for o in record["overrides"] if o.startswith("qkv_sharing="))
        seeds.setdefault(variant, set()).add(record["config"]["seed"])
    base = seeds.pop("qkv_sharing=independent")
    assert all(set(range(3)) <= s for s in [base, *seeds.values()])
    for variant, own in seeds.items():
        verdict = rounds["verdicts"][variant]
        assert own == set(range(looks[verdict["round"] - 1])), (variant, own, verdict)
        assert verdict["n"] == len(own)
        assert own <= base
    assert base == set().union(*seeds.values())
    with open(sweep / "table.csv") as f:
        rows = {row["overrides"]: row for row in csv.DictReader(f)}
    for variant, verdict in rounds["verdicts"].items():
        row = rows[variant]
        assert row["verdict"] == verdict["verdict"] and int(row["seeds"]) == verdict["n"], (row, verdict)
    assert rounds["run"] == max(v["round"] for v in rounds["verdicts"].values())
    return plan


@pytest.mark.slow
def test_a_rounds_sweep_decides_row_by_row_and_ends_in_one_table(tmp_path: Path) -> None:
    sweep, args = _sweep(tmp_path, "basic", "logger=wandb")
    out = run_cli(args, tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    plan = _check_rounds(sweep)
    assert "after round 1 of at most 3" in out.stdout and "verdicts: group-sequential" in out.stdout, out.stdout[-3000:]
    groups = {r["wandb"]["group"] for r in records(sweep)}
    assert len(groups) == 1, groups
    assert (sweep / "report.html").is_file() and (sweep / "table.md").is_file()

    # stopped mid-round: the last round's records lost; the relaunch replays the rounds from the records
    last = plan["rounds"]["run"]
    lost = [d for d in sweep.iterdir() if (d / "result.json").is_file()
            and json.loads((d / "result.json").read_text())["config"]["seed"] >= [0, 3, 5][last - 1]]
    for job_dir in lost[: max(1, len(lost) // 2)]:
        (job_dir / "result.json").unlink()
    again = run_cli(args, tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count(": ok ") == max(1, len(lost) // 2), again.stdout[-3000:]
    assert json.loads((sweep / "sweep.json").read_text())["rounds"] == plan["rounds"]
    _check_rounds(sweep)

    # the sweep's end kept its spreads: --plan of the same comparisons elsewhere sizes their seeds from them
    elsewhere = [a if not a.startswith("hydra.sweep.dir=") else f"hydra.sweep.dir={tmp_path / 'next'}" for a in args]
    planned = run_cli(["--plan", *elsewhere[1:]], tmp_path)
    assert planned.returncode == 0, planned.stderr[-3000:]
    assert planned.stdout.count(f"seeds ({sweep}") == 2, planned.stdout[-3000:]


@pytest.mark.slow
def test_rounds_run_under_a_parallel_launcher(tmp_path: Path) -> None:
    """Each round is a stage through the configured launcher (``sweeper._Stages``, as tuning and the
    fine-tune stage are): joblib here; submitit's and SLURM's job processes cost seconds each, and
    their stages are launched the same way (tests/test_launchers.py, tests/test_slurm.py)."""
    sweep, args = _sweep(tmp_path, "joblib", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "logger=none",
                         variants="independent,qkv_shared")
    out = run_cli(args, tmp_path, timeout=400)
    assert out.returncode == 0, out.stderr[-3000:]
    _check_rounds(sweep)


@pytest.mark.slow
def test_plan_of_a_rounds_sweep_through_the_cli(tmp_path: Path) -> None:
    sweep, args = _sweep(tmp_path, "plan")
    out = run_cli(["--plan", *args[1:]], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "round 1: seeds 0-2 of every row: 9 job(s)" in out.stdout and "to run: at most 21 job(s)" in out.stdout
    assert not sweep.exists()
