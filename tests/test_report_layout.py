"""Paper layouts and the newer record keys: a pivot of one swept key into columns, the rows chosen
and ordered, FLOPs / early and final loss / steps columns, the budget a sweep matched, tuned
sweeps (sweep.json's ``tune`` block), and the figures ``curves.png`` and ``lr.png``.

The records and sweep.json files are synthetic fixtures in the documented formats
(docs/internals.md, "Records"); everything under test is the real code."""

from __future__ import annotations

import csv
import io
import json
import re
import struct
from pathlib import Path

import numpy as np
import pytest
from test_table import qkv_records, record, write_sweep

from ablate.record import BudgetEntry, CurvePoint, Record, Score
from ablate.report import (CSV_COLUMNS, OPTIONAL_CSV_COLUMNS, build_table, csv_columns, load_records, mean_curve,
                           render, save_outputs)
from ablate.report.cli import main

TASKS = ("reverse", "sort", "copy")
QKV = ("independent", "qk_shared", "qkv_shared")
# accuracy of each (task, variant): qk_shared is 10 points worse on sort only, qkv_shared worse everywhere
BASE_ACC = {(t, v): 0.9 - (0.10 if (v == "qk_shared" and t == "sort") else 0) - (0.2 if v == "qkv_shared" else 0)
            for t in TASKS for v in QKV}
SEED_NOISE = {0: 0.0, 1: 0.012, 2: -0.007}  # shared by every variant: the seed's data


