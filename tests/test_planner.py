"""The planner in process: designs, budgets, tuning stages, validation, the directory check, ``--plan``
as data, and ``ablate-bench``'s variants. No subprocess: the sweep's config is composed with
Hydra's compose API, and each job by a fake ``compose`` that applies its overrides to that config
(group choices from their YAML), so the planner's logic is tested apart from Hydra's launchers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import QUIET, compose_cfg
from omegaconf import DictConfig, OmegaConf

from ablate.compose import tiny_overrides
from ablate.ownership import check_directory, claim_directory
from ablate.paths import CONF_DIR
from ablate.planner import Planner, SweepError
from ablate.tuning import choose_lr, final_jobs, final_stage, lr_text, tuning_jobs
from ablate.preview import preview, render
from ablate.record import Metrics, Record, Score
from ablate.sweep import Budget, FineTune, Rounds, SweepPlan, Tuning, job_signature, override_key, same_jobs

TINY = tiny_overrides(*QUIET)


def _fixed(arguments: list[str]) -> list[str]:
    """The overrides that set one value (what the sweep's own config is composed with)."""
    return [a for a in arguments if not ("," in a.split("=", 1)[1] and not a.split("=", 1)[1].startswith("["))]


def sweep_config(arguments: list[str], experiment: str | None = None) -> DictConfig:
    """A multirun's composed config (with its ``hydra`` node), as Hydra gives it to the sweeper."""
    fixed = _fixed(arguments) + ([f"experiment={experiment}"] if experiment else [])
    return compose_cfg(fixed, hydra_config=True)


class FakeCompose:
    """A job's config: the sweep's config (composed with the fixed overrides) with the job's other
    overrides applied (a group choice loads that option's YAML); counts its calls."""

    def __init__(self, base: DictConfig, fixed: list[str]) -> None:
        self.base = OmegaConf.masked_copy(base, [k for k in base if k != "hydra"])
        self.fixed = set(fixed)
        self.calls: list[list[str]] = []

    def __call__(self, overrides: list[str]) -> DictConfig:
        self.calls.append(list(overrides))
        cfg = self.base.copy()
        for override in overrides:
            key, value = override_key(override), override.split("=", 1)[1]
            if key == "experiment" or override in self.fixed:
                continue
            if "." not in key and (CONF_DIR / key / f"{value}.yaml").is_file():
                cfg[key] = OmegaConf.load(CONF_DIR / key / f"{value}.yaml")
            else:
                OmegaConf.update(cfg, key, _parse(value), merge=False)
        return cfg


def _parse(value: str):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create().parse_override(f"k={value}").value()


def planner(arguments: list[str], experiment: str | None = None, cost=None, sweeper: str = "ablate") -> Planner:
    config = sweep_config(arguments, experiment)
    args = arguments + ([f"experiment={experiment}"] if experiment else [])
    return Planner(config, FakeCompose(config, _fixed(args)), cost=cost, sweeper=sweeper, arguments=args)


def _value(job: list[str], key: str) -> str | None:
    return next((o.split("=", 1)[1] for o in job if override_key(o) == key), None)


# ---------------------------------------------------------------------------------- the product

def test_a_plain_sweep_is_the_product_validated_once_per_job() -> None:
    p = planner(["qkv_sharing=independent,qk_shared", "seed=0,1", *TINY])
    plan = p.plan()
    assert len(plan.definition) == 4 and plan.jobs == plan.definition
    assert plan.swept == ["qkv_sharing", "seed"] and plan.budget is None and plan.tune is None
    assert {plan.variant(job) for job in plan.jobs} == {"qkv_sharing=independent", "qkv_sharing=qk_shared"}
    assert len(p._compose.calls) == 2, "each variant composed once, its other seed a copy"


def test_a_variants_seeds_and_budgeted_steps_are_copies_equal_to_hydras_compositions() -> None:
    """Through Hydra's compose API: each variant is composed once; its other seeds and its budget's
    steps are set on a copy, which equals what Hydra composes for that job. A seed Hydra would read
    as a string (``seed=01``) is composed, and refused by name."""
    calls: list[list[str]] = []

    def compose_job(job: list[str]) -> DictConfig:
        calls.append(job)
        cfg = compose_cfg(job)
        return OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])

    args = [*TINY, "task.batch_size=8,16", "seed=0,1,2", "budget.match=tokens"]
    p = Planner(sweep_config(args), compose_job, arguments=args)
    plan = p.plan()
    assert len(plan.jobs) == 6 and len({_value(job, "trainer.max_steps") for job in plan.jobs}) == 2
    assert len(calls) == 2, calls
    for job in plan.jobs:
        assert OmegaConf.to_container(p.compose(job)) == OmegaConf.to_container(compose_job(job)), job

    with pytest.raises(SweepError, match="seed='01'"):
        planner(["seed=0,01", *TINY]).plan()


