"""The ablate sweeper through the real CLI: designs, matched budgets, per-variant lr tuning, learning curves."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import records, run_cli, wandb_summary

from ablate.sweep import design_labels, design_rows


def _by(recs: list[dict], key: str) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in recs:
        value = next((o.split("=", 1)[1] for o in r["overrides"] if o.startswith(key + "=")), None)
        out.setdefault(value, []).append(r)
    return out


def test_design_rows_change_one_thing_from_the_base() -> None:
    design = {"kind": "leave_one_out", "base": {"pos_enc": "rope", "ffn": "swiglu", "model.bias": False},
              "changes": {"learned positions": {"pos_enc": "learned"}, "GELU": {"ffn": "gelu"},
                          "post-LN": {"norm.placement": "post"}}}
    rows = design_rows(design)
    assert [label for label, _ in rows] == ["base", "learned positions", "GELU", "post-LN"]
    assert rows[0][1] == {"pos_enc": "rope", "ffn": "swiglu", "model.bias": "false"}
    assert rows[1][1] == {"pos_enc": "learned", "ffn": "swiglu", "model.bias": "false"}
    assert rows[3][1]["norm.placement"] == "post" and "norm.placement" not in rows[0][1]
    labels = design_labels(design)  # named by the keys that differ between rows (model.bias does not)
    assert labels["ffn=swiglu,pos_enc=rope"] == "base"
    assert labels["ffn=gelu,pos_enc=rope"] == "GELU"
    assert labels["ffn=swiglu,norm.placement=post,pos_enc=rope"] == "post-LN"


@pytest.mark.slow
def test_design_experiment_runs_its_rows_and_labels_them(tmp_path: Path, tiny: list[str]) -> None:
    conf = tmp_path / "lab" / "experiment"
    conf.mkdir(parents=True)
    (conf / "mini.yaml").write_text("""# @package _global_
experiment:
  name: mini
  design:
    kind: one_at_a_time
    base_label: plain
    base: {ffn: relu, pos_enc: sinusoidal}
    changes:
      "+ SwiGLU": {ffn: swiglu}
      "+ RoPE": {pos_enc: rope}
      "post-LN": {norm.placement: post}
hydra:
  sweeper:
    params:
      seed: 0
