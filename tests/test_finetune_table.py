"""The pretrain-then-fine-tune table (issue 28, item 5; ``ablate.report.finetune_table``): one row
per variant with the pretraining columns, one column per downstream task and their average, the
paired Δ and CI on each, the caption's rank agreement, every format, and the seed table's layout
through ``--columns``.

Records are built through the typed ``Record`` as a fine-tune sweep writes them (docs/finetune.md,
"Records and the table"); everything under test is the real code."""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from ablate.record import FinetuneEntry, JobEntry, Metrics, Record, WandbEntry
from ablate.report import build_table, load_records, render
from ablate.report.cli import main
from ablate.report.finetune_table import FinetuneTable
from ablate.report.publish import save_outputs, write_report

QKV = ("independent", "qk_shared", "qkv_shared")
LABELS = {"qkv_sharing=qkv_shared": "Q=K=V", "qkv_sharing=qk_shared": "Q=K"}
TASKS = ("py_module", "py_tokens")
SEEDS = (0, 1, 2)
FT_SEEDS = (0, 1)
# downstream score of (variant, task) before noise; the pretraining seed's noise is shared by all
SCORE = {("independent", "py_module"): 0.85, ("qk_shared", "py_module"): 0.81, ("qkv_shared", "py_module"): 0.72,
         ("independent", "py_tokens"): 0.90, ("qk_shared", "py_tokens"): 0.88, ("qkv_shared", "py_tokens"): 0.80}
SEED_NOISE = {0: 0.0, 1: 0.011, 2: -0.006}
LOSS = {"independent": 2.0, "qk_shared": 2.2, "qkv_shared": 2.5}


def score(v: str, i: int, seed: int, ft_seed: int) -> float:
    """Variant ``v`` on the ``i``-th task: a per-run noise of its own beside the seed's shared one."""
    j = QKV.index(v)
    return SCORE[v, TASKS[i]] + SEED_NOISE[seed] + 0.004 * ((seed + i + j) % 3) + 0.002 * ft_seed * (j + 1)


def pretraining(num: int, v: str, seed: int, loss: float, exp: dict) -> Record:
    return Record(
        status="ok", overrides=[f"qkv_sharing={v}", f"seed={seed}", "task=mlm"], choices={"task": "mlm"},
        experiment=exp, config={"seed": seed, "task": {"name": "mlm"}},
        metrics=Metrics(metric="masked_token_accuracy", accuracy=0.3, loss=loss, early_loss=loss + 1.0,
                        final_loss=loss + 0.01 * seed, tokens_per_s={"independent": 1000.0}.get(v, 1100.0),
                        peak_memory_bytes={"independent": 2.0 * 2**20}.get(v, 1.5 * 2**20),
                        memory_source="cpu-accounting", params={"independent": 3000}.get(v, 2000),
                        train_flops={"independent": 3e9}.get(v, 2e9), steps=100, wall_time_s=1.0),
        stage="pretrain", finetune=FinetuneEntry(checkpoint=f"/x/{num}/pretrained.pt", sha256="ab" * 32),
        wandb=WandbEntry(project="p", group="g", name=f"job{num}"), job=JobEntry(num=num, dir=f"/x/{num}"))


def finetune(num: int, pre: Record, v: str, task: str, ft_seed: int, acc: float, glue: bool = False) -> Record:
    seed = pre.config["seed"]
    option = f"glue_{task}" if glue else task  # each GLUE task's own option (conf/task/glue_<name>.yaml)
    return Record(
        status="ok", overrides=[*pre.overrides[:-1], f"task={option}", f"finetune.from_job='{pre.job.num}'",
                                f"finetune.seed={ft_seed}"],
        choices={"task": option}, experiment=pre.experiment,
        config={"seed": seed, "task": {"name": task, **({"_target_": "ablate.data.glue.GlueTask"} if glue else {})},
                "finetune": {"steps": 300, "lr": 2e-4, "mode": "full"},
                "trainer": {"max_steps": 300}, "optim": {"lr": 2e-4}},  # a fine-tune job runs the stage's steps and lr
        metrics=Metrics(metric="matthews" if task == "cola" else "accuracy", accuracy=acc, loss=0.5, steps=300),
        stage="finetune", finetune=FinetuneEntry(task=task, mode="full", seed=ft_seed, from_job=pre.job.dir,
                                                 from_variant=f"qkv_sharing={v}", from_seed=seed),
        wandb=WandbEntry(project="p", group="g", name=f"job{num}"), job=JobEntry(num=num, dir=f"/x/{num}"))