def test_an_experiments_params_sweep_with_the_command_line() -> None:
    plan = planner([*TINY], experiment="qkv_sharing").plan()
    assert len(plan.jobs) == 9 and plan.swept == ["qkv_sharing", "seed"]


def test_an_invalid_job_names_itself_and_its_problem() -> None:
    with pytest.raises(SweepError) as error:
        planner(["model.dropout=0.1,2.0", *TINY]).plan()
    message = str(error.value)
    assert "1 job(s) of this sweep have an invalid config; nothing was trained" in message
    assert "model.dropout=2.0" in message and "model.dropout=0.1" not in message.split("\n", 1)[1]


def test_ddp_in_a_local_multirun_is_refused() -> None:
    with pytest.raises(SweepError, match="submitit_slurm"):
        planner(["seed=0,1", *TINY, "trainer=ddp"]).plan()


# ---------------------------------------------------------------------------------- designs

def test_design_rows_times_the_seeds_named_by_the_keys_that_differ() -> None:
    plan = planner([*TINY], experiment="norm").plan()
    assert len(plan.definition) == 4 * 3  # 4 rows x 3 seeds, rows first
    assert plan.swept[:2] == ["norm", "init"] and "seed" in plan.swept
    variants = list(dict.fromkeys(plan.variant(job) for job in plan.definition))
    # init is a design key (one row sets it) though only that row's overrides name it
    assert variants == ["norm=layernorm", "norm=rmsnorm", "norm=scalenorm", "init=deepnet,norm=deepnorm"]


def test_a_design_key_also_on_the_command_line_is_refused() -> None:
    with pytest.raises(SweepError, match="norm: set by experiment.design"):
        planner(["norm=rmsnorm", *TINY], experiment="norm").plan()


@pytest.mark.parametrize("arguments,experiment,named", [
    ([], "norm", "experiment.design"),
    (["budget.match=flops"], None, "budget.match=flops"),
    (["tune.lr=[0.001]"], None, "tune.lr=[0.001]"),
])
def test_another_sweeper_refuses_what_only_ablates_can_honour(arguments, experiment, named) -> None:
    with pytest.raises(SweepError) as error:
        planner(["seed=0,1", *TINY, *arguments], experiment=experiment, sweeper="basic").plan()
    assert named in str(error.value) and "hydra/sweeper=ablate" in str(error.value)


def test_another_sweeper_refuses_a_swept_budget_by_job() -> None:
    with pytest.raises(SweepError, match="budget.match=tokens"):
        planner(["budget.match=steps,tokens", *TINY], sweeper="basic").plan()


# ---------------------------------------------------------------------------------- budgets

def fake_cost(cfg: DictConfig) -> dict[str, float]:
    """Known costs: a Q=K=V model's step is half an independent one's FLOPs."""
    flops = {"independent": 2000.0, "qkv_shared": 1000.0, "qk_shared": 1500.0}[cfg.qkv_sharing.name]
    return {"max_steps": int(cfg.trainer.max_steps), "tokens_per_step": cfg.task.batch_size * cfg.task.seq_len,
            "flops_per_token": flops}


def test_a_flops_budget_gives_each_variant_its_baselines_flops() -> None:
    p = planner(["qkv_sharing=independent,qkv_shared,qk_shared", "seed=0,1", "budget.match=flops", *TINY],
                cost=fake_cost)
    plan = p.plan()
    steps = {plan.variant(job): int(_value(job, "trainer.max_steps")) for job in plan.definition}
    assert steps == {"qkv_sharing=independent": 6, "qkv_sharing=qkv_shared": 12, "qkv_sharing=qk_shared": 8}
    base = next(job for job in plan.definition if plan.variant(job) == "qkv_sharing=independent")
    tokens = 6 * fake_cost(p.compose(base))["tokens_per_step"]  # the baseline's steps x tokens per step
    assert plan.budget == Budget(match="flops", steps=steps,
                                 baseline_of={v: "qkv_sharing=independent" for v in steps},
                                 baseline_tokens={v: tokens for v in steps},
                                 baseline_train_flops={v: tokens * 2000.0 for v in steps})
    assert "trainer.max_steps" not in plan.swept
    assert all(int(p.compose(job).trainer.max_steps) == steps[plan.variant(job)] for job in plan.jobs)


