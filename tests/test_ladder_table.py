"""ablate.report.ladder: a sweep with a size key swept -> the scale-ladder layout.

The records are synthetic fixture inputs in the documented ``result.json`` format (docs/internals.md):
the baseline's final validation loss follows a known power law in training compute, and the other
variant reaches at compute C the loss the baseline reaches at 2C, so its compute multiplier is 2.
"""

from __future__ import annotations

import csv
import io
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import records, run_cli

from ablate.record import BudgetEntry, JobEntry, Metrics, Record, Score, WandbEntry
from ablate.report import LadderTable, build_table, load, render, save_outputs
from ablate.report.formats import FORMATS

RUNGS = ["xs", "s", "m", "l"]
FLOPS = {"xs": 1e12, "s": 4e12, "m": 1.6e13, "l": 6.4e13}
E, A, ALPHA = 1.5, 2.0, 0.3
NOISE = [-0.004, 0.0, 0.004]            # per seed; zero mean, so a cell's mean is the law exactly


def law(c: float) -> float:
    return E + A * (c / 1e12) ** -ALPHA


def ladder_records(rungs=RUNGS, status_of=None) -> list[Record]:
    recs, num = [], 0
    for rung in rungs:
        for ffn, shift in (("gelu", 1.0), ("swiglu", 2.0)):   # swiglu: the baseline's loss at 2x compute
            for seed, noise in enumerate(NOISE):
                c = FLOPS[rung]
                loss = law(shift * c) + noise
                recs.append(Record(
                    status="ok", overrides=[f"model.size={rung}", f"ffn={ffn}", f"seed={seed}"],
                    choices={}, experiment={"name": "ffn_ladder", "baseline": "ffn=gelu"},
                    config={"seed": seed, "task": {"name": "lm", "seq_len": 64}},
                    metrics=Metrics(metric="token_accuracy", accuracy=0.5, loss=loss, tokens_per_s=1e3,
                                    params=1000, steps=10, train_flops=c, final_loss=loss,
                                    val=Score(accuracy=0.5, loss=loss)),
                    budget=BudgetEntry(match="tokens_per_param", tokens_per_param=20),
                    wandb=WandbEntry(project="ablate-test", group="ladder-g", name=f"job{num}", dir=""),
                    job=JobEntry(num=num, dir=f"/x/{num}", sweep_dir="/x"),
                ))
                num += 1
    return recs


@pytest.fixture(scope="module")
def table() -> LadderTable:
    t = build_table(ladder_records(), n_boot=200)
    assert isinstance(t, LadderTable)
    return t


def test_ladder_detected_and_rungs_ordered_by_flops(table):
    assert table.rungs == RUNGS and table.size_keys == ["model.size"]
    assert [r.label for r in table.rows] == ["gelu", "swiglu"]
    assert table.rows[0].is_baseline and table.baseline == "gelu"
    assert table.ladder.curve is not None and table.ladder.curve.kind == "power law"


def test_cm_is_two_at_interior_rungs_and_trend_flat(table):
    swiglu = table.rows[1]
    for rung in ("s", "m"):
        m = swiglu.cells[rung].multiplier
        assert m.cm == pytest.approx(2.0, rel=0.02)
        assert not m.extrapolated and m.ci_low <= m.cm <= m.ci_high
    assert swiglu.cells["l"].multiplier.extrapolated            # its loss is below the baseline's lowest
    assert swiglu.trend.slope == pytest.approx(0.0, abs=0.02)
    md = render(table, "markdown")
    assert "2.00x \\[" in md and "†" in md
    cap = table.caption()
    assert "power law" in cap and "Kendall's τ smallest vs largest rung = +1.00" in cap
    assert "decision accuracy = 1.00" in cap and "B = 200" in cap and "C_baseline(L_variant) / C_variant" in cap


def test_two_rungs_give_the_trend_reason_not_a_number():
    t = build_table(ladder_records(rungs=["xs", "s"]), n_boot=100)
    assert isinstance(t, LadderTable) and t.rows[1].trend.slope is None
    md = render(t, "markdown")
    assert "– (2 rungs)" in md
    assert "log-log line" in t.caption()
    m = t.rows[1].cells["s"].multiplier
    assert m.cm is not None and m.ci_low is None and "cannot show its bend" in m.reason   # the CM, no CI
    assert "2 rungs: no CI" in t.caption()


def test_three_rungs_give_the_trend_and_its_ci_but_no_verdict():
    """Between 3 rungs the baseline is interpolated, whose bend tilts the trend (issue 29: a constant
    CM marked scale-dependent 84% of the time); the table shows the slope and CI, no ‡, and why."""
    t = build_table(ladder_records(rungs=["xs", "s", "m"]), n_boot=100)
    trend = t.rows[1].trend
    assert trend.slope is not None and trend.ci_low is not None and trend.scale_dependent is None
    assert "too few for a scale-dependent verdict" in trend.reason
    md = render(t, "markdown")
    row = next(line for line in md.splitlines() if line.startswith("| swiglu"))
    assert row.endswith("(3 rungs: no verdict) |") and "‡" not in row
    assert "a verdict from 4 rungs, none from 3" in t.caption() and "too few for a scale-dependent" in t.caption()