def sweep_records(losses: dict[str, float] = LOSS, variants=QKV, tasks=TASKS, glue: bool = False,
                  columns: str | None = None) -> list[Record]:
    exp = {"name": "qkv_finetune", "baseline": "qkv_sharing=independent", "labels": LABELS, "columns": columns}
    pre, fine = [], []
    for seed in SEEDS:
        for v in variants:
            pre.append(pretraining(len(pre), v, seed, losses[v], exp))
    num = len(pre)
    for p in pre:
        v = p.overrides[0].split("=")[1]
        for i, task in enumerate(tasks):
            for k in FT_SEEDS:
                fine.append(finetune(num, p, v, task, k, score(v, i, p.config["seed"], k), glue))
                num += 1
    return pre + fine


def expected(v: str, task: str) -> dict[int, float]:
    """{pretraining seed: its fine-tune seeds' mean} of ``v`` on ``task``."""
    i = TASKS.index(task)
    return {s: float(np.mean([score(v, i, s, k) for k in FT_SEEDS])) for s in SEEDS}


def write(root: Path, records: list[Record]) -> Path:
    for r in records:
        r.write(root / str(r.job.num))
    return root


@pytest.fixture
def table(tmp_path) -> FinetuneTable:
    return build_table(load_records(write(tmp_path / "sweep", sweep_records())))


def md_rows(md: str) -> list[list[str]]:
    lines = [ln for ln in md.splitlines() if ln.startswith("|")]
    return [[re.sub(r"\\(.)", r"\1", c.strip()) for c in re.split(r"(?<!\\)\|", ln.strip().strip("|"))]
            for ln in lines]


# --- the layout, its rows and columns ---------------------------------------------------------

def test_a_sweep_with_fine_tune_records_gets_the_fine_tune_layout(table):
    assert isinstance(table, FinetuneTable) and table.layout == "finetune"
    assert [r.label for r in table.rows] == ["independent", "Q=K", "Q=K=V"]
    assert table.tasks == list(TASKS) and table.avg_label == "avg"
    assert table.n_pretrain == 9 and table.n_finetune == 9 * 2 * 2 and table.n_records == 45
    heads = [c.head for c in table.columns()]
    assert heads[:1] == ["variant"]
    for head in ("params", "FLOPs", "speed", "memory", "early loss", "final loss", "py_module (%)",
                 "py_module Δ (pts, 95% CI)", "py_tokens (%)", "avg (%)", "avg Δ (pts, 95% CI)", "runs"):
        assert head in heads
    assert heads.index("final loss") < heads.index("py_module (%)") < heads.index("avg (%)")


def test_pretraining_columns_come_from_the_pretraining_runs_only(table):
    base, qk = table.rows[0], table.rows[1]
    assert base.n == qk.n == 3 and base.params == 3000 and qk.params == 2000
    assert qk.speed_ratio == pytest.approx(1.1) and qk.memory_ratio == pytest.approx(0.75)
    assert qk.flops_ratio == pytest.approx(2 / 3)
    assert qk.final_loss == pytest.approx(2.2 + 0.01) and qk.early_loss == pytest.approx(3.2)


def test_task_columns_average_fine_tune_seeds_first_then_pretraining_seeds(table):
    for row, v in zip(table.rows, QKV):
        for task in TASKS:
            per_seed = expected(v, task)
            cell = row.cells[task]
            assert cell.by_seed == pytest.approx(per_seed)
            assert cell.accuracy_mean == pytest.approx(np.mean(list(per_seed.values())))
            assert cell.accuracy_std == pytest.approx(np.std(list(per_seed.values()), ddof=1))
            assert cell.n_seeds == 3 and cell.n == 6  # 3 pretraining seeds x 2 fine-tune seeds, all ok
        avg = {s: np.mean([expected(v, t)[s] for t in TASKS]) for s in SEEDS}
        assert row.cells["avg"].accuracy_mean == pytest.approx(np.mean(list(avg.values())))
        assert row.cells["avg"].accuracy_mean == pytest.approx(np.mean([row.cells[t].accuracy_mean for t in TASKS]))