def test_a_budget_baseline_is_the_named_one_per_value_of_the_other_keys() -> None:
    p = planner(["qkv_sharing=independent,qkv_shared", "task.seq_len=32,64", "budget.match=tokens", *TINY,
                 "experiment.baseline='qkv_sharing=qkv_shared'"], cost=fake_cost)
    plan = p.plan()
    assert plan.budget.baseline_of["qkv_sharing=independent,task.seq_len=64"] == "qkv_sharing=qkv_shared,task.seq_len=64"
    steps = {plan.variant(job): int(_value(job, "trainer.max_steps")) for job in plan.definition}
    assert set(steps.values()) == {6}  # same tokens per step within a length


def test_a_budget_over_several_keys_needs_the_baseline_named() -> None:
    """Without experiment.baseline the first job's values of every swept key would be every job's
    baseline (the 64-token jobs would get the 32-token jobs' tokens): refused, naming the key to set."""
    with pytest.raises(SweepError) as error:
        planner(["qkv_sharing=independent,qkv_shared", "task.seq_len=32,64", "budget.match=tokens", *TINY],
                cost=fake_cost).plan()
    message = str(error.value)
    assert "varies qkv_sharing, task.seq_len" in message
    assert "experiment.baseline='qkv_sharing=independent'" in message


def test_a_designs_budget_baseline_is_its_base_row_at_each_value_of_the_other_keys() -> None:
    p = planner(["task.seq_len=32,64", *TINY], experiment="transformer_pp", cost=fake_cost)
    plan = p.plan()
    base_rows = {v for v in plan.budget.baseline_of.values()}
    assert len(base_rows) == 2 and all("pos_enc=rope" in v and "ffn=swiglu" in v for v in base_rows)
    for variant, base in plan.budget.baseline_of.items():
        assert base.endswith(variant.rsplit(",", 1)[-1]) or "task.seq_len" not in variant


def test_a_budget_with_swept_steps_is_refused() -> None:
    with pytest.raises(SweepError, match="cannot also be swept"):
        planner(["trainer.max_steps=6,12", "budget.match=tokens", *tiny_overrides("logger=none")],
                cost=fake_cost).plan()


def test_a_smoke_test_keeps_its_own_steps_under_a_budget() -> None:
    plan = planner(["qkv_sharing=independent,qkv_shared", "budget.match=flops", "smoke=true", *TINY],
                   cost=fake_cost).plan()
    assert plan.budget is None


# ---------------------------------------------------------------------------------- tuning

def test_tuning_runs_first_then_the_seeds_at_each_chosen_rate() -> None:
    p = planner(["qkv_sharing=independent,qkv_shared", "seed=0,1", "tune.lr=[1e-3,3e-3]", *TINY])
    plan = p.plan()
    assert plan.tune == Tuning(lr=[0.001, 0.003], default_lr=0.003, seeds=[0], final_seeds=[0, 1], metric="loss")
    assert len(plan.jobs) == 2 * 2 and all(_value(job, "seed") == "0" for job in plan.jobs)
    assert plan.jobs == tuning_jobs(plan.definition, plan.swept, plan.tune)
    records = [Record(overrides=job, status="ok",
                      metrics=Metrics(val=Score(loss=1.0 if _value(job, "optim.lr") == "0.001" else 2.0)))
               for job in plan.jobs]
    records[0].status = "diverged"  # independent at 1e-3 diverged: +inf, so 3e-3 wins for it
    chosen, scores = choose_lr(records, plan)
    assert chosen == {"qkv_sharing=independent": 0.003, "qkv_sharing=qkv_shared": 0.001}
    assert scores["qkv_sharing=independent"] == {"0.001": None, "0.003": 2.0}
    final = final_jobs(plan, chosen)
    assert len(final) == 4 and {_value(j, "optim.lr") for j in final if "qkv_sharing=qkv_shared" in j} == {"0.001"}


def test_a_tuned_sweep_without_a_seed_reuses_the_tuning_run_of_the_chosen_rate() -> None:
    """No seed= on the command line: the final runs are at the config's seed 0, as the tuning runs
    are, so each variant's final run is its tuning run at the chosen rate (one seed, counted once)."""
    plan = planner(["qkv_sharing=independent,qkv_shared", "tune.lr=[1e-3,3e-3]", *TINY]).plan()
    assert plan.tune.final_seeds == [0] and plan.tune.seeds == [0]
    chosen = {plan.variant(job): 0.001 for job in plan.definition}
    final = final_jobs(plan, chosen)
    assert all(_value(job, "seed") == "0" for job in final)
    assert {job_signature(j) for j in final} <= {job_signature(j) for j in plan.jobs}


