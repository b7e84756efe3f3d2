"""Pretrain, then fine-tune (``finetune.tasks``; ablate.finetune): the plan's two stages, the refusals,
weights really loaded (the body is the checkpoint's, a pretrained body learns its task faster than a
fresh one), the linear probe, resume, and the stages' order under joblib and submitit_local."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from conftest import QUIET, compose_cfg, leet_inspect, records, run_cli, wandb_summary
from omegaconf import OmegaConf

from ablate.compose import tiny_overrides
from ablate.config import ConfigError, config_problems
from ablate.finetune import (PRETRAINED, PretrainedError, finetune_jobs, from_job, load_body, load_pretrained,
                             save_pretrained)
from ablate.jobdir import job_dir_name
from ablate.finetune_plan import finetune_stage
from ablate.planner import Planner, SweepError
from ablate.preview import preview, render
from ablate.record import FinetuneEntry, Record, RecordError
from ablate.sweep import SweepPlan, job_value
from ablate.train import build

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CLASSIFY = [f"+finetune.settings.classify.path={FIXTURES / 'classify'}", "finetune.seq_len=32"]
#: the pretraining: a masked LM at length 32 (the fixture's classify runs at 32 too)
TINY = tiny_overrides(*QUIET, "task=mlm", "task.seq_len=32")


def plan_of(arguments: list[str]) -> tuple[Planner, SweepPlan]:
    """A multirun planned in process: its config composed as Hydra gives it to the sweeper, each job
    composed through Hydra's compose API."""
    fixed = [a for a in arguments if "," not in a.split("=", 1)[1] or a.split("=", 1)[1].startswith("[")]

    def compose(job: list[str]):
        cfg = compose_cfg(job)
        return OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])

    planner = Planner(compose_cfg(fixed, hydra_config=True), compose, arguments=arguments)
    return planner, planner.plan()


# ---------------------------------------------------------------------------------- the plan

def test_the_plan_has_a_fine_tune_stage_after_the_pretraining(tmp_path: Path) -> None:
    planner, plan = plan_of(["qkv_sharing=independent,qk_shared", "seed=0,1", "finetune.tasks=[classify]",
                             "finetune.seeds=[0,1]", "finetune.steps=5", *CLASSIFY, *TINY])
    assert len(plan.definition) == len(plan.jobs) == 4  # the first stage: the pretraining
    assert plan.finetune.tasks == ["classify"] and plan.finetune.seeds == [0, 1] and plan.finetune.causal is False
    stage = finetune_stage(plan)
    assert len(stage) == 4 * 2  # pretraining job x task x fine-tune seed
    for job in stage:
        pretraining = next(j for j in plan.definition if job_dir_name(j) == from_job(job))
        assert plan.variant(job) == plan.variant(pretraining)  # the table groups a fine-tune with its pretraining
        assert job_value(job, "seed") == job_value(pretraining, "seed")
        assert job_value(job, "task") == "classify" and job_value(job, "trainer.max_steps") == "5"
        assert job_value(job, "task.seq_len") == "32" and job_value(job, "task.causal") == "false"
        assert job_value(pretraining, "task") == "mlm"
    assert {job_value(j, "finetune.seed") for j in stage} == {"0", "1"}
    plan.write(tmp_path)
    assert SweepPlan.read(tmp_path).finetune == plan.finetune
    shown = preview(planner, plan, tmp_path, time_steps=False)
    assert [j.stage for j in shown.jobs] == [""] * 4 + ["finetune"] * 8
    assert all(j.steps == 5 for j in shown.jobs[4:]) and shown.jobs[4].variant.endswith("-> classify")
    text = render(shown)
    assert "stages, in order" in text and "pretraining: 4 job(s)" in text and "fine-tuning: 8 job(s)" in text