def test_paired_delta_and_ci_by_pretraining_seed_on_every_task_and_the_average(table):
    base = table.rows[0]
    assert base.cells["avg"].delta is None and all(base.cells[t].is_baseline for t in TASKS)
    for row, v in zip(table.rows[1:], QKV[1:]):
        for name in (*TASKS, "avg"):
            if name == "avg":
                mine = {s: np.mean([expected(v, t)[s] for t in TASKS]) for s in SEEDS}
                theirs = {s: np.mean([expected("independent", t)[s] for t in TASKS]) for s in SEEDS}
            else:
                mine, theirs = expected(v, name), expected("independent", name)
            diffs = np.array([mine[s] - theirs[s] for s in SEEDS])
            half = stats.t.ppf(0.975, 2) * diffs.std(ddof=1) / np.sqrt(3)
            cell = row.cells[name]
            assert cell.delta == pytest.approx(diffs.mean()) and cell.n_paired == 3
            assert (cell.delta_ci_low, cell.delta_ci_high) == pytest.approx((diffs.mean() - half, diffs.mean() + half))
            assert cell.p_value == pytest.approx(stats.ttest_rel(list(mine.values()), list(theirs.values())).pvalue)
            assert cell.p_corrected is not None and cell.p_corrected >= cell.p_value
    assert table.n_comparisons == 2 * 3  # two variants x (two tasks + avg), Holm over all of them


def test_caption_counts_runs_and_names_the_fine_tune_settings(table):
    cap = table.caption()
    assert "9 pretraining runs and 36 fine-tune runs (2 tasks x 2 fine-tune seeds per pretraining run)" in cap
    assert "fine-tune: 300 steps, lr 0.0002, full fine-tuning" in cap
    assert "paired t-test over pretraining seeds" in cap and "baseline: independent" in cap


def test_caption_names_the_range_of_steps_and_each_rate_when_tasks_have_their_own(tmp_path):
    """finetune.per_task: each fine-tune runs its own trainer.max_steps and optim.lr; the caption says
    what ran (a range of steps, each rate), not the stage's defaults."""
    records = sweep_records()
    for r in records:
        if r.stage == "finetune" and r.finetune.task == "py_tokens":
            r.config = {**r.config, "trainer": {"max_steps": 100}, "optim": {"lr": 3e-3}}
    cap = build_table(load_records(write(tmp_path / "sweep", records))).caption()
    assert "fine-tune: 100–300 steps, lr 0.0002/0.003, full fine-tuning" in cap, cap


def test_caption_says_the_rankings_agree(table):
    assert table.ranks.tau == pytest.approx(1.0)
    assert ("the pretraining-loss ranking agrees with the downstream ranking: Kendall's τ = +1.00" in table.caption())
    assert "3 of 3 variant pairs ordered alike" in table.caption()


def test_caption_says_the_rankings_disagree(tmp_path):
    # lowest pretraining loss for the worst downstream variant, and the other way round
    reversed_losses = {"independent": 2.5, "qk_shared": 2.2, "qkv_shared": 2.0}
    t = build_table(load_records(write(tmp_path, sweep_records(reversed_losses))))
    assert t.ranks.tau == pytest.approx(-1.0)
    assert "the pretraining-loss ranking disagrees with the downstream ranking: Kendall's τ = -1.00" in t.caption()
    assert "0 of 3 variant pairs ordered alike" in t.caption()
    # one swapped pair of three: τ = 1/3, partly agreeing
    partly = {"independent": 2.2, "qk_shared": 2.0, "qkv_shared": 2.5}
    t = build_table(load_records(write(tmp_path / "p", sweep_records(partly))))
    assert t.ranks.tau == pytest.approx(1 / 3)
    assert "partly agrees with the downstream ranking: Kendall's τ = +0.33" in t.caption()


def test_glue_tasks_are_averaged_as_a_glue_score(tmp_path):
    t = build_table(load_records(write(tmp_path, sweep_records(tasks=("cola", "sst2"), glue=True))))
    assert t.avg_label == "GLUE dev score" and t.tasks == ["cola", "sst2"]
    assert "GLUE dev score (%)" in [c.head for c in t.columns()]
    assert "GLUE dev score: macro average over the GLUE tasks run, on GLUE's dev sets (not a leaderboard number)" \
        in t.caption()
    assert "cola: matthews" in t.caption()


# --- every format ------------------------------------------------------------------------------