def test_tuning_with_a_swept_lr_is_refused() -> None:
    with pytest.raises(SweepError, match="tune.lr chooses optim.lr"):
        planner(["optim.lr=0.001,0.003", "tune.lr=[1e-3]", *TINY]).plan()


# ---------------------------------------------------------------------------------- the file

def test_the_plan_is_its_file(tmp_path: Path) -> None:
    plan = planner(["qkv_sharing=independent,qkv_shared", "tune.lr=[1e-3]", *TINY]).plan()
    plan.tune.chosen = {"qkv_sharing=independent": 0.001}
    plan.write(tmp_path)
    assert SweepPlan.read(tmp_path) == plan
    data = json.loads((tmp_path / "sweep.json").read_text())
    assert list(data) == ["swept", "jobs", "definition", "budget", "tune"]


def test_an_old_or_broken_file_reads_as_well_as_it_can(tmp_path: Path) -> None:
    (tmp_path / "sweep.json").write_text(json.dumps({"swept": ["seed"], "jobs": [["seed=0"], ["seed=1"]]}))
    plan = SweepPlan.read(tmp_path)
    assert plan.definition == plan.jobs == [["seed=0"], ["seed=1"]] and plan.tune is None
    (tmp_path / "sweep.json").write_text("{not json")
    assert SweepPlan.read(tmp_path) is None and SweepPlan.read(tmp_path / "nowhere") is None


# ---------------------------------------------------------------------------------- the directory

def test_another_definition_in_the_directory_is_refused_unless_redefined(tmp_path: Path) -> None:
    first = planner(["qkv_sharing=independent,qk_shared", *TINY])
    first_plan = first.plan()
    check_directory(tmp_path, first_plan)  # empty: fine
    first_plan.write(tmp_path)
    check_directory(tmp_path, first_plan)  # the same definition resumes
    other = planner(["qkv_sharing=independent,qk_shared", *TINY, "model.n_layers=2"])
    other_plan = other.plan()
    with pytest.raises(SweepError, match="(?s)holds another sweep .*--redefine"):
        check_directory(tmp_path, other_plan)
    check_directory(tmp_path, other_plan, redefine=True)
    other_plan.write(tmp_path)  # what the redefined sweep records: now the original command is the other one
    with pytest.raises(SweepError, match="(?s)holds another sweep .*--redefine"):
        check_directory(tmp_path, first_plan)


# ---------------------------------------------------------------------------------- --plan as data

def test_preview_marks_done_rerun_and_to_run(tmp_path: Path) -> None:
    from ablate.jobdir import job_dir_name

    p = planner(["qkv_sharing=independent,qk_shared", "seed=0,1", *TINY])
    plan = p.plan()
    Record(status="ok", overrides=plan.jobs[0]).write(tmp_path / job_dir_name(plan.jobs[0]))
    Record(status="failed", overrides=plan.jobs[1]).write(tmp_path / job_dir_name(plan.jobs[1]))
    shown = preview(p, plan, tmp_path, time_steps=False)
    assert [j.status for j in shown.jobs] == ["done", "rerun", "to run", "to run"]
    assert shown.steps_to_run == 3 * 6 and [j.steps for j in shown.jobs] == [6] * 4
    assert shown.note is None and "to run: 3 job(s), 18 training steps; done already: 1" in render(shown)
    cost = p.cost(plan.jobs[0])
    assert shown.jobs[0].flops == 6 * cost["tokens_per_step"] * cost["flops_per_token"]


def test_preview_of_a_tuned_sweep_lists_the_final_runs_after_tuning(tmp_path: Path) -> None:
    p = planner(["qkv_sharing=independent,qk_shared", "seed=0,1", "tune.lr=[1e-3]", *TINY])
    shown = preview(p, p.plan(), tmp_path, time_steps=False)
    after = [j for j in shown.jobs if j.status == "after tuning"]
    assert len(shown.jobs) == 4 + 2 and len(after) == 2  # seed 1 of each variant; seed 0 reuses a tuning run
    assert all("optim.lr=<chosen>" in j.overrides and "seed=1" in j.overrides for j in after)