def test_a_causal_language_model_gets_its_special_tokens_and_fine_tunes_causal() -> None:
    _, plan = plan_of(["seed=0", "finetune.tasks=[classify]", *CLASSIFY,
                       *tiny_overrides(*QUIET, "task.seq_len=32")])
    assert all("task.special_tokens=true" in job for job in plan.definition)  # task=lm has none by default
    assert plan.finetune.causal is True
    assert all(job_value(j, "task.causal") == "true" for j in finetune_stage(plan))


def test_a_tuned_sweep_fine_tunes_its_final_runs() -> None:
    _, plan = plan_of(["seed=0", "tune.lr=[1e-3]", "finetune.tasks=[classify]", *CLASSIFY, *TINY])
    shown = finetune_stage(plan)  # --plan: the pretraining's rate is chosen later
    assert len(shown) == 1 and from_job(shown[0]) == "<after tuning>"
    chosen = finetune_stage(plan, {plan.variant(plan.definition[0]): 1e-3})
    assert from_job(chosen[0]) == job_dir_name(plan.definition[0] + ["optim.lr=0.001"])
    assert job_value(chosen[0], "optim.lr") == repr(plan.finetune.lr)  # the fine-tune's own rate


@pytest.mark.parametrize("arguments,refusal", [
    (["finetune.tasks=[tagging]", f"+finetune.settings.tagging.path={FIXTURES / 'tagging'}"],
     "task=tagging has a vocabulary of its own"),
    (["finetune.tasks=[classify]", f"+finetune.settings.classify.path={FIXTURES / 'classify'}"],
     "task=classify runs at length 128, but the pretrained pos_enc=learned has a table of 32 positions"),
    (["finetune.tasks=[classify]", *CLASSIFY, "task=recall"], "the pretraining task is task=recall"),
    (["finetune.tasks=[classify]", *CLASSIFY, "+finetune.settings.classify.tokenizer=bytes", "task.tokenizer=bpe",
      "task.vocab_size=300"],  # a tokenizer forced to another than the pretraining's (the stage sets it)
     "task=classify encodes its text with bytes (256 ids + 4 specials), but the pretraining vocabulary is tokenizer"),
    (["finetune.tasks=[classify]", *CLASSIFY, "task.seq_len=16,32"], "sweeps task.seq_len"),
    (["finetune.tasks=[nothing]"], "finetune.tasks: 'nothing' is not a task option; valid: "),
    (["finetune.tasks=[classify]", *CLASSIFY, "task=lm", "task.special_tokens=false"], "task.special_tokens=false"),
])
def test_a_fine_tune_stage_that_cannot_work_is_refused_in_one_line(arguments: list[str], refusal: str) -> None:
    with pytest.raises(SweepError) as refused:
        plan_of(["seed=0", *TINY, *arguments])
    assert refusal in str(refused.value), str(refused.value)
    assert "\n" not in str(refused.value) and "Nothing was trained" in str(refused.value)


def test_positions_that_extrapolate_may_fine_tune_longer_saying_so(capsys: pytest.CaptureFixture) -> None:
    _, plan = plan_of(["seed=0", "pos_enc=rope", "finetune.tasks=[classify]",
                       f"+finetune.settings.classify.path={FIXTURES / 'classify'}", *TINY])
    assert len(finetune_stage(plan)) == 1
    assert "run at length 128, beyond the pretraining's 32: pos_enc=rope has no position table" in capsys.readouterr().out


def test_a_single_run_with_a_fine_tune_stage_is_refused(tmp_path: Path) -> None:
    from ablate.job import Job
    from ablate.run import run_job

    cfg = compose_cfg([*TINY, "finetune.tasks=[classify]", *CLASSIFY])
    with pytest.raises(ConfigError, match=r"finetune.tasks=\['classify'\] pretrains, then fine-tunes .* ablate -m"):
        run_job(cfg, Job(tmp_path, [], {}, None, None))


# ---------------------------------------------------------------------------------- weights