def test_every_format_renders(table, tmp_path):
    md = render(table, "markdown")
    rows = md_rows(md)
    head = rows[0]
    qkv = rows[4]  # header, rule, independent, Q=K, Q=K=V
    assert qkv[0] == "Q=K=V" and "independent" in rows[2][0]
    cell = qkv[head.index("avg (%)")]
    avg = table.rows[2].cells["avg"]
    assert cell.startswith(f"{100 * avg.accuracy_mean:.1f} ± {100 * avg.accuracy_std:.1f}")
    assert qkv[head.index("avg Δ (pts, 95% CI)")].startswith(f"{100 * avg.delta:+.1f} [")
    assert "Kendall" in md

    latex = render(table, "latex")
    assert r"\begin{tabular}" in latex and "avg" in latex and "Kendall" in latex
    assert "py\\_module" in render(table, "latex", all_columns=True)

    text = render(table, "terminal", width=400)
    assert "Q=K=V" in text and "py_tokens" in text

    rows = list(csv.DictReader(io.StringIO(render(table, "csv"))))
    assert [r["variant"] for r in rows] == ["independent", "Q=K", "Q=K=V"]
    assert float(rows[2]["avg"]) == pytest.approx(avg.accuracy_mean)
    assert float(rows[2]["py_module_delta"]) == pytest.approx(table.rows[2].cells["py_module"].delta)
    assert rows[2]["py_module_n"] == "3" and rows[0]["avg_delta"] == "" and rows[0]["avg_label"] == "avg"
    assert float(rows[1]["speed_ratio"]) == pytest.approx(1.1) and rows[1]["pretrain_n"] == "3"

    written = save_outputs(table, tmp_path / "out")
    assert {"markdown", "latex", "csv", "png"} <= set(written) and written["png"].name == "table.png"
    page = write_report(table, None, tmp_path / "sweep").read_text()
    assert "avg Δ" in page and "Kendall" in page and "py_module" in page
    caption = re.search(r"<figcaption><b>table.png</b>: (.*?)</figcaption>", page).group(1)
    assert "pretraining loss" in caption and "downstream" in caption  # its own figure's, not the flat table's


def test_a_rate_grid_keeps_per_variant_and_task_the_rate_best_on_validation(tmp_path):
    """finetune.tune_lr: every fine-tune also ran at 3e-3, scoring 0.1 lower on test; its validation
    score is higher only for Q=K on py_module, so only that cell reads the 3e-3 runs."""
    import copy

    from ablate.record import Score

    records = sweep_records()
    fine = [r for r in records if r.stage == "finetune"]
    for r in fine:
        r.metrics.val = Score(accuracy=0.5)
    again = []
    for num, r in enumerate(fine, start=len(records)):
        other = copy.deepcopy(r)
        other.overrides = [*r.overrides, "optim.lr=0.003"]
        other.config["optim"] = {"lr": 3e-3}
        other.metrics.accuracy -= 0.1
        better = "qkv_sharing=qk_shared" == r.finetune.from_variant and r.finetune.task == "py_module"
        other.metrics.val = Score(accuracy=0.6 if better else 0.4)
        other.job = replace(r.job, num=num, dir=f"/x/{num}")
        again.append(other)
    t = build_table(load_records(write(tmp_path / "sweep", records + again)))
    q_k = t.rows[1]
    assert q_k.label == "Q=K" and q_k.cells["py_module"].accuracy_mean == pytest.approx(
        np.mean(list(expected("qk_shared", "py_module").values())) - 0.1)
    assert q_k.cells["py_tokens"].accuracy_mean == pytest.approx(np.mean(list(expected("qk_shared", "py_tokens").values())))
    assert t.rows[0].cells["py_module"].accuracy_mean == pytest.approx(
        np.mean(list(expected("independent", "py_module").values())))
    assert t.finetune_lr_grid == [2e-4, 3e-3] and t.n_finetune == len(fine) and t.n_finetune_tried == 2 * len(fine)
    assert (f"lr tuned per variant and task on the task's validation split over 0.0002/0.003 (chosen: 0.0002/0.003; "
            f"the table shows the {len(fine)} fine-tunes at the chosen rates of {2 * len(fine)})") in t.caption()