def test_preview_notes_a_directory_of_another_sweep(tmp_path: Path) -> None:
    planner(["seed=0,1", *TINY]).plan().write(tmp_path)
    p = planner(["seed=0,1,2", *TINY])
    assert "holds another sweep" in preview(p, p.plan(), tmp_path, time_steps=False).note


@pytest.mark.slow  # trains a few steps of each variant
def test_preview_times_each_variant_still_to_run(tmp_path: Path) -> None:
    p = planner(["qkv_sharing=independent,qk_shared", *TINY])
    shown = preview(p, p.plan(), tmp_path)
    assert set(shown.step_times) == {"qkv_sharing=independent", "qkv_sharing=qk_shared"}
    assert all(t > 0 for t in shown.step_times.values()) and shown.seconds > 0


# ---------------------------------------------------------------------------------- ablate-bench

@pytest.mark.slow  # composes and validates 21 jobs through Hydra
def test_ablate_bench_times_the_variants_the_sweep_would_run() -> None:
    from ablate.bench import experiment_configs

    configs, baseline = experiment_configs(["experiment=norm", *TINY])
    assert list(configs) == ["norm=layernorm", "norm=rmsnorm", "norm=scalenorm", "init=deepnet,norm=deepnorm"]
    assert configs["init=deepnet,norm=deepnorm"].norm.name == "deepnorm"
    assert all(cfg.seed == 0 for cfg in configs.values()) and baseline is None
    configs, baseline = experiment_configs(["experiment=qkv_sharing", *TINY])
    assert len(configs) == 3 and baseline == "qkv_sharing=independent"


# ---------------------------------------------------------------------------------- the documented schema

def _documented_schema() -> dict:
    """docs/internals.md's sweep.json block, its ``// comments`` and ``...`` removed."""
    import re

    text = (Path(__file__).resolve().parent.parent / "docs" / "internals.md").read_text()
    section = text[text.index("### `sweep.json`"):text.index("### The sweeper")]
    block = section.split("```json\n", 1)[1].split("```", 1)[0]
    block = re.sub(r"//[^\n]*", "", block).replace(", ...", "")
    return json.loads(block)


def test_the_documented_sweep_file_is_the_code() -> None:
    from dataclasses import asdict, fields

    doc = _documented_schema()
    assert list(doc) == [f.name for f in fields(SweepPlan)]
    assert set(doc["budget"]) == {f.name for f in fields(Budget)}
    assert set(doc["tune"]) == {f.name for f in fields(Tuning)}
    assert set(doc["finetune"]) == {f.name for f in fields(FineTune)}
    assert set(doc["rounds"]) == {f.name for f in fields(Rounds)}
    plan = SweepPlan(swept=doc["swept"], jobs=doc["jobs"], definition=doc["definition"],
                     budget=Budget(**doc["budget"]), tune=Tuning(**doc["tune"]), finetune=FineTune(**doc["finetune"]),
                     rounds=Rounds(**doc["rounds"]))
    assert json.loads(json.dumps(doc)) == json.loads(json.dumps(asdict(plan)))


# ---------------------------------------------------------------------------------- a scale ladder

def test_a_ladder_gives_each_rung_tokens_in_proportion_to_its_parameters() -> None:
    p = planner(["model.size=xs,s", "seed=0,1", "budget.match=tokens_per_param", "budget.tokens_per_param=0.5",
                 *tiny_overrides(*QUIET, without=["model.d_model", "model.n_heads", "model.n_layers"])])
    plan = p.plan()
    assert plan.budget.match == "tokens_per_param" and plan.budget.tokens_per_param == 0.5
    assert plan.budget.baseline_of == {} and set(plan.budget.steps) == {"model.size=xs", "model.size=s"}
    for job in plan.definition:
        cost = p.cost(job)
        steps = int(p.compose(job).trainer.max_steps)
        assert steps == max(1, round(0.5 * cost["params"] / cost["tokens_per_step"]))
    assert plan.budget.steps["model.size=s"] > 5 * plan.budget.steps["model.size=xs"]  # ~10x the parameters