def _pretrained(tmp_path: Path, *changes: str):
    """A briefly trained masked-LM model (plain PyTorch steps), its weights saved as a pretraining's."""
    from ablate.lit import train_step
    from ablate.optim import make_optimizer

    cfg = compose_cfg(tiny_overrides(*QUIET, "task=mlm", "task.seq_len=32", "finetune.tasks=[mlm]", *changes))
    data, model, _ = build(cfg)
    optimizer = make_optimizer(model.parameters(), {**cfg.optim, "lr": 3e-3})
    for _, batch in zip(range(3), data.train_dataloader()):
        train_step(model, optimizer, batch)
    path, sha = save_pretrained(tmp_path, model, data.task.codec())
    return model, load_pretrained(path, sha)


def _fine_tune_cfg(*changes: str):
    return compose_cfg(tiny_overrides(*QUIET, "task=classify", f"task.path={FIXTURES / 'classify'}",
                                      "task.seq_len=32", "finetune.from_job=x", *changes))


def test_a_fine_tune_starts_from_every_pretrained_weight_but_the_head(tmp_path: Path) -> None:
    pretrained_model, pretrained = _pretrained(tmp_path)
    data, model, _ = build(_fine_tune_cfg(), pretrained)
    state = model.state_dict()
    body = [k for k in pretrained.state if not k.startswith("head.")]
    assert any(k.startswith("tok_emb") for k in body) and any(k.startswith("blocks.") for k in body)
    assert any(k.startswith("pos.") for k in body) and any(k.startswith("final_norm") for k in body)
    for key in body:
        assert torch.equal(state[key], pretrained.state[key]), key
    assert model.tok_emb.num_embeddings == 260  # the special rows too (PAD, CLS, SEP, MASK)
    assert model.head.out_features == data.n_classes == 3 != pretrained.state["head.weight"].shape[0]  # pos, neg, neutral
    # the same body: its output before the head is the pretrained model's, token for token (on text
    # without padding, which the fine-tune's encoder masks and the masked LM never saw)
    outputs, tokens = [], torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(0))
    for m in (pretrained_model, model):
        m.eval()
        hook = m.final_norm.register_forward_hook(lambda mod, args, out: outputs.append(out))
        m(tokens)
        hook.remove()
    assert torch.allclose(outputs[0], outputs[1])


def test_a_pretrained_body_learns_a_task_faster_than_a_fresh_one(tmp_path: Path) -> None:
    """The same model fine-tuned on masked LM with a new head, from 300 steps of pretraining vs from
    scratch: same seeds, same batches, same 30 steps; the pretrained one's validation loss is lower
    after 10 and after 30 steps, by margins (0.54 and 0.19 measured) well above the rounding of a
    deterministic single-thread run."""
    from ablate.lit import masked_loss, train_step
    from ablate.optim import make_optimizer

    torch.set_num_threads(1)
    base = tiny_overrides(*QUIET, "task.batch_size=16", "task.seq_len=32", "model.d_model=32", "task=mlm", "task.n_val=256")
    cfg = compose_cfg(base + ["finetune.tasks=[mlm]"])
    data, model, _ = build(cfg)
    optimizer = make_optimizer(model.parameters(), {**cfg.optim, "lr": 3e-3})
    for _, batch in zip(range(300), data.train_dataloader()):
        train_step(model, optimizer, batch)
    pretrained = load_pretrained(save_pretrained(tmp_path, model, data.task.codec())[0])
    fine_tune = compose_cfg(base + ["finetune.from_job=x"])

    def losses(start):
        data, model, _ = build(fine_tune, start)
        optimizer = make_optimizer(model.parameters(), {**fine_tune.optim, "lr": 3e-3})
        val, out = data.eval_batches(32, "validation")[:4], []
        for step, batch in zip(range(30), data.train_dataloader()):
            train_step(model, optimizer, batch)
            if step in (9, 29):
                with torch.no_grad():
                    out.append(sum(float(masked_loss(model(x), y)) for x, y in val) / len(val))
        return out

    (pre10, pre30), (fresh10, fresh30) = losses(pretrained), losses(None)
    assert pre10 + 0.25 < fresh10 and pre30 + 0.08 < fresh30, (pre10, fresh10, pre30, fresh30)


