"""A table of a sweep whose seeds ran in rounds (``seed=auto``: sweep.json's ``rounds``): each
comparison's verdict (different, equivalent within ±mde, undecided; at the cap after the last
round), the seeds it used and its repeated CI, in every format, and ``round_state``, which hands
the sweeper the same verdicts by variant key. A fixed-seed sweep's table is left as it was.

The records are synthetic ``result.json`` files (tests/test_table.py's ``record``) with a real
``SweepPlan`` written beside them; the verdicts come from the real ``ablate.sequential``."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from test_finetune_table import sweep_records as finetune_records
from test_ladder_table import ladder_records
from test_table import record

from ablate.record import Record
from ablate.report import RoundState, build_table, load, render, round_state
from ablate.report.publish import write_report
from ablate.report.records import LoadedSweep, load_sweep
from ablate.report.stats import paired_test
from ablate.sweep import Rounds, SweepPlan

# rounds of 3, 5 and 7 seeds; equivalent within ±2 points
ROUNDS = dict(min_seeds=3, max_seeds=7, round_seeds=2, mde=2.0)
SEED_EFFECT = [0.00, 0.03, -0.02, 0.01, -0.01, 0.02, -0.03]   # shared by every variant (same data per seed)
BASE = [0.80 + e for e in SEED_EFFECT]
# per seed: far off (10 points below, tiny noise), equal (tiny noise), and noisy around the baseline
ACCURACY = {
    "base": BASE,
    "far": [b - 0.10 + n for b, n in zip(BASE, [0.001, -0.001, 0.0005])],
    "same": [b + n for b, n in zip(BASE, [0.0003, -0.0002, 0.0001])],
    "noisy": [b + n for b, n in zip(BASE, [0.03, -0.025, 0.01, -0.035, 0.02, 0.005, -0.015])],
}
EXPERIMENT = {"name": "rounds", "baseline": "qkv_sharing=base"}
# a fixed-seed sweep's table.csv header, as it was before rounds existed
FIXED_HEADER = ("variant,accuracy_mean,accuracy_std,n,speed_ratio,memory_ratio,params,status,loss_mean,tokens_per_s,"
                "memory_mib,p_value,n_ok,n_diverged,n_failed,speed_source,metric,n_running,n_interrupted,overrides,"
                "is_baseline,delta,delta_ci_low,delta_ci_high,p_corrected,n_paired,steps,speed_doubt")


def runs(seeds_of: dict[str, int], extra: list[str] | None = None, experiment: dict | None = None,
         first: int = 0) -> list[Record]:
    """Each variant's runs on its first ``seeds_of[v]`` seeds (the rounds it took part in)."""
    recs, num = [], first
    for v, n in seeds_of.items():
        for seed in range(n):
            recs.append(record(num, [f"qkv_sharing={v}", *(extra or []), f"seed={seed}"], acc=ACCURACY[v][seed],
                               experiment=experiment or EXPERIMENT))
            num += 1
    return recs


def write_rounds_sweep(root: Path, recs: list[Record], swept: list[str], run: int | None) -> Path:
    """``recs`` as one sweep's jobs in ``root``, its sweep.json with a rounds block (``run`` rounds
    launched; None: a fixed-seed sweep, no rounds block)."""
    root.mkdir(parents=True, exist_ok=True)
    for rec in recs:
        rec.write(root / str(rec.job.num))
    jobs = [rec.overrides for rec in recs]
    rounds = Rounds(**ROUNDS, run=run) if run is not None else None
    SweepPlan(swept=swept, jobs=jobs, definition=jobs, rounds=rounds).write(root)
    return root


# every round run: far and same decided after the first (3 seeds), noisy and the baseline ran all 7
FINISHED = {"base": 7, "far": 3, "same": 3, "noisy": 7}


@pytest.fixture
def finished(tmp_path) -> Path:
    return write_rounds_sweep(tmp_path / "finished", runs(FINISHED), ["qkv_sharing", "seed"], run=3)


@pytest.fixture
def table(finished):
    return build_table(load_sweep(finished))