def test_a_ladder_of_a_design_tunes_each_rung_and_keeps_its_steps() -> None:
    """experiment=ladder (a design x model.size x seeds) with tune.lr: the tuning runs are per design
    row and rung, each at its rung's steps, and the final runs keep those steps at the chosen rate."""
    p = planner(["tune.lr=[1e-3,3e-3]", "budget.tokens_per_param=0.5", "model.size=3xs,2xs", "seed=0,1"],
                experiment="ladder")
    plan = p.plan()
    rows = ["Transformer++", "- RoPE (learned positions)", "- SwiGLU (GELU FFN)"]
    assert len(plan.definition) == len(rows) * 2 * 2  # rows x rungs x seeds
    assert plan.budget.match == "tokens_per_param" and len(plan.budget.steps) == len(rows) * 2
    steps_of = plan.budget.steps
    for job in plan.definition:
        cost = p.cost(job)
        assert int(_value(job, "trainer.max_steps")) == max(1, round(0.5 * cost["params"] / cost["tokens_per_step"]))
    # tuning: every (row, rung) at each rate, seed 0, at the rung's steps
    assert len(plan.jobs) == len(rows) * 2 * 2 and {_value(j, "seed") for j in plan.jobs} == {"0"}
    for job in plan.jobs:
        assert int(_value(job, "trainer.max_steps")) == steps_of[plan.variant(job)]
    assert {_value(j, "model.size") for j in plan.jobs} == {"3xs", "2xs"}
    # the rungs of a row may choose different rates; the final runs keep each rung's steps
    records = [Record(overrides=job, status="ok",
                      metrics=Metrics(val=Score(loss=(1.0 if _value(job, "optim.lr") == "0.001" else 2.0)
                                                * (1.0 if _value(job, "model.size") == "3xs" else -1.0))))
               for job in plan.jobs]
    chosen, _ = choose_lr(records, plan)
    assert {lr for v, lr in chosen.items() if "model.size=3xs" in v} == {0.001}
    assert {lr for v, lr in chosen.items() if "model.size=2xs" in v} == {0.003}
    for job in final_jobs(plan, chosen):
        assert int(_value(job, "trainer.max_steps")) == steps_of[plan.variant(job)]


def test_a_mup_ladder_tunes_its_smallest_rung_only_and_reuses_the_rate_above_it(tmp_path: Path) -> None:
    """tune.rungs=smallest: tuning runs for the smallest rung of each row only (the tuning cost cut by
    the number of rungs); every larger rung's final runs take its row's smallest-rung rate."""
    args = ["tune.lr=[1e-3,3e-3]", "tune.rungs=smallest", "model.parametrization=mup", "model.mup_base_width=32",
            "model.size=3xs,2xs,xs", "seed=0,1"]
    p = planner(args, experiment="ladder")
    plan = p.plan()
    rows = ["Transformer++", "- RoPE (learned positions)", "- SwiGLU (GELU FFN)"]
    assert len(plan.jobs) == len(rows) * 2  # rows x rates, the smallest rung only (not x 3 rungs)
    assert {_value(j, "model.size") for j in plan.jobs} == {"3xs"}
    assert len(plan.tune.transfer) == len(rows) * 2  # the 2xs and xs variants of each row
    assert all("model.size=3xs" in source for source in plan.tune.transfer.values())
    records = [Record(overrides=job, status="ok", metrics=Metrics(val=Score(
        loss=1.0 if (_value(job, "optim.lr") == "0.001") == ("RoPE" in str(job)) else 2.0)))
               for job in plan.jobs]
    chosen, _ = choose_lr(records, plan)
    for job in final_jobs(plan, chosen):
        row_rate = "0.001" if "RoPE" in str(job) else "0.003"
        assert _value(job, "optim.lr") == row_rate, job
    assert len(final_jobs(plan, chosen)) == len(plan.definition) == len(rows) * 3 * 2
    plan.write(tmp_path)  # sweep.json keeps which rung each rate came from
    assert SweepPlan.read(tmp_path).tune.transfer == plan.tune.transfer
    assert SweepPlan.read(tmp_path).tune.rungs == "smallest"


@pytest.mark.parametrize("args,named", [
    (["tune.lr=[1e-3]", "tune.rungs=smallest", "model.parametrization=mup", "model.mup_base_width=32",
      "qkv_sharing=independent,qk_shared"], "sweeps no model size"),
    (["tune.lr=[1e-3]", "tune.rungs=smallest", "model.d_model=32,64"], "model.parametrization=standard"),
])
def test_tuning_the_smallest_rung_only_is_refused_without_sizes_or_without_mup(args, named) -> None:
    with pytest.raises(SweepError, match=named):
        planner(args).plan()


# ---------------------------------------------------------------------------------- the plan is the run

def _launched(plan: SweepPlan, chosen: dict[str, float]) -> list[list[str]]:
    """What the sweeper launches: the first stage, then its final stage at the rates chosen."""
    return plan.jobs + final_stage(plan, chosen)