def test_a_linear_probe_trains_the_head_only(tmp_path: Path) -> None:
    from ablate.lit import train_step
    from ablate.optim import make_optimizer

    _, pretrained = _pretrained(tmp_path)
    data, model, _ = build(_fine_tune_cfg("finetune.mode=probe"), pretrained)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == {n for n, _ in model.named_parameters() if n.startswith("head.")}
    assert model.num_params() == sum(p.numel() for p in model.head.parameters())
    before = {k: v.clone() for k, v in model.state_dict().items()}
    optimizer = make_optimizer(model.parameters(), {**_fine_tune_cfg().optim, "lr": 1e-2})
    train_step(model, optimizer, next(iter(data.train_dataloader())))
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before if not k.startswith("head."))
    assert not torch.equal(before["head.weight"], after["head.weight"])


def test_weights_that_cannot_be_used_are_named(tmp_path: Path) -> None:
    _, pretrained = _pretrained(tmp_path)
    with pytest.raises(PretrainedError, match="is missing"):
        load_pretrained(tmp_path / "nothing.pt")
    with pytest.raises(PretrainedError, match="is not the file its pretraining wrote"):
        load_pretrained(pretrained.path, "0" * 64)
    (tmp_path / "torn.pt").write_bytes(pretrained.path.read_bytes()[:100])
    with pytest.raises(PretrainedError, match="cannot be read"):
        load_pretrained(tmp_path / "torn.pt")
    data, model, _ = build(_fine_tune_cfg("model.d_model=32"))  # another width
    with pytest.raises(PretrainedError, match="does not fit this model"):
        load_body(model, pretrained)


def test_a_finished_pretraining_without_its_weights_trains_again(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture) -> None:
    from ablate.job import Job
    from ablate.run import _done_already

    cfg = compose_cfg([*TINY, "finetune.tasks=[classify]"])
    job = Job(tmp_path, ["seed=0"], {}, str(tmp_path.parent), 0)
    _, pretrained = _pretrained(tmp_path)
    Record(status="ok", overrides=["seed=0"], stage="pretrain",
           finetune=FinetuneEntry(checkpoint=str(pretrained.path), sha256=pretrained.sha256)).write(tmp_path)
    assert _done_already(job, cfg) is not None  # done, its weights intact: skipped
    pretrained.path.write_bytes(b"not weights")
    assert _done_already(job, cfg) is None
    assert "finished, but its weights for the fine-tunes cannot be used" in capsys.readouterr().out
    os.remove(pretrained.path)
    assert _done_already(job, cfg) is None and f"{PRETRAINED} is missing" in capsys.readouterr().out


def test_a_record_names_its_stage_and_pretraining() -> None:
    entry = FinetuneEntry(task="classify", mode="probe", seed=1, from_job="/s/pre", from_variant="ffn=swiglu",
                          from_seed=2, checkpoint="/s/pre/pretrained.pt", sha256="ab" * 32)
    record = Record(status="ok", overrides=["seed=2"], stage="finetune", finetune=entry, config={"seed": 2})
    back = Record.from_json(json.loads(json.dumps(record.to_json())))
    assert back.stage == "finetune" and back.finetune == entry and back.schema == 3
    with pytest.raises(RecordError, match=r"stage='fine' \(expected one of pretrain, finetune or null\)"):
        Record.from_json({**record.to_json(), "stage": "fine"})
    plain = Record.from_json({"status": "ok", "overrides": [], "schema": 2})  # a record from before: no stage
    assert plain.stage is None and plain.finetune is None