def test_every_format_renders(table):
    for fmt in FORMATS:
        text = render(table, fmt)
        assert "swiglu" in text
    latex = render(table, "latex")
    assert r"$^\dagger$" in latex and "†" not in latex
    assert "xs CM" in render(table, "terminal", width=400)


def test_csv_has_the_documented_columns(table):
    rows = list(csv.DictReader(io.StringIO(render(table, "csv"))))
    expected = ["variant"]
    for g in RUNGS:
        expected += [f"{g}_{c}" for c in ("loss", "loss_std", "n", "flops", "cm", "cm_ci_low", "cm_ci_high",
                                          "extrapolated")]
    expected += ["trend", "trend_ci_low", "trend_ci_high", "scale_dependent", "trend_note", "overrides",
                 "is_baseline", "status"]
    assert list(rows[0]) == expected
    assert float(rows[1]["m_cm"]) == pytest.approx(2.0, rel=0.02) and rows[1]["m_n"] == "3"
    assert rows[1]["l_extrapolated"] == "True" and rows[0]["is_baseline"] == "True"


def test_save_outputs_writes_scaling_png(table, tmp_path):
    written = save_outputs(table, tmp_path)
    png = tmp_path / "scaling.png"
    assert written["png"] == png and png.stat().st_size > 10_000
    assert (tmp_path / "table.csv").is_file() and not (tmp_path / "table.png").exists()


def test_ladder_off_gives_the_flat_table():
    t = build_table(ladder_records(), ladder="off")
    assert not isinstance(t, LadderTable)
    assert len(t.rows) == 8 and "accuracy (%)" in render(t, "markdown")


def test_ladder_on_without_a_size_key_raises():
    recs = [r for r in ladder_records() if "model.size=xs" in r.overrides]
    assert not isinstance(build_table(recs), LadderTable)
    with pytest.raises(ValueError, match="size key"):
        build_table(recs, ladder="on")