def _at_rates(shown, plan: SweepPlan, chosen: dict[str, float]) -> list[list[str]]:
    """``--plan``'s jobs with each ``optim.lr=<chosen>`` replaced by the rate its variant was given."""
    return [[f"optim.lr={lr_text(chosen[plan.variant(j.overrides)])}" if o == "optim.lr=<chosen>" else o
             for o in j.overrides] for j in shown.jobs]


@pytest.mark.parametrize("args,experiment,jobs", [
    # two widths x two seeds, tuned at the smallest: 2 tuning runs, then seed 1 at d_model=16 and both
    # seeds at d_model=32, which has no tuning run of its own (--plan listed 4 of the 5)
    (["model.d_model=16,32", "tune.lr=[0.01]", "tune.rungs=smallest", "model.parametrization=mup",
      "model.mup_base_width=16", "seed=0,1", *tiny_overrides(*QUIET, without=["model.d_model"])], None, 5),
    # experiment=ladder: 3 rows x 3 rates at the smallest rung, then 18 - 3 final runs (--plan listed 18 of 24)
    (["tune.lr=[1e-3,1e-2]", "tune.rungs=smallest", "model.parametrization=mup", "model.mup_base_width=32"],
     "ladder", 24),
    (["qkv_sharing=independent,qk_shared", "seed=0,1", "tune.lr=[1e-3]", *TINY], None, 6),
    (["qkv_sharing=independent,qk_shared", "tune.lr=[1e-3]", *TINY], None, 4),
])
def test_the_plan_lists_every_job_the_sweep_launches(tmp_path: Path, args, experiment, jobs) -> None:
    p = planner(args, experiment=experiment)
    plan = p.plan()
    shown = preview(p, plan, tmp_path, time_steps=False)
    records = [Record(overrides=job, status="ok", metrics=Metrics(val=Score(loss=float(n % 3))))
               for n, job in enumerate(plan.jobs)]
    chosen, _ = choose_lr(records, plan)
    planned = _at_rates(shown, plan, chosen)
    assert planned == _launched(plan, chosen)
    # every tuning run and every job of the definition at its rate, each once
    wanted = {job_signature(j) for j in tuning_jobs(plan.definition, plan.swept, plan.tune) + final_jobs(plan, chosen)}
    assert len(planned) == len(wanted) == jobs and {job_signature(j) for j in planned} == wanted
    assert all(j.steps > 0 for j in shown.jobs)
    transferred = [j for j in shown.jobs if j.variant in plan.tune.transfer]
    assert all(j.status == "after tuning" and "optim.lr=<chosen>" in j.overrides for j in transferred)
    if plan.tune.transfer:
        assert "take the rate chosen at their smallest rung" in render(shown)