def test_fine_tune_jobs_are_the_pretraining_jobs_with_the_task_replaced() -> None:
    from ablate.sweep import FineTune

    stage = FineTune(tasks=["py_module", "py_tokens"], seeds=[0], steps=50, lr=2e-4, causal=False,
                     task_overrides={"py_tokens": ["task.batch_size=8"]})
    pretraining = ["ffn=swiglu", "seed=3", "task=mlm", "task.seq_len=64", "optim.lr=0.003", "trainer.max_steps=900"]
    jobs = finetune_jobs(stage, [pretraining])
    assert jobs[1] == ["ffn=swiglu", "seed=3", "task=py_tokens", "task.causal=false", "task.batch_size=8",
                       "trainer.max_steps=50", "optim.lr=0.0002", "optim.warmup_steps=5",
                       f"finetune.from_job='{job_dir_name(pretraining)}'", "finetune.seed=0"]


@pytest.mark.parametrize("setting,refusal", [
    ("+finetune.per_task.py_tokens.steps=9", "finetune.per_task.py_tokens: not one of finetune.tasks (classify)"),
    ("+finetune.per_task.classify.epochs=9", "finetune.per_task.classify.epochs: not a per-task key; valid: steps, lr"),
    ("+finetune.per_task.classify.steps=0", "finetune.per_task.classify.steps=0 must be a positive integer"),
    ("+finetune.per_task.classify.lr=fast", "finetune.per_task.classify.lr='fast' must be a positive number"),
])
def test_a_bad_per_task_setting_is_named_before_anything_trains(setting: str, refusal: str) -> None:
    with pytest.raises(SweepError) as refused:
        plan_of(["seed=0", *TINY, "finetune.tasks=[classify]", *CLASSIFY, setting])
    assert refusal in str(refused.value) and "\n" not in str(refused.value), str(refused.value)
    assert "Nothing was trained" in str(refused.value)


def test_a_task_may_have_its_own_steps_and_learning_rate() -> None:
    planner, plan = plan_of(["seed=0", *TINY, "finetune.tasks=[classify,py_tokens]", *CLASSIFY, "finetune.steps=40",
                             "finetune.lr=1e-3", "+finetune.per_task.py_tokens.steps=10", "+finetune.per_task.py_tokens.lr=3e-3"])
    stage = finetune_jobs(plan.finetune, plan.definition)
    assert [(job_value(j, "task"), job_value(j, "trainer.max_steps"), job_value(j, "optim.lr"),
             job_value(j, "optim.warmup_steps")) for j in stage] == [("classify", "40", "0.001", "4"),
                                                                     ("py_tokens", "10", "0.003", "1")]


def test_a_rate_grid_fine_tunes_each_task_at_each_rate_unless_the_task_has_its_own() -> None:
    planner, plan = plan_of(["seed=0,1", *TINY, "finetune.tasks=[classify,py_tokens]", *CLASSIFY,
                             "finetune.tune_lr=[3e-4,1e-3,3e-3]", "+finetune.per_task.py_tokens.lr=2e-3"])
    assert plan.finetune.lrs == [3e-4, 1e-3, 3e-3]
    stage = finetune_jobs(plan.finetune, plan.definition)
    rates = [(job_value(j, "seed"), job_value(j, "task"), job_value(j, "optim.lr")) for j in stage]
    assert rates == [(seed, task, lr) for seed in ("0", "1")  # per pretraining job, each task at its rates
                     for task, lrs in (("classify", ("0.0003", "0.001", "0.003")), ("py_tokens", ("0.002",)))
                     for lr in lrs]
    assert len({job_dir_name(j) for j in stage}) == len(stage)  # each rate's job a directory of its own


@pytest.mark.parametrize("bad", ["[0,1e-3]", "[fast]"])
def test_a_bad_rate_grid_is_named(bad: str) -> None:
    problems = config_problems(compose_cfg([*TINY, "finetune.tasks=[classify]", *CLASSIFY, f"finetune.tune_lr={bad}"]))
    assert any("finetune.tune_lr" in p for p in problems), problems