def test_the_figure_draws_the_pretraining_loss_each_tasks_delta_and_the_ratios(table):
    from ablate.report.finetune_plot import finetune_figure

    fig = finetune_figure(table)
    loss, delta, ratio = fig.axes
    assert [t.get_text() for t in loss.get_yticklabels()] == ["independent", "Q=K", "Q=K=V"]
    assert [float(line.get_xdata()[0]) for line in loss.lines] == pytest.approx([r.final_loss for r in table.rows])
    drawn = {c.get_label(): c for c in delta.containers}  # one errorbar per task and the average
    assert list(drawn) == [*TASKS, "avg"]
    for name, bars in drawn.items():
        xs = bars.lines[0].get_xdata()
        assert list(xs[1:]) == pytest.approx([r.cells[name].delta * 100 for r in table.rows[1:]])
    assert [float(x) for x in ratio.lines[0].get_xdata()] == pytest.approx([r.speed_ratio for r in table.rows])


def test_wandb_config_and_summary_name_the_layout(table):
    assert table.wandb_summary()["layout"] == "finetune"
    assert table.wandb_summary()["kendall_tau"] == pytest.approx(1.0)
    assert table.wandb_config()["tasks"] == list(TASKS)


def test_every_run_is_placed_in_its_variants_row(table):
    from ablate.report.frames import run_places

    places = [place for _, place in run_places(table.sweep.records, table)]
    assert {p.key for p in places} == {r.key for r in table.rows}
    assert {p.column for p, r in zip(places, table.sweep.records) if r.stage == "pretrain"} == {""}
    assert {p.column for p, r in zip(places, table.sweep.records) if r.stage == "finetune"} == set(TASKS)


def test_rows_and_welch_as_in_the_flat_table(tmp_path):
    sweep = load_records(write(tmp_path, sweep_records()))
    t = build_table(sweep, rows="Q=K=V,independent")
    assert [r.label for r in t.rows] == ["Q=K=V", "independent"] and t.n_comparisons == 3
    t = build_table(sweep, test="welch", baseline="Q=K")
    assert t.baseline == "Q=K" and t.rows[1].is_baseline
    cell, base = t.rows[0].cells["py_module"], t.rows[1].cells["py_module"]
    assert cell.delta == pytest.approx(cell.accuracy_mean - base.accuracy_mean) and cell.n_paired is None
    assert "Welch" in t.caption()
    with pytest.raises(ValueError, match="unknown row"):
        build_table(sweep, rows="nope")


def test_report_load_gives_the_table_frame(tmp_path):
    pytest.importorskip("pandas")
    from ablate.report import load

    frames = load(write(tmp_path, sweep_records()))
    assert list(frames.table["label"]) == ["independent", "Q=K", "Q=K=V"]
    assert list(frames.table["variant"]) == [f"qkv_sharing={v}" for v in QKV]
    assert "avg" in frames.table.columns and len(frames.records) == 45


# --- the seed table's layout: --columns ---------------------------------------------------------

def test_columns_option_gives_the_seed_tables_layout(tmp_path):
    sweep = write(tmp_path, sweep_records())
    t = build_table(load_records(sweep), columns="avg,speed,memory")
    assert [c.head for c in t.columns()] == ["variant", "avg (%)", "speed", "memory"]
    assert md_rows(render(t, "markdown"))[0] == ["variant", "avg (%)", "speed", "memory"]
    assert "avg_delta" in [name for name, _ in t.csv_fields()]  # the CSV keeps every column
    with pytest.raises(ValueError, match="no column 'nope'"):
        build_table(load_records(sweep), columns="avg,nope")


def test_columns_from_the_experiment_and_the_glue_alias(tmp_path):
    t = build_table(load_records(write(tmp_path, sweep_records(tasks=("cola", "sst2"), glue=True,
                                                               columns="glue,speed,memory"))))
    assert [c.head for c in t.columns()] == ["variant", "GLUE dev score (%)", "speed", "memory"]


def test_ablate_table_cli_on_a_fine_tune_sweep(tmp_path, capsys):
    sweep = write(tmp_path, sweep_records())
    assert main([str(sweep), "-f", "markdown", "--no-wandb"]) == 0
    out = capsys.readouterr().out.replace("\\", "")
    assert "py_module (%)" in out and "avg Δ (pts, 95% CI)" in out and "36 fine-tune runs" in out
    assert main([str(sweep), "-f", "csv", "--columns", "avg,speed,memory", "--no-wandb"]) == 0
    assert main([str(sweep), "--columns", "avg,speed,memory", "-f", "markdown", "--no-wandb"]) == 0
    assert md_rows(capsys.readouterr().out.split("\n\n", 1)[-1])[0] == ["variant", "avg (%)", "speed", "memory"]
    assert main([str(sweep), "--html", "--no-wandb"]) == 0
    assert "Kendall" in (sweep / "report.html").read_text()
    assert main([str(sweep), "--columns", "nope", "--no-wandb"]) == 2