@pytest.mark.slow  # a real sweep of 5 two-step jobs
def test_a_real_sweep_launches_the_jobs_its_plan_lists(tmp_path: Path) -> None:
    from conftest import records as read_records
    from conftest import run_cli

    args = ["model.d_model=16,32", "tune.lr=[0.01]", "tune.rungs=smallest", "model.parametrization=mup",
            "model.mup_base_width=16", "seed=0,1",
            *tiny_overrides(*QUIET, "measure.warmup_steps=0", "trainer.max_steps=2", without=["model.d_model"])]
    p = planner(args)
    plan = p.plan()
    shown = preview(p, plan, tmp_path / "sweep", time_steps=False)
    out = run_cli(["-m", *args, f"hydra.sweep.dir={tmp_path / 'sweep'}"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    chosen = {k: float(v) for k, v in json.loads((tmp_path / "sweep" / "sweep.json").read_text())["tune"]["chosen"].items()}
    ran = [r["overrides"] for r in read_records(tmp_path / "sweep")]
    assert len(ran) == len(shown.jobs) == 5
    assert {job_signature(j) for j in ran} == {job_signature(j) for j in _at_rates(shown, plan, chosen)}


# ---------------------------------------------------------------------------------- experiment.ladder

def test_a_ladder_table_without_a_swept_size_is_refused_before_training() -> None:
    with pytest.raises(SweepError) as error:
        planner(["qkv_sharing=independent,qk_shared", "experiment.ladder=on", *TINY]).plan()
    message = str(error.value)
    assert "experiment.ladder=on" in message and "model.size" in message and "model.d_model" in message
    assert "qkv_sharing" in message and "Nothing was trained" in message and "\n" not in message
    with pytest.raises(SweepError, match="experiment.ladder=on"):  # ablate's sweeper and the basic one alike
        planner(["qkv_sharing=independent,qk_shared", "experiment.ladder=on", *TINY], sweeper="basic").plan()
    for fine in (["model.d_model=16,32", "experiment.ladder=on"], ["qkv_sharing=independent,qk_shared"],
                 ["qkv_sharing=independent,qk_shared", "experiment.ladder=off"]):
        planner([*tiny_overrides(*QUIET, without=["model.d_model"]), *fine]).plan()


# ---------------------------------------------------------------------------------- two sweeps at once

def test_of_two_sweeps_claiming_one_directory_at_once_exactly_one_is_recorded(tmp_path: Path) -> None:
    """The check of the directory and the record of the plan are one step (they were a check, then a
    write: two sweeps started together both found the directory free, then both wrote, 1 in 3 tries)."""
    import threading

    sweeps = [planner(["qkv_sharing=independent,qk_shared", *TINY]),
              planner(["qkv_sharing=independent,qk_shared", *TINY, "model.n_layers=2"])]
    plans = [p.plan() for p in sweeps]
    for attempt in range(20):
        where = tmp_path / str(attempt)
        start = threading.Barrier(2)
        outcome: dict[int, str] = {}

        def claim(n: int) -> None:
            start.wait()
            try:
                claim_directory(where, plans[n], also=lambda: (where / f"multirun{n}.yaml").write_text(""))
                outcome[n] = "recorded"
            except SweepError as error:
                outcome[n] = str(error)

        threads = [threading.Thread(target=claim, args=(n,)) for n in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        winner = [n for n, what in outcome.items() if what == "recorded"]
        assert len(winner) == 1, (attempt, outcome)
        assert "holds another sweep" in outcome[1 - winner[0]] and "Nothing was trained" in outcome[1 - winner[0]]
        assert same_jobs(SweepPlan.read(where).definition, plans[winner[0]].definition)
        assert not (where / f"multirun{1 - winner[0]}.yaml").exists()  # the refused one wrote nothing


def test_a_relaunch_of_the_same_sweep_claims_its_directory_again(tmp_path: Path) -> None:
    p = planner(["qkv_sharing=independent,qk_shared", *TINY])
    plan = p.plan()
    claim_directory(tmp_path, plan)
    claim_directory(tmp_path, plan)  # the same definition: resumed
    (tmp_path / "sweep.json").write_text("{not json")
    with pytest.raises(SweepError, match="cannot be read as a sweep plan"):
        claim_directory(tmp_path, plan)
    claim_directory(tmp_path, plan, redefine=True)
    assert SweepPlan.read(tmp_path) == plan


def test_the_launcher_is_handed_the_plans_composition_of_each_job_not_a_second_one() -> None:
    """``ComposedOnce`` around Hydra's own loader: the plan's composition of a job is what the basic
    launcher runs (one composition, not two); what the launcher changes in it is its own; a job asked
    for again (a relaunch) is composed anew; a job process of another launcher gets none of it."""
    import pickle

    from hydra.core.global_hydra import GlobalHydra

    from ablate.compose import hydra_initialized
    from ablate.planner import ComposedOnce

    with hydra_initialized():
        hydra_loader = GlobalHydra.instance().config_loader()
        master = compose_cfg(["seed=0"], hydra_config=True)
        composed: list[list[str]] = []

        class Counted:  # Hydra's loader, its compositions counted
            def load_sweep_config(self, master_config: DictConfig, overrides: list[str]) -> DictConfig:
                composed.append(list(overrides))
                return hydra_loader.load_sweep_config(master_config, overrides)

        once = ComposedOnce(Counted())
        job = ["model.d_model=24", "seed=1"]
        planned = once.load_sweep_config(master, job)
        launched = once.load_sweep_config(master, job)
        assert composed == [job]
        assert launched is not planned
        assert OmegaConf.to_container(launched) == OmegaConf.to_container(planned)
        assert launched.model.d_model == 24 and launched.seed == 1
        launched.model.d_model = 8  # the launcher's copy is its own
        assert planned.model.d_model == 24
        assert once.load_sweep_config(master, job).model.d_model == 24 and composed == [job, job]

        shipped = ComposedOnce(hydra_loader)
        shipped.load_sweep_config(master, job)
        received = pickle.loads(pickle.dumps(shipped))  # what joblib and submitit send a job process
        assert received._composed == {}
        assert [str(s) for s in received.get_sources()] == [str(s) for s in hydra_loader.get_sources()]