# ---------------------------------------------------------------------------------- through the CLI

SWEEP = ["-m", "seed=0", "finetune.tasks=[classify]", "finetune.steps=4", *CLASSIFY, *TINY, "eval.every=0",
         "measure.memory=false"]


def _by_stage(sweep: Path) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for record in records(sweep):
        found.setdefault(record["stage"], []).append(record)
    return found


@pytest.mark.slow
def test_the_stages_run_in_order_and_a_relaunch_runs_only_what_is_missing_under_joblib(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    args = [*SWEEP, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", f"hydra.sweep.dir={sweep}"]
    out = run_cli(args, tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    stages = _by_stage(sweep)
    (pre,), (tuned,) = stages["pretrain"], stages["finetune"]
    assert pre["status"] == tuned["status"] == "ok" and tuned["choices"]["task"] == "classify"
    assert tuned["job"]["started_at"] >= pre["job"]["started_at"] + pre["metrics"]["wall_time_s"]  # after it
    assert tuned["finetune"]["sha256"] == pre["finetune"]["sha256"] and tuned["finetune"]["from_seed"] == 0
    assert Path(tuned["finetune"]["from_job"]) == Path(pre["job"]["dir"]) and (Path(pre["job"]["dir"]) / PRETRAINED).is_file()
    assert "fine-tune job(s) on classify" in out.stdout and "1 pretraining run and 1 fine-tune run" in out.stdout
    assert len((sweep / "table.csv").read_text().strip().splitlines()) == 2  # header + the one variant's row
    assert len(json.loads((sweep / "sweep.json").read_text())["jobs"]) == 2

    os.remove(Path(tuned["job"]["dir"]) / "result.json")  # as if the sweep had died while fine-tuning
    again = run_cli(args, tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "already ok" in again.stdout and again.stdout.count("skipped") == 1  # the pretraining, not redone
    stages = _by_stage(sweep)
    assert stages["pretrain"][0]["job"]["started_at"] == pre["job"]["started_at"]
    assert stages["finetune"][0]["job"]["started_at"] > tuned["job"]["started_at"]


@pytest.mark.slow
def test_the_stages_run_in_order_under_submitit_local(tmp_path: Path) -> None:
    """... with wandb (offline): the pretraining logs its weights as an artifact, and the fine-tune's
    record and run config name it (offline wandb refuses ``use_artifact``; online the run uses it)."""
    sweep = tmp_path / "sweep"
    out = run_cli([*(o for o in SWEEP if o != "logger=none"), "logger=wandb", "finetune.mode=probe",
                   "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10", f"hydra.sweep.dir={sweep}"],
                  tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    stages = _by_stage(sweep)
    (pre,), (tuned,) = stages["pretrain"], stages["finetune"]
    assert tuned["job"]["launcher"] == "submitit_local" and tuned["finetune"]["mode"] == "probe"
    assert tuned["job"]["started_at"] >= pre["job"]["started_at"] + pre["metrics"]["wall_time_s"]
    assert tuned["metrics"]["params"] < pre["metrics"]["params"] / 10  # the probe trains the head only
    logged = f"pretrained-{pre['wandb']['id']}"
    assert pre["finetune"]["artifact"] == logged and tuned["finetune"]["artifact"] == f"{logged}:latest"
    assert wandb_summary(tuned["wandb"]["dir"])["config"]["finetune_artifact"] == f"{logged}:latest"
    artifacts = [json.loads(line)["artifact"] for line in leet_inspect(pre["wandb"]["dir"], "--json").splitlines()
                 if '"type":"artifact"' in line]
    weights = [a for a in artifacts if a["name"] == logged]
    assert len(weights) == 1 and "pretrained.pt" in json.dumps(weights[0]), [a["name"] for a in artifacts]