""")
    sweep = tmp_path / "sweep"
    out = run_cli(["-m", "--config-dir", str(tmp_path / "lab"), "experiment=mini", *tiny, "logger=none",
                   f"hydra.sweep.dir={sweep}"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    recs = records(sweep)
    assert len(recs) == 4 and {r["status"] for r in recs} == {"ok"}
    combos = {(r["choices"]["ffn"], r["choices"]["pos_enc"], r["config"]["norm"]["placement"]) for r in recs}
    assert combos == {("relu", "sinusoidal", "pre"), ("swiglu", "sinusoidal", "pre"), ("relu", "rope", "pre"),
                      ("relu", "sinusoidal", "post")}
    assert recs[0]["experiment"]["baseline"] == "ffn=relu,pos_enc=sinusoidal"
    table = (sweep / "table.md").read_text()
    for label in ("plain", "+ SwiGLU", "+ RoPE", "post-LN"):  # four rows: a key only one row sets names it too
        assert table.count(f"| {label}") == 1, table
    assert table.count("(baseline)") == 1 and "| plain (baseline)" in table, table  # post-LN is compared with it


@pytest.mark.slow
def test_design_key_also_set_on_the_command_line_is_refused(tmp_path: Path, tiny: list[str]) -> None:
    out = run_cli(["-m", "experiment.design={kind:one_at_a_time,base:{ffn:relu},changes:{x:{ffn:gelu}}}",
                   "ffn=swiglu", *tiny, "logger=none", f"hydra.sweep.dir={tmp_path / 's'}"], tmp_path)
    assert out.returncode == 2
    assert "ffn: set by experiment.design" in out.stderr and not (tmp_path / "s").exists()


@pytest.mark.slow
def test_flops_budget_gives_cheaper_variants_more_steps(tmp_path: Path, tiny: list[str]) -> None:
    sweep = tmp_path / "sweep"
    out = run_cli(["-m", "qkv_sharing=independent,qkv_shared", "budget.match=flops", *tiny, "trainer.max_steps=12",
                   "model.d_model=32", "task.seq_len=16", "logger=none", f"hydra.sweep.dir={sweep}"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    by = {r["choices"]["qkv_sharing"]: r for r in records(sweep)}
    base, shared = by["independent"], by["qkv_shared"]
    assert base["metrics"]["steps"] == 12 and shared["metrics"]["steps"] > 12
    step_flops = shared["metrics"]["train_flops"] / shared["metrics"]["steps"]
    assert abs(shared["metrics"]["train_flops"] - base["metrics"]["train_flops"]) <= step_flops / 2 + 1
    assert shared["budget"] == {"match": "flops", "steps": shared["metrics"]["steps"], "tokens_per_param": None,
                                "baseline": "qkv_sharing=independent", "baseline_tokens": base["metrics"]["tokens"],
                                "baseline_train_flops": pytest.approx(base["metrics"]["train_flops"])}
    budget = json.loads((sweep / "sweep.json").read_text())["budget"]
    assert budget["steps"]["qkv_sharing=qkv_shared"] == shared["metrics"]["steps"]
    # the caption says what was matched, from what the jobs recorded (it read keys no job wrote before)
    flops = f"{base['metrics']['train_flops']:.2g}".replace("e+", "e")
    assert f"training FLOPs matched to the baseline's (±1 step): {flops} per run" in (sweep / "table.md").read_text()


@pytest.mark.slow
def test_lr_tuning_runs_each_variant_at_each_lr_then_the_seeds(tmp_path: Path, tiny: list[str]) -> None:
    sweep = tmp_path / "sweep"
    args = ["-m", "qkv_sharing=independent,qkv_shared", "seed=0,1", "tune.lr=[1e-3,3e-3]", *tiny,
            "logger=none", f"hydra.sweep.dir={sweep}"]
    out = run_cli(args, tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    recs = records(sweep)
    # tuning: 2 variants x 2 lrs at seed 0; then seed 1 at each variant's chosen lr (seed 0's run is reused)
    assert len(recs) == 6 and {r["status"] for r in recs} == {"ok"}
    sweep_json = json.loads((sweep / "sweep.json").read_text())
    tune = sweep_json["tune"]
    assert tune["lr"] == [0.001, 0.003] and tune["seeds"] == [0]
    assert set(tune["chosen"]) == {"qkv_sharing=independent", "qkv_sharing=qkv_shared"}
    for variant, runs in _by(recs, "qkv_sharing").items():
        chosen = tune["chosen"][f"qkv_sharing={variant}"]
        scores = tune["scores"][f"qkv_sharing={variant}"]
        assert chosen == min((float(lr) for lr in scores), key=lambda lr: scores[repr(lr)])
        seed1 = [r for r in runs if r["config"]["seed"] == 1]
        assert len(seed1) == 1 and seed1[0]["config"]["optim"]["lr"] == chosen
        assert all("val" in r["metrics"] for r in runs)
    assert "learning rate chosen per variant" in out.stdout
    assert "'trainer.max_steps'" not in sweep_json["swept"] and "optim.lr" not in sweep_json["swept"]

    mtimes = {p: p.stat().st_mtime_ns for p in sweep.rglob("result.json")}
    again = run_cli(args, tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert {p: p.stat().st_mtime_ns for p in sweep.rglob("result.json")} == mtimes  # nothing trained again
    assert again.stdout.count("already ok") == 6


@pytest.mark.slow
def test_learning_curve_in_the_record(tmp_path: Path, tiny: list[str]) -> None:
    out = run_cli([*tiny, "trainer.max_steps=12", "eval.every=4", "hydra.run.dir=run"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    (record,) = records(tmp_path / "run")
    m = record["metrics"]
    history = m["history"]
    assert [p["step"] for p in history] == [3, 4, 8, 12]  # 25% of the way, every 4 steps, the end
    assert all(set(p) == {"step", "tokens", "flops", "loss", "accuracy"} for p in history)
    assert history[-1]["tokens"] == 12 * 8 * 64 and history[-1]["flops"] == m["train_flops"]
    assert m["early_loss"] == history[0]["loss"] and m["final_loss"] == history[-1]["loss"] == m["val"]["loss"]
    assert m["val"]["loss"] != m["loss"]  # validation and test are different data
    assert m["bytes_per_token"] == 1.0 and m["bits_per_byte"] == pytest.approx(m["loss"] / math.log(2))
    summary = wandb_summary(record["wandb"]["dir"])["summary"]  # the curve against the step; FLOPs in the summary
    assert summary["val/loss"]["last"] == pytest.approx(history[-1]["loss"]) and summary["trainer/global_step"] >= 12
    assert summary["train_flops"] == pytest.approx(m["train_flops"]) and summary["flops_per_token"] > 0


@pytest.mark.slow
def test_tune_in_a_single_run_is_refused(tmp_path: Path, tiny: list[str]) -> None:
    out = run_cli([*tiny, "tune.lr=[1e-3]", "logger=none", "hydra.run.dir=run"], tmp_path)
    assert out.returncode == 2 and "ablate -m tune.lr" in out.stderr
    assert not (tmp_path / "run" / "result.json").exists()