def test_a_failed_fine_tune_is_counted_and_left_out_of_the_means(tmp_path):
    records = sweep_records()
    failed = next(r for r in records if r.stage == "finetune" and r.config["seed"] == 1
                  and "qkv_sharing=qk_shared" in r.overrides and r.finetune.task == "py_module"
                  and r.finetune.seed == 0)
    failed.status, failed.metrics = "failed", Metrics()
    t = build_table(load_records(write(tmp_path, records)))
    cell = t.rows[1].cells["py_module"]
    assert cell.counts == {"ok": 5, "failed": 1} and cell.n_seeds == 3
    assert cell.by_seed[1] == pytest.approx(score("qk_shared", 0, 1, 1))  # its other fine-tune seed
    assert "fine-tune: 11 ok, 1 failed" in md_rows(render(t, "markdown"))[3][-1]
    assert json.loads(json.dumps(t.wandb_summary()))["n_finetune"] == 36


# --- a real tiny sweep, through the CLI ----------------------------------------------------------

@pytest.mark.slow
def test_a_real_fine_tune_sweeps_table_at_its_end_and_through_ablate_table(tmp_path, capsys):
    from conftest import QUIET, run_cli

    from ablate.compose import tiny_overrides

    fixtures = Path(__file__).resolve().parent / "fixtures"
    sweep = tmp_path / "sweep"
    args = ["-m", "qkv_sharing=independent,qkv_shared", "seed=0,1", "finetune.tasks=[classify]", "finetune.steps=4",
            "finetune.tune_lr=[1e-3,3e-3]",  # each checkpoint fine-tuned at both; the table keeps the better on validation
            f"+finetune.settings.classify.path={fixtures / 'classify'}", "finetune.seq_len=32",
            *tiny_overrides(*QUIET, "task=mlm", "task.seq_len=32"), "eval.every=0", "measure.memory=false",
            f"hydra.sweep.dir={sweep}"]
    out = run_cli(args, tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "pretraining runs only" not in out.stdout + out.stderr
    at_end = list(csv.DictReader(io.StringIO((sweep / "table.csv").read_text())))
    assert [r["variant"] for r in at_end] == ["independent", "qkv_shared"]
    assert {"classify", "classify_delta", "avg", "avg_delta", "speed_ratio", "final_loss"} <= set(at_end[0])
    assert at_end[1]["pretrain_n"] == "2" and at_end[1]["classify_n"] == "2" and at_end[1]["avg_delta"] != ""
    caption = (sweep / "table.md").read_text().replace("\\", "")
    assert "4 pretraining runs and 4 fine-tune runs (1 task x 1 fine-tune seed per pretraining run)" in caption
    assert ("lr tuned per variant and task on the task's validation split over 0.001/0.003" in caption
            and "the table shows the 4 fine-tunes at the chosen rates of 8" in caption), caption

    assert main([str(sweep), "-f", "csv", "--no-wandb"]) == 0
    assert list(csv.DictReader(io.StringIO(capsys.readouterr().out))) == at_end  # ablate-table: the same table
    assert main([str(sweep), "-f", "markdown", "--columns", "avg,speed,memory", "--no-wandb"]) == 0
    assert md_rows(capsys.readouterr().out)[0] == ["variant", "avg (%)", "speed", "memory"]


@pytest.mark.slow  # the wandb-core service
def test_the_wandb_table_run_logs_the_fine_tune_table(tmp_path, monkeypatch):
    from conftest import wandb_run_info, wandb_summary

    from ablate.report import log_to_wandb

    for key, value in (("WANDB_MODE", "offline"), ("WANDB_DIR", str(tmp_path)), ("WANDB_SILENT", "true")):
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)
    sweep = write(tmp_path / "sweep", sweep_records())
    table = build_table(load_records(sweep))
    run_dir = log_to_wandb(table, sweep, save_outputs(table, sweep))
    summary = wandb_summary(run_dir)
    s = summary["summary"]
    assert summary["state"] == "finished" and s["layout"] == "finetune" and s["kendall_tau"] == pytest.approx(1.0)
    assert s["ablation_table"]["_type"] == "table-file" and s["ablation_table"]["nrows"] == 3
    assert summary["config"]["tasks"] == list(TASKS)
    assert wandb_run_info(run_dir).get("job_type") == "table"