@pytest.mark.slow
def test_cli_writes_the_ladder_csv(tmp_path):
    for rec in ladder_records():
        rec.write(tmp_path / str(rec.job.num))
    out = subprocess.run([sys.executable, "-m", "ablate.report.cli", str(tmp_path), "--format", "csv", "--no-wandb",
                          "--save"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0].startswith("variant,xs_loss,xs_loss_std")
    assert (Path(tmp_path) / "scaling.png").is_file()


@pytest.mark.slow  # a real ladder through the `ablate` CLI
def test_a_tiny_ladder_through_the_cli_ends_in_its_ladder_table(tmp_path):
    """3 widths x 2 variants under μP, each job trained on 1 token per parameter of its own model (the
    planner's steps, the same under every launcher: tests/test_planner.py), the lr tuned on the
    smallest width only (tune.rungs=smallest); the sweep ends in the ladder layout with scaling.png.
    The variants are two families on a seq2seq task (the decoder and the encoder–decoder, its two
    stacks and cross-attention under μP), so ladders, budgets and lr tuning are run for them too."""
    sweep = tmp_path / "sweep"
    args = ["-m", "model.d_model=16,24,32", "task=add", "task.n_test=64", "task.n_val=32", "model.arch=decoder,encoder_decoder",
            "budget.match=tokens_per_param", "budget.tokens_per_param=1", "trainer=debug", "model.n_heads=2",
            "model.n_layers=1", "task.batch_size=8", "measure.warmup_steps=2", "logger=none",
            "tune.lr=[1e-3]", "tune.rungs=smallest", "model.parametrization=mup", "model.mup_base_width=16",
            f"hydra.sweep.dir={sweep}"]
    out = run_cli(args, tmp_path, timeout=400)
    assert out.returncode == 0, out.stderr[-3000:]
    recs = records(sweep)
    # tuning: 2 variants x 2 rates (1e-3 and optim.lr) at width 16 only; then the 4 wider jobs (the
    # width-16 ones at the chosen rate are tuning runs, found done)
    assert len(recs) == 8 and {r["status"] for r in recs} == {"ok"}
    assert {r["config"]["model"]["d_model"] for r in recs if "model.d_model=16" in r["tune"]["tuned_on"]} == {16, 24, 32}
    for r in recs:
        source = r["tune"]["tuned_on"]
        assert r["tune"]["rungs"] == "smallest" and "model.d_model=16" in source, r["tune"]
    assert "tune.rungs=smallest" in (sweep / "table.md").read_text()
    steps_of_width = {}
    for r in recs:
        task, m = r["config"]["task"], r["metrics"]
        tokens_per_step = task["batch_size"] * task["seq_len"]
        assert m["steps"] == r["budget"]["steps"] == max(1, round(m["params"] / tokens_per_step))
        assert r["budget"]["match"] == "tokens_per_param" and r["budget"]["tokens_per_param"] == 1
        steps_of_width.setdefault(r["config"]["model"]["d_model"], set()).add(m["steps"])
    widths = sorted(steps_of_width)
    assert max(steps_of_width[widths[0]]) < min(steps_of_width[widths[-1]])  # a larger model, more tokens
    header = (sweep / "table.csv").read_text().splitlines()[0].split(",")
    assert header[0] == "variant" and sum(c.endswith("_loss") for c in header) == 3, header  # one per rung
    assert (sweep / "scaling.png").is_file() and not (sweep / "table.png").exists()
    # on the old code a ladder sweep ended without report.html, and load() raised AttributeError
    assert "scaling.png" in (sweep / "report.html").read_text()
    frames = load(sweep)
    assert set(frames.records["variant"]) == set(frames.table["variant"]) and len(frames.table) == 2


def test_a_tuned_ladder_is_built_from_the_runs_at_each_chosen_lr(tmp_path):
    """A tuned ladder (tune.lr, e.g. tune.rungs=smallest under μP) has tuning runs at other rates in its
    sweep directory; the ladder's cells are the runs at each variant's chosen rate, and the caption says
    how the rate was chosen (on the old code every run of a rung and seed went in, the first one kept)."""
    from ablate.sweep import SweepPlan, Tuning, job_variant

    chosen_runs = ladder_records()
    tuning = []
    for r in chosen_runs:
        if r.seed == 0:  # the tuning run at the rate not chosen: much worse
            bad = Record.from_json(r.to_json())
            bad.overrides = r.overrides + ["optim.lr=0.03"]
            bad.metrics.val.loss = bad.metrics.final_loss = r.metrics.val.loss + 5
            bad.metrics.lr = 0.03
            tuning.append(bad)
        r.overrides = r.overrides + ["optim.lr=0.001"]
        r.metrics.lr = 0.001
    swept = ["model.size", "ffn", "seed"]
    variants = {job_variant(r.overrides, swept) for r in chosen_runs}
    transfer = {v: v.replace(f"model.size={s}", "model.size=xs") for v in variants for s in RUNGS[1:] if f"model.size={s}" in v}
    plan = SweepPlan(swept=swept, jobs=[r.overrides for r in tuning], definition=[r.overrides[:-1] for r in chosen_runs],
                     tune=Tuning(lr=[0.001, 0.03], default_lr=0.03, seeds=[0], chosen={v: 0.001 for v in variants},
                                 transfer=transfer, rungs="smallest"))
    plan.write(tmp_path)
    for i, r in enumerate(tuning + chosen_runs):
        (tmp_path / f"job{i}").mkdir()
        r.path = tmp_path / f"job{i}" / "result.json"
    t = build_table(tuning + chosen_runs, n_boot=200)
    assert isinstance(t, LadderTable)
    for row in t.rows:
        for rung, cell in row.cells.items():
            assert cell.n == 3 and abs(cell.loss_mean - law(FLOPS[rung] * (1.0 if row.key == "ffn=gelu" else 2.0))) < 1e-9
    assert "tune.rungs=smallest" in t.caption() and "grid 0.001, 0.03" in t.caption()


@pytest.mark.parametrize("field, value", [("val.loss", -1.0), ("val.loss", float("nan")), ("val.loss", 1e300),
                                          ("train_flops", 0), ("train_flops", 1e300)])
def test_a_record_the_ladder_cannot_use_is_named_in_one_line_and_left_out(field, value, tmp_path):
    """On the old code a loss <= 0 raised IndexError, 1e300 OverflowError, and FLOPs of 0 or 1e300
    went into the fit unnamed."""
    recs = ladder_records()
    bad = recs[0]  # xs, gelu, seed 0
    bad.path = tmp_path / "0" / "result.json"
    if field == "val.loss":
        bad.metrics.val.loss = value
    else:
        bad.metrics.train_flops = value
    with pytest.warns(UserWarning) as caught:
        t = build_table(recs, n_boot=50)
    lines = [str(w.message) for w in caught if "a ladder needs" in str(w.message)]
    assert len(lines) == 1 and lines[0].startswith(f"{bad.path}: metrics.{field}={value!r} ")
    assert isinstance(t, LadderTable) and t.n_left_out == 1
    assert t.rows[0].cells["xs"].n == 2 and t.rows[0].cells["s"].n == 3
    assert "1 ok runs without usable training FLOPs or loss left out" in t.caption()


def test_a_baseline_flat_within_its_seed_spread_gives_a_table_saying_so():
    recs = ladder_records(rungs=["xs", "s"])
    for r in recs:
        if "ffn=gelu" in r.overrides:
            loss = 3.0 - 0.01 * ("model.size=s" in r.overrides) + [-0.5, 0.0, 0.5][r.seed]
            r.metrics.val.loss = r.metrics.final_loss = loss
    t = build_table(recs, n_boot=200)
    assert t.ladder.curve is None and "flat within its seeds' spread" in t.caption()
    for fmt in FORMATS:
        assert "swiglu" in render(t, fmt)
    assert "– (baseline flat within its seeds' spread)" in render(t, "markdown")