def rows_by_key(table) -> dict:
    return {r.key.split("=", 1)[1]: r for r in table.rows}


def csv_dicts(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


# --- the verdicts ---------------------------------------------------------------------------------

def test_clear_cases_get_their_verdicts_on_the_seeds_they_used(table):
    rows = rows_by_key(table)
    assert table.has_rounds and table.n_comparisons == 3
    assert rows["base"].verdict is None and rows["base"].is_baseline
    far, same, noisy = rows["far"].verdict, rows["same"].verdict, rows["noisy"].verdict
    assert (far.verdict, far.n, far.round) == ("different", 3, 1)
    assert (same.verdict, same.n, same.round) == ("equivalent", 3, 1)
    assert (noisy.verdict, noisy.n, noisy.at_cap) == ("undecided", 7, True)
    assert not far.at_cap and not same.at_cap
    # Δ and its interval are the verdict's; no p-value and no mark under optional stopping
    for row in (rows["far"], rows["same"], rows["noisy"]):
        assert (row.delta, row.delta_ci_low, row.delta_ci_high) == (row.verdict.delta, row.verdict.ci_low,
                                                                    row.verdict.ci_high)
        assert row.p_value is None and row.p_corrected is None and row.mark == ""
    assert rows["far"].delta == pytest.approx(-0.10, abs=0.002)
    assert -0.02 < rows["same"].delta_ci_low < rows["same"].delta_ci_high < 0.02


def test_undecided_before_the_last_round_is_not_at_the_cap(tmp_path):
    seeds = {"base": 5, "far": 3, "same": 3, "noisy": 5}
    t = build_table(load_sweep(write_rounds_sweep(tmp_path / "s", runs(seeds), ["qkv_sharing", "seed"], run=2)))
    noisy = rows_by_key(t)["noisy"]
    assert (noisy.verdict.verdict, noisy.verdict.n, noisy.verdict.at_cap) == ("undecided", 5, False)
    assert "undecided at the cap" not in render(t, "markdown")
    assert "2 of 3 run" in t.caption()


def test_the_repeated_interval_is_wider_than_the_fixed_t_interval_at_the_same_seeds(table):
    rows = rows_by_key(table)
    for name in ("far", "same", "noisy"):
        row = rows[name]
        seeds = sorted(row.by_seed)[:row.verdict.n]
        fixed = paired_test({s: row.by_seed[s] for s in seeds}, rows["base"].by_seed)
        assert fixed.n == row.verdict.n
        assert row.delta_ci_high - row.delta_ci_low > fixed.ci_high - fixed.ci_low, name


# --- the words and the formats --------------------------------------------------------------------

def test_the_caption_names_the_method_the_mde_alpha_and_the_rounds(table):
    caption = table.caption()
    for words in ("group-sequential repeated confidence intervals", "O'Brien–Fleming-type α-spending",
                  "Holm across 3 comparisons", "α = 0.05", "within ±2 points (mde)",
                  "rounds: looks at 3, 5, 7 seeds, 3 of 3 run", "repeated CI", "no p-values or marks"):
        assert words in caption, words
    assert "* p<0.05" not in caption and "95% CI" not in caption


def test_markdown_shows_verdict_seeds_and_the_repeated_ci_instead_of_marks(table):
    md = render(table, "markdown")
    lines = [line for line in md.splitlines() if line.startswith("| ")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    assert head[:5] == ["variant", "accuracy (%)", "verdict", "seeds", "Δ (pts, repeated CI)"]
    cells = {c[0]: c for c in ([x.strip() for x in line.strip("|").split("|")] for line in lines[1:])}
    assert cells["far"][2:4] == ["different", "3"] and cells["same"][2:4] == ["equivalent", "3"]
    assert cells["noisy"][2:4] == ["undecided at the cap", "7"]
    assert cells["base (baseline)"][2:5] == ["–", "–", "–"]
    far = rows_by_key(table)["far"]
    low, high = 100 * far.delta_ci_low, 100 * far.delta_ci_high
    assert cells["far"][4] == rf"{100 * far.delta:+.1f} \[{low:+.1f}, {high:+.1f}\]"  # markdown escapes [ ]
    assert not any("*" in row[1] for row in cells.values())  # no marks


def test_csv_has_the_verdict_columns_and_empty_p_values(table):
    rows = csv_dicts(render(table, "csv"))
    header = list(rows[0])
    assert header[:len(FIXED_HEADER.split(","))] == FIXED_HEADER.split(",")  # readers of the CSV keep theirs
    assert header[-5:] == ["verdict", "seeds", "verdict_round", "at_cap", "verdict_level"]
    by = {r["variant"]: r for r in rows}
    assert (by["far"]["verdict"], by["far"]["seeds"], by["far"]["verdict_round"]) == ("different", "3", "1")
    assert (by["noisy"]["verdict"], by["noisy"]["at_cap"]) == ("undecided", "True")
    assert by["base"]["verdict"] == "" and by["base"]["seeds"] == ""
    for r in rows:
        assert r["p_value"] == "" and r["p_corrected"] == ""
    assert float(by["far"]["delta_ci_low"]) == pytest.approx(rows_by_key(table)["far"].delta_ci_low)
    assert 0 < float(by["noisy"]["verdict_level"]) <= 0.05


def test_latex_has_the_verdict_and_the_method(table):
    tex = render(table, "latex")
    assert "Verdict & Seeds & $\\Delta$ (pts, repeated CI)" in tex
    assert "undecided at the cap" in tex and "different" in tex
    assert "$\\alpha$ = 0.05" in tex and "group-sequential" in tex and "[repeated CI]" in tex
    assert "$^{*}$" not in tex


def test_terminal_wandb_and_the_page(table, finished):
    text = " ".join(render(table, "terminal", width=250).split())
    assert "undecided at the cap" in text and "repeated CI" in text
    summary = table.wandb_summary()
    assert summary["rounds/qkv_sharing=far/verdict"] == "different"
    assert summary["rounds/qkv_sharing=noisy/seeds"] == 7 and summary["rounds/qkv_sharing=noisy/at_cap"] is True
    assert (summary["rounds/different"], summary["rounds/equivalent"], summary["rounds/undecided"]) == (1, 1, 1)
    assert "rounds/qkv_sharing=base/verdict" not in summary
    assert table.wandb_config()["rounds"]["looks"] == [3, 5, 7]
    assert "group-sequential" in table.wandb_config()["significance_test"]
    page = write_report(table, load_sweep(finished), finished).read_text()
    for words in ("undecided at the cap", "repeated CI", "group-sequential", "<dt>verdict</dt>", "verdict_level"):
        assert words in page, words


def test_load_carries_the_verdicts_and_seeds(finished):
    frame = load(finished).table.set_index("variant")
    assert frame.loc["qkv_sharing=far", "verdict"] == "different"
    assert frame.loc["qkv_sharing=same", "verdict"] == "equivalent"
    assert frame.loc["qkv_sharing=noisy", "seeds"] == 7
    assert frame["p_value"].isna().all()


# --- a pivoted table: each cell is a comparison ---------------------------------------------------

PIVOT = {"name": "rounds", "baseline": "qkv_sharing=base", "columns": "task"}


@pytest.fixture
def pivoted(tmp_path) -> Path:
    recs: list[Record] = []
    for task, seeds in (("a", {"base": 7, "far": 3, "noisy": 7}), ("b", {"base": 3, "same": 3, "far": 3})):
        recs += runs(seeds, [f"task={task}"], experiment=PIVOT, first=len(recs))
    return write_rounds_sweep(tmp_path / "pivot", recs, ["qkv_sharing", "task", "seed"], run=3)


def test_a_pivoted_tables_cells_each_have_their_verdict(pivoted):
    t = build_table(load_sweep(pivoted))
    assert t.pivoted and t.n_comparisons == 4
    cells = {c.key: c for c in t.flat}
    assert cells["qkv_sharing=far,task=a"].verdict.verdict == "different"
    assert cells["qkv_sharing=far,task=b"].verdict.verdict == "different"
    assert cells["qkv_sharing=same,task=b"].verdict.verdict == "equivalent"
    assert cells["qkv_sharing=noisy,task=a"].verdict.verdict == "undecided"
    md = render(t, "markdown")
    assert "| variant | a (%) | a verdict | b (%) | b verdict | avg (%) | runs |" in md
    assert "undecided at the cap (7 seeds)" in md and "different (3 seeds)" in md
    rows = {r["variant"]: r for r in csv_dicts(render(t, "csv"))}
    assert rows["noisy"]["a_verdict"] == "undecided" and rows["noisy"]["a_seeds"] == "7"
    assert rows["noisy"]["b_verdict"] == "" and rows["same"]["b_verdict"] == "equivalent"
    assert rows["far"]["a_p_value"] == "" and "a_at_cap" in rows["far"]
    assert "in the same column" in t.caption()


# --- round_state: the sweeper's view, by variant key ----------------------------------------------

def test_round_state_is_keyed_by_the_plans_variants(finished, pivoted):
    for directory, baselines in ((finished, {"qkv_sharing=base"}),
                                 (pivoted, {"qkv_sharing=base,task=a", "qkv_sharing=base,task=b"})):
        sweep = load_sweep(directory)
        state = round_state(sweep)
        assert isinstance(state, RoundState)
        variants = {sweep.plan.variant(job) for job in sweep.plan.jobs}
        assert set(state.verdicts) == variants - baselines
        assert set(state.baseline_of) == set(state.verdicts) and set(state.baseline_of.values()) == baselines
        table = build_table(sweep)  # the table's verdicts, exactly
        for row in table.flat:
            if row.verdict is not None:
                assert state.verdicts[row.key] == row.verdict
    assert round_state(LoadedSweep([], sweep.plan)) == RoundState({}, {})  # before any record: nothing compared
    pivot = round_state(load_sweep(pivoted))
    assert pivot.baseline_of["qkv_sharing=far,task=b"] == "qkv_sharing=base,task=b"
    assert pivot.undecided == ["qkv_sharing=noisy,task=a"]


def test_round_state_refuses_what_is_not_decided_in_rounds(tmp_path, finished):
    fixed = write_rounds_sweep(tmp_path / "fixed", runs(FINISHED), ["qkv_sharing", "seed"], run=None)
    with pytest.raises(ValueError, match="no rounds block"):
        round_state(load_sweep(fixed))
    ladder = ladder_records()
    write_rounds_sweep(tmp_path / "ladder", ladder, ["model.size", "ffn", "seed"], run=1)
    with pytest.raises(ValueError, match=r"a scale ladder \(a size key swept\)'s comparisons are not decided"):
        round_state(load_sweep(tmp_path / "ladder"))
    finetune = finetune_records()
    for rec in finetune:
        rec.write(tmp_path / "finetune" / str(rec.job.num))
    jobs = [r.overrides for r in finetune]
    SweepPlan(swept=["qkv_sharing", "seed"], jobs=jobs, definition=jobs, rounds=Rounds(**ROUNDS, run=1)).write(
        tmp_path / "finetune")
    with pytest.raises(ValueError, match="a pretrain-then-fine-tune sweep's comparisons are not decided"):
        round_state(load_sweep(tmp_path / "finetune"))


# --- a fixed-seed sweep is left as it was ---------------------------------------------------------

def test_a_fixed_seed_sweeps_table_is_unchanged(tmp_path):
    t = build_table(load_sweep(write_rounds_sweep(tmp_path / "fixed", runs(FINISHED), ["qkv_sharing", "seed"],
                                                  run=None)))
    assert not t.has_rounds
    assert render(t, "csv").splitlines()[0] == FIXED_HEADER
    assert "verdict" not in render(t, "markdown") and "* p<0.05" in t.caption()
    assert all(r.p_value is not None for r in t.rows if not r.is_baseline)
    assert not any(k.startswith("rounds") for k in t.wandb_summary()) and "rounds" not in t.wandb_config()