def csv_dicts(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


def md_table(md: str) -> list[list[str]]:
    lines = [ln for ln in md.splitlines() if ln.startswith("|")]
    return [[c.strip() for c in re.split(r"(?<!\\)\|", ln.strip().strip("|"))] for ln in lines]


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk (and the file is a PNG)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def task_records(columns: str | None = None, rows: list[str] | None = None) -> list[Record]:
    """task x qkv_sharing x 3 seeds (three_projections), per-run noise small and not constant."""
    exp = {"name": "three_projections", "baseline": "qkv_sharing=independent",
           "labels": {"qkv_sharing=qkv_shared": "Q=K=V", "qkv_sharing=qk_shared": "Q=K, V separate"},
           "columns": columns, "rows": rows}
    recs, n = [], 0
    for task in TASKS:
        for i, v in enumerate(QKV):
            for s in range(3):
                acc = BASE_ACC[task, v] + SEED_NOISE[s] + 0.002 * ((s + i) % 3)  # runs' own noise
                rec = record(n, [f"task={task}", f"qkv_sharing={v}", f"seed={s}"], acc=acc, experiment=exp)
                rec.config["task"]["name"] = task
                recs.append(rec)
                n += 1
    return recs


# --- pivot: --columns KEY ---------------------------------------------------------------------

def test_pivot_puts_each_task_in_a_column_with_an_average(tmp_path):
    t = build_table(load_records(write_sweep(tmp_path, task_records())), columns="task")
    assert t.pivoted and t.column_values == list(TASKS)
    assert [r.label for r in t.rows] == ["independent", "Q=K, V separate", "Q=K=V"]
    qk = t.rows[1]
    for task in TASKS:
        accs = [r.metrics.accuracy for r in task_records()
                if f"task={task}" in r.overrides and "qkv_sharing=qk_shared" in r.overrides]
        assert qk.cells[task].accuracy_mean == pytest.approx(np.mean(accs))
        assert qk.cells[task].accuracy_std == pytest.approx(np.std(accs, ddof=1))
    assert qk.avg == pytest.approx(np.mean([qk.cells[task].accuracy_mean for task in TASKS]))
    # each cell against the baseline in its column: only sort is worse for Q=K
    assert qk.cells["sort"].mark == "**" and qk.cells["reverse"].mark == "" and qk.cells["copy"].mark == ""
    assert qk.cells["sort"].delta == pytest.approx(-0.10, abs=0.005)
    assert all(c.mark for c in t.rows[2].cells.values())
    assert t.n_comparisons == 6 and "across 6 comparisons" in t.caption()
    assert "in the same column" in t.caption() and "avg: mean of the row's per-task means" in t.caption()

    table = md_table(render(t, "markdown"))
    assert table[0] == ["variant", "reverse (%)", "sort (%)", "copy (%)", "avg (%)", "runs"]
    assert len(table) == 2 + 3 and all(len(r) == 6 for r in table)
    assert table[2][0] == "independent (baseline)"
    assert table[3][2].endswith("\\*\\*") and not table[3][1].endswith("*")
    assert table[3][4] == f"{100 * qk.avg:.1f}" and table[3][5] == "9 ok"

    tex = render(t, "latex", all_columns=True)  # with the runs column
    body = tex.split(r"\midrule")[1].split(r"\bottomrule")[0].strip().splitlines()
    assert len(body) == 3 and all(ln.count("&") == 5 for ln in body) and "$^{**}$" in body[1]
    assert r"\begin{tabular}{lrrrrl}" in tex

    rows = csv_dicts(render(t, "csv"))
    header = csv_columns(t)
    assert header[:3] == ["variant", "reverse", "reverse_std"] and "avg" in header and "sort_p_corrected" in header
    assert float(rows[1]["sort"]) == pytest.approx(qk.cells["sort"].accuracy_mean)
    assert float(rows[1]["sort_delta"]) == pytest.approx(qk.cells["sort"].delta)
    assert float(rows[1]["sort_p_corrected"]) == pytest.approx(qk.cells["sort"].p_corrected)
    assert float(rows[1]["avg"]) == pytest.approx(qk.avg)
    assert rows[0]["is_baseline"] == "True" and rows[0]["sort_delta"] == ""

    out = render(t, "terminal")
    assert "sort (%)" in out and "avg (%)" in out and "**" in out
    png = save_outputs(t, tmp_path)["png"]
    width, height = png_size(png)
    assert width > 400 and height > 300


def test_pivot_defaults_to_the_experiment_and_the_flag_wins(tmp_path, capsys):
    sweep = write_sweep(tmp_path / "sweep", task_records(columns="task"))
    assert build_table(load_records(sweep)).columns_key == "task"
    flat = build_table(load_records(sweep), columns="none")
    assert not flat.pivoted and len(flat.rows) == 9
    assert main([str(sweep), "--format", "csv", "--no-wandb"]) == 0
    assert csv_dicts(capsys.readouterr().out)[0]["avg"]
    assert main([str(sweep), "--format", "csv", "--columns", "qkv_sharing", "--no-wandb"]) == 0
    rows = csv_dicts(capsys.readouterr().out)
    assert [r["variant"] for r in rows] == list(TASKS) and "qk_shared" in rows[0]
    assert main([str(sweep), "--columns", "pos_enc", "--no-wandb"]) == 2
    err = capsys.readouterr().err
    assert "pos_enc" in err and "task" in err and "qkv_sharing" in err
    # an experiment's columns naming no swept key: a warning, and the plain table
    recs = qkv_records()
    for r in recs:
        r.experiment["columns"] = "task"
    with pytest.warns(UserWarning, match="experiment.columns"):
        assert not build_table(recs).pivoted


# --- --rows A,B,C -------------------------------------------------------------------------------

def test_rows_choose_and_order_by_key_label_or_value(tmp_path, capsys):
    recs = qkv_records()
    t = build_table(recs, rows="Q=K=V,Q=K, V separate,qkv_sharing=independent")  # a label with a comma
    assert [r.label for r in t.rows] == ["Q=K=V", "Q=K, V separate", "independent"]
    assert t.n_comparisons == 2 and t.rows[2].is_baseline
    t = build_table(recs, rows=["qk_shared"])  # the baseline left out: still the comparison
    assert [r.label for r in t.rows] == ["Q=K, V separate"] and t.rows[0].delta == pytest.approx(-0.11)
    assert "baseline: independent (row not shown)" in t.caption() and t.n_comparisons == 1
    with pytest.raises(ValueError, match="unknown row 'nope'"):
        build_table(recs, rows="independent,nope")
    # a variant key with a comma, in a sweep of two keys
    t = build_table(task_records(), rows="qkv_sharing=qk_shared,task=sort,task=sort,qkv_sharing=independent")
    assert [r.key for r in t.rows] == ["qkv_sharing=qk_shared,task=sort", "qkv_sharing=independent,task=sort"]
    # experiment.rows is the default; the CLI flag wins
    sweep = write_sweep(tmp_path / "sweep", task_records(columns="task", rows=["Q=K=V", "independent"]))
    assert [r.label for r in build_table(load_records(sweep)).rows] == ["Q=K=V", "independent"]
    assert main([str(sweep), "--format", "csv", "--rows", "independent,Q=K, V separate", "--no-wandb"]) == 0
    assert [r["variant"] for r in csv_dicts(capsys.readouterr().out)] == ["independent", "Q=K, V separate"]
    assert main([str(sweep), "--rows", "bogus", "--no-wandb"]) == 2
    assert "unknown row 'bogus'" in capsys.readouterr().err


# --- the newer record keys: FLOPs, early/final loss, steps, budget -----------------------------

def flops_records(match: str = "flops") -> list[Record]:
    """Two variants; qk_shared is cheaper per token, so a FLOPs-matched budget gives it more steps."""
    recs, n = [], 0
    for v, fpt, steps in (("independent", 6.0e6, 100), ("qk_shared", 4.0e6, 150)):
        for s in range(3):
            tokens = steps * 512
            acc = 0.8 + 0.01 * s + (0.003 * s * s if v != "independent" else 0)
            rec = record(n, [f"qkv_sharing={v}", f"seed={s}"], acc=acc)
            rec.metrics.update(
                steps=steps, tokens=tokens, flops_per_token=fpt, train_flops=fpt * tokens,
                early_loss=2.0 + 0.1 * s, final_loss=1.0 + 0.1 * s + (0.05 if v == "qk_shared" else 0),
                val=Score(accuracy=0.8, loss=1.0),
                history=[CurvePoint(step=k, tokens=k * 512, flops=fpt * k * 512, loss=3.0 - k / steps - 0.1 * s,
                                    accuracy=0.5) for k in (steps // 4, steps // 2, steps)])
            rec.budget = BudgetEntry(match=match, steps=steps if match != "steps" else 100,
                                     baseline="qkv_sharing=independent", baseline_train_flops=6.0e6 * 100 * 512,
                                     baseline_tokens=100 * 512)
            recs.append(rec)
            n += 1
    return recs


def test_flops_losses_and_steps_columns():
    t = build_table(flops_records())
    base, qk = t.rows
    assert base.train_flops == pytest.approx(6.0e6 * 51200) and qk.flops_ratio == pytest.approx(1.0)
    assert qk.flops_per_token == 4.0e6 and qk.steps == 150
    assert qk.early_loss == pytest.approx(2.1) and qk.final_loss == pytest.approx(1.15)
    header = md_table(render(t, "markdown"))[0]
    for col in ("FLOPs", "FLOPs ratio", "early loss", "final loss", "steps"):
        assert col in header, col
    cells = dict(zip(header, md_table(render(t, "markdown"))[3]))
    assert cells["FLOPs"] == "3.1e11" and cells["FLOPs ratio"] == "1.00x" and cells["steps"] == "150"
    assert cells["early loss"] == "2.100" and cells["final loss"] == "1.150"
    rows = csv_dicts(render(t, "csv"))
    assert csv_columns(t) == CSV_COLUMNS + OPTIONAL_CSV_COLUMNS["flops"] + OPTIONAL_CSV_COLUMNS["losses"]
    assert float(rows[1]["train_flops"]) == pytest.approx(3.072e11) and rows[1]["steps"] == "150"
    assert float(rows[1]["flops_per_token"]) == 4.0e6 and float(rows[1]["flops_ratio"]) == pytest.approx(1.0)
    caption = t.caption()
    assert "budget: training FLOPs matched to the baseline's (±1 step): 3.1e11 per run" in caption
    assert "early/final loss: validation loss at 25% of training" in caption
    out = " ".join(render(t, "terminal").split())
    assert "3.1e11" in out and "steps" in out
    assert r"$\pm$1 step" in render(t, "latex")


def test_budget_captions_and_steps_shown_only_when_they_differ():
    t = build_table(flops_records("steps"))
    assert "budget: every variant trained for 100 steps" in t.caption()
    recs = flops_records("tokens")
    assert "budget: training tokens matched to the baseline's (51.2k tokens)" in build_table(recs).caption()
    for r in recs:
        r.metrics.steps = 100
    header = md_table(render(build_table(recs), "markdown"))[0]
    assert "steps" not in header  # equal steps: the CSV has them, the human table does not repeat them
    assert csv_dicts(render(build_table(recs), "csv"))[0]["steps"] == "100"


def test_records_without_the_new_keys_give_the_table_they_gave():
    t = build_table(qkv_records())
    assert csv_columns(t) == CSV_COLUMNS
    header = md_table(render(t, "markdown"))[0]
    assert header == ["variant", "accuracy (%)", "Δ (pts, 95% CI)", "loss", "speed", "tokens/s", "memory", "MiB",
                      "params", "runs"]
    for word in ("budget", "FLOPs", "early/final", "lr tuned"):
        assert word not in t.caption()
    assert not t.has_histories and t.tune is None


# --- learning curves ----------------------------------------------------------------------------

def test_curves_png_from_the_histories(tmp_path):
    t = build_table(flops_records())
    xs, ys, lo, hi = mean_curve(t.rows[1], "flops")
    assert len(xs) == 3 and xs[-1] == pytest.approx(4.0e6 * 150 * 512)
    assert ys[-1] == pytest.approx(2.0 - 0.1) and lo[-1] == pytest.approx(1.8) and hi[-1] == pytest.approx(2.0)
    written = save_outputs(t, tmp_path)
    assert written["curves"] == tmp_path / "curves.png"
    width, height = png_size(written["curves"])
    assert width >= 600 and height >= 400 and written["curves"].stat().st_size > 15_000
    assert "lr" not in written  # not a tuned sweep
    # no histories: no curves.png
    assert "curves" not in save_outputs(build_table(qkv_records()), tmp_path / "plain")


def test_curves_of_a_pivoted_table_have_one_panel_per_column(tmp_path):
    recs = task_records(columns="task")
    for r in recs:
        r.metrics.history = [CurvePoint(step=k, tokens=100 * k, flops=1e6 * k, loss=2.0 / k, accuracy=0.5)
                             for k in (1, 2, 4)]
    t = build_table(recs)
    single = build_table(flops_records())
    w_pivot, _ = png_size(save_outputs(t, tmp_path / "p")["curves"])
    w_single, _ = png_size(save_outputs(single, tmp_path / "s")["curves"])
    assert w_pivot > 2 * w_single  # three panels side by side


# --- tuned sweeps -------------------------------------------------------------------------------

GRID = [1e-3, 3e-3, 1e-2]
DEFAULT_LR = 3e-3
CHOSEN = {"qkv_sharing=independent": 3e-3, "qkv_sharing=qk_shared": 1e-2}


def tuned_accuracy(v: str, lr: float, seed: int) -> float:
    """qk_shared is 5 points worse at the default lr, 1 point worse at its own best lr."""
    best = 0.9 if v == "independent" else 0.89
    off = {1e-3: 0.08, 3e-3: 0.0 if v == "independent" else 0.04, 1e-2: 0.1 if v == "independent" else 0.0}[lr]
    return best - off + 0.01 * seed + 0.002 * (seed % 2) * (v == "qk_shared")


def tuned_sweep(root: Path) -> Path:
    """A tuned sweep as the tuning sweeper leaves it: every variant at every lr with tuning seed 0,
    then seeds 0-2 at each variant's chosen lr (seed 0 there is the tuning run: one job)."""
    jobs = []
    for v in ("independent", "qk_shared"):
        for lr in GRID:
            jobs.append([f"qkv_sharing={v}", "seed=0", f"optim.lr={lr}"])
        for s in (1, 2):
            jobs.append([f"qkv_sharing={v}", f"seed={s}", f"optim.lr={CHOSEN[f'qkv_sharing={v}']}"])
    recs = []
    for n, job in enumerate(jobs):
        v, seed, lr = job[0].split("=")[1], int(job[1].split("=")[1]), float(job[2].split("=")[1])
        rec = record(n, job, acc=tuned_accuracy(v, lr, seed))
        rec.config["optim"] = {"lr": lr}
        rec.metrics.lr = lr
        recs.append(rec)
    write_sweep(root, recs)
    scores = {f"qkv_sharing={v}": {str(lr): 3.0 - tuned_accuracy(v, lr, 0) for lr in GRID}
              for v in ("independent", "qk_shared")}
    (root / "sweep.json").write_text(json.dumps({
        "swept": ["qkv_sharing", "seed"], "jobs": jobs,
        "tune": {"lr": GRID, "default_lr": DEFAULT_LR, "seeds": [0], "metric": "loss", "chosen": CHOSEN,
                 "scores": scores},
        "budget": {"match": "steps", "steps": {k: 10 for k in CHOSEN}}}))
    return root


def test_a_tuned_sweep_shows_the_final_runs_at_the_chosen_lr(tmp_path, capsys):
    sweep = tuned_sweep(tmp_path / "sweep")
    t = build_table(load_records(sweep))
    base, qk = t.rows
    assert t.tuned and [r.n for r in t.rows] == [3, 3]  # the runs at other lrs are tuning runs only
    assert (base.lr, qk.lr) == (3e-3, 1e-2)
    assert qk.accuracy_mean == pytest.approx(np.mean([tuned_accuracy("qk_shared", 1e-2, s) for s in range(3)]))
    assert qk.delta == pytest.approx(np.mean([tuned_accuracy("qk_shared", 1e-2, s)
                                              - tuned_accuracy("independent", 3e-3, s) for s in range(3)]))
    assert qk.delta_default_lr == pytest.approx(tuned_accuracy("qk_shared", 3e-3, 0)
                                                - tuned_accuracy("independent", 3e-3, 0))
    caption = t.caption()
    assert "lr tuned per variant on the validation split (grid 0.001, 0.003, 0.01;" in caption
    assert "best validation loss, tuning seed 0" in caption and "default lr 0.003" in caption

    header = md_table(render(t, "markdown"))[0]
    assert header[2:5] == ["Δ @ tuned lr (pts, 95% CI)", "Δ @ default lr (pts)", "lr"]
    cells = dict(zip(header, md_table(render(t, "markdown"))[3]))
    assert cells["lr"] == "0.01" and cells["Δ @ default lr (pts)"] == "-5.0"
    rows = csv_dicts(render(t, "csv"))
    assert csv_columns(t)[-2:] == OPTIONAL_CSV_COLUMNS["tune"]
    assert float(rows[1]["lr"]) == 1e-2 and float(rows[1]["delta_default_lr"]) == pytest.approx(-0.05)

    written = save_outputs(t, sweep)
    assert written["lr"] == sweep / "lr.png" and written["png"] == sweep / "table.png"
    width, height = png_size(written["lr"])
    assert width >= 600 and height >= 400 and written["lr"].stat().st_size > 15_000

    assert main([str(sweep), "--format", "csv", "--no-wandb"]) == 0  # sweep.json's jobs: every record kept
    assert [r["lr"] for r in csv_dicts(capsys.readouterr().out)] == ["0.003", "0.01"]


def test_a_tuned_sweep_before_its_lr_is_chosen_shows_the_default_lr(tmp_path):
    sweep = tuned_sweep(tmp_path / "sweep")
    data = json.loads((sweep / "sweep.json").read_text())
    data["tune"]["chosen"] = {"qkv_sharing=independent": 3e-3}
    (sweep / "sweep.json").write_text(json.dumps(data))
    t = build_table(load_records(sweep))
    assert t.rows[1].lr is None and t.rows[1].n == 1  # its seed-0 run at the default lr
    assert "not tuned yet (runs at the default lr shown): qk_shared" in t.caption()


# --- wandb gets the pivoted table ---------------------------------------------------------------

@pytest.mark.slow
def test_wandb_logs_the_table_as_shown(tmp_path, monkeypatch):
    from conftest import wandb_summary

    from ablate.report import log_to_wandb

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.chdir(tmp_path)
    sweep = write_sweep(tmp_path / "sweep", task_records(columns="task"))
    t = build_table(load_records(sweep))
    run_dir = log_to_wandb(t, sweep, save_outputs(t, sweep))
    assert run_dir
    summary = wandb_summary(run_dir)["summary"]
    assert summary["ablation_table"]["nrows"] == 3 and summary["columns"] == "task"
    assert summary["n_comparisons"] == 6


def test_a_pivoted_baseline_is_a_row_and_a_baseline_per_task_is_named_so():
    from ablate.report.comparisons import mark_baselines
    from ablate.report.table import _pivot, _variant_rows
    recs = task_records()
    flat = _variant_rows(recs, {"task", "qkv_sharing"}, {}, [])
    shown = _pivot(flat, "task", {})
    # pivoted on task, "task=X,qkv_sharing=independent" names the row: every column has its own baseline
    base, base_of, label = mark_baselines(f"task={TASKS[0]},qkv_sharing=independent", None, shown, "task")
    assert base.key == "qkv_sharing=independent" and base_of == {} and label == "independent"
    assert base.is_baseline and all(c.is_baseline for c in base.cells.values())
    # not pivoted, a baseline naming only qkv_sharing is each task's own
    flat = _variant_rows(recs, {"task", "qkv_sharing"}, {}, [])
    base, base_of, label = mark_baselines("qkv_sharing=independent", None, flat, None)
    assert label == "qkv_sharing=independent (per task)" and len(set(map(id, base_of.values()))) == len(TASKS)
    assert all(r.is_baseline == (r.overrides["qkv_sharing"] == "independent") for r in flat)


def test_a_title_wider_than_its_panels_is_drawn_whole(tmp_path):
    """A one-panel curves.png under a long title (a smoke test's, a long experiment name): the canvas grows
    to the title instead of cutting it at both sides, so nothing drawn touches the PNG's edges."""
    from PIL import Image

    t = build_table(flops_records())
    t.experiment = "qkv_sharing_with_the_long_name_of_a_researchers_own_experiment"
    with Image.open(save_outputs(t, tmp_path)["curves"]) as image:
        pixels = np.asarray(image.convert("L"))
    for edge in (pixels[0], pixels[-1], pixels[:, 0], pixels[:, -1]):
        assert edge.min() == 255, "something is drawn up to the PNG's edge: cut off"
