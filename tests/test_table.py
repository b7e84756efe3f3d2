"""ablate.report (and the variants of ablate.sweep): sweep records -> paper-style table.

The records below are synthetic fixture inputs in the documented ``result.json`` format
(docs/internals.md); everything under test is the real code.
"""

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

from ablate.report import (CSV_COLUMNS, OPTIONAL_CSV_COLUMNS, build_table, csv_columns, load_records, log_to_wandb,
                           render, save_outputs)
from conftest import wandb_run_info, wandb_summary

from ablate.record import JobEntry, Metrics, Record, Score, WandbEntry
from ablate.report.cli import main
from ablate.sweep import variant_key, variants

QKV = ["independent", "qk_shared", "qkv_shared"]
LABELS = {"qkv_sharing=qk_shared": "Q=K, V separate", "qkv_sharing=qkv_shared": "Q=K=V"}
# accuracy per (variant, seed); qkv_shared seed 2 diverges
ACC = {
    "independent": [0.91, 0.93, 0.92],
    "qk_shared": [0.80, 0.82, 0.81],
    "qkv_shared": [0.70, 0.74, None],
}
TPS = {"independent": [1000.0, 1100.0, 1050.0], "qk_shared": [1200.0, 1300.0, 1250.0],
       "qkv_shared": [1500.0, 1600.0, None]}
MEM = {"independent": 4 * 2**20, "qk_shared": 3 * 2**20, "qkv_shared": 2 * 2**20}


def record(num, overrides, status="ok", acc=0.9, loss=0.3, tps=1000.0, mem=2**20, params=1000,
           experiment=None, evals=None, seq_len=16, group="sweep-g", metric="token_accuracy") -> Record:
    """One job's record, built through the type (``ablate.record``): a field no job writes is a TypeError."""
    metrics = Metrics() if status == "failed" else Metrics(
        metric=metric, accuracy=acc, loss=loss, tokens_per_s=tps,
        step_time_s={"min": 0.01, "median": 0.02, "max": 0.03},
        peak_memory_bytes=mem, memory_source="cpu-accounting", params=params,
        wall_time_s=1.0, steps=10,
    )
    if evals and status != "failed":
        metrics.eval = {str(L): Score(accuracy=a, loss=1.0) for L, a in evals.items()}
    return Record(
        status=status, overrides=list(overrides),
        choices={"qkv_sharing": "x", "pos_enc": "rope"},
        experiment=dict(experiment or {}),
        config={"seed": next((int(o.split("=")[1]) for o in overrides if o.startswith("seed=")), 0),
                "task": {"name": "reverse", "seq_len": seq_len}},
        metrics=metrics,
        error={"ok": None, "diverged": "non-finite loss at step 5", "failed": "boom"}.get(status),
        wandb=WandbEntry(project="ablate-test", group=group, name=f"job{num}", dir=""),
        job=JobEntry(num=num, dir=f"/x/{num}", sweep_dir="/x"),
    )


def write_sweep(root: Path, records: list[Record]) -> Path:
    for rec in records:
        rec.write(root / str(rec.job.num))
    return root


def qkv_records(experiment=True):
    exp = {"name": "qkv_sharing", "baseline": "qkv_sharing=independent", "labels": LABELS} if experiment else None
    recs, num = [], 0
    for seed in range(3):  # Hydra's order: seeds outer here, so first appearance decides row order
        for v in QKV:
            acc, tps = ACC[v][seed], TPS[v][seed]
            status = "ok" if acc is not None else "diverged"
            recs.append(record(num, ["experiment=qkv_sharing", f"qkv_sharing={v}", f"seed={seed}",
                                     "model.d_model=64"],
                               status=status, acc=acc if acc is not None else float("nan"),
                               tps=tps or 0.0, mem=MEM[v], params={"independent": 3000}.get(v, 2000),
                               experiment=exp))
            num += 1
    return recs


@pytest.fixture
def sweep(tmp_path):
    return write_sweep(tmp_path / "sweep", qkv_records())


@pytest.fixture
def table(sweep):
    return build_table(load_records(sweep))


def csv_dicts(text):
    return list(csv.DictReader(io.StringIO(text)))


# --- records and variants ---------------------------------------------------------------------

def test_rows_per_variant_in_sweep_order_with_labels(table):
    assert [r.key for r in table.rows] == [f"qkv_sharing={v}" for v in QKV]
    assert [r.label for r in table.rows] == ["independent", "Q=K, V separate", "Q=K=V"]
    # model.d_model=64 is equal across records: not part of the variant; seed/experiment ignored
    assert all(set(r.overrides) == {"qkv_sharing"} for r in table.rows)
    assert table.metric == "token_accuracy" and table.experiment == "qkv_sharing"


def test_sweep_order_follows_job_num_not_path(tmp_path):
    recs = [record(n, [f"qkv_sharing={v}", "seed=0"]) for n, v in enumerate(["b", "a", "c"] * 4)]
    t = build_table(load_records(write_sweep(tmp_path, recs)))  # dirs 0..11: "10" sorts before "2"
    assert [r.label for r in t.rows] == ["b", "a", "c"]
    assert [r.n for r in t.rows] == [4, 4, 4]


def test_mean_std_n_match_numpy(table):
    for row, v in zip(table.rows, QKV):
        accs = [a for a in ACC[v] if a is not None]
        assert row.n == len(accs)
        assert row.accuracy_mean == pytest.approx(np.mean(accs))
        assert row.accuracy_std == pytest.approx(np.std(accs, ddof=1))
        tps = [s for s in TPS[v] if s is not None]
        assert row.tokens_per_s == pytest.approx(np.mean(tps))
        assert row.memory_mib == pytest.approx(MEM[v] / 2**20)


def test_diverged_and_failed_excluded_from_means_but_counted(tmp_path):
    recs = [
        record(0, ["qkv_sharing=a", "seed=0"], acc=0.5, tps=100.0),
        record(1, ["qkv_sharing=a", "seed=1"], acc=0.7, tps=300.0),
        record(2, ["qkv_sharing=a", "seed=2"], status="diverged", acc=float("nan"), tps=1e9),
        record(3, ["qkv_sharing=b", "seed=0"], status="failed"),
        record(4, ["qkv_sharing=b", "seed=1"], status="failed"),
    ]
    t = build_table(load_records(write_sweep(tmp_path, recs)))
    a, b = t.rows
    assert a.status == "2 ok, 1 diverged" and a.n == 2
    assert a.accuracy_mean == pytest.approx(0.6) and a.tokens_per_s == pytest.approx(200.0)
    assert b.status == "2 failed" and b.n == 0 and b.accuracy_mean is None and b.speed_ratio is None
    rows = csv_dicts(render(t, "csv"))
    assert rows[0]["n_ok"] == "2" and rows[0]["n_diverged"] == "1" and rows[0]["status"] == "2 ok, 1 diverged"
    assert rows[1]["n_failed"] == "2" and rows[1]["accuracy_mean"] == "" and rows[1]["n"] == "0"
    assert "2 failed" in render(t, "terminal")


def test_ratios_vs_baseline(table):
    base = table.rows[0]
    assert base.is_baseline and table.baseline == "independent"
    assert base.speed_ratio == pytest.approx(1.0) and base.memory_ratio == pytest.approx(1.0)
    qk = table.rows[1]
    assert qk.speed_ratio == pytest.approx(np.mean(TPS["qk_shared"]) / np.mean(TPS["independent"]))
    assert qk.memory_ratio == pytest.approx(0.75)
    assert "1.00x" in render(table, "markdown")


def test_baseline_override_forms_and_unknown(sweep):
    recs = load_records(sweep)
    for spec in ("qkv_sharing=qk_shared", "qk_shared", "Q=K, V separate"):
        t = build_table(recs, baseline=spec)
        assert t.baseline_key == "qkv_sharing=qk_shared"
        assert [r.is_baseline for r in t.rows] == [False, True, False]
        assert t.rows[1].speed_ratio == pytest.approx(1.0)
    with pytest.raises(ValueError) as err:
        build_table(recs, baseline="qkv_sharing=nope")
    msg = str(err.value)
    assert "nope" in msg and all(f"qkv_sharing={v}" in msg for v in QKV)


def test_baseline_from_experiment_else_first(tmp_path):
    recs = qkv_records(experiment=False)
    for r in recs:
        r.experiment = {"name": "x", "baseline": "qkv_sharing=qkv_shared"}
    assert build_table(recs).baseline_key == "qkv_sharing=qkv_shared"
    assert build_table(qkv_records(experiment=False)).baseline_key == "qkv_sharing=independent"


def test_welch_p_value_and_marks(sweep):
    table = build_table(load_records(sweep), test="welch")
    base = [a for a in ACC["independent"]]
    raw = []
    for row, v in zip(table.rows[1:], QKV[1:]):
        accs = [a for a in ACC[v] if a is not None]
        raw.append(stats.ttest_ind(accs, base, equal_var=False).pvalue)
        assert row.p_value == pytest.approx(raw[-1])
        assert row.delta == pytest.approx(np.mean(accs) - np.mean(base))
    # Holm over the two comparisons: the smaller p doubled, the larger kept (and never below it)
    small, large = sorted(raw)
    corrected = sorted(r.p_corrected for r in table.rows[1:])
    assert corrected == pytest.approx([2 * small, max(2 * small, large)])
    assert table.rows[0].p_value is None and table.rows[0].mark == ""
    assert table.rows[1].mark == "**"  # 0.81 vs 0.92 with tiny spread
    rows = csv_dicts(render(table, "csv"))
    assert float(rows[1]["p_value"]) == pytest.approx(table.rows[1].p_value)
    assert float(rows[1]["p_corrected"]) == pytest.approx(table.rows[1].p_corrected)
    assert rows[0]["p_value"] == "" and rows[0]["p_corrected"] == ""
    for fmt in ("terminal", "latex"):
        text = " ".join(render(table, fmt).split())
        assert "Welch" in text and "across 2 comparisons" in text


def test_no_p_value_with_single_run(tmp_path):
    recs = [record(0, ["qkv_sharing=a", "seed=0"]), record(1, ["qkv_sharing=a", "seed=1"], acc=0.8),
            record(2, ["qkv_sharing=b", "seed=0"], acc=0.1)]
    t = build_table(recs)
    assert t.rows[1].p_value is None and t.rows[1].mark == "" and t.rows[1].accuracy_std is None


def test_several_keys_label_and_variant_key(tmp_path):
    recs, n = [], 0
    for pe in ("rope", "alibi"):
        for norm in ("layernorm", "rmsnorm"):
            recs.append(record(n, [f"pos_enc={pe}", f"norm={norm}", "seed=0"]))
            n += 1
    t = build_table(recs, baseline="pos_enc=alibi,norm=rmsnorm")
    assert [r.label for r in t.rows] == ["pos_enc=rope norm=layernorm", "pos_enc=rope norm=rmsnorm",
                                         "pos_enc=alibi norm=layernorm", "pos_enc=alibi norm=rmsnorm"]
    assert t.baseline_key == "norm=rmsnorm,pos_enc=alibi"
    assert variant_key({"pos_enc": "rope", "norm": "rmsnorm"}) == "norm=rmsnorm,pos_enc=rope"
    assert list(variants(recs)) == [r.key for r in t.rows]


def test_eval_length_columns(tmp_path):
    recs, n = [], 0
    for v, accs in (("rope", (0.9, 0.5, 0.2)), ("alibi", (0.9, 0.8, 0.7))):
        for seed in range(2):
            evals = {64: accs[2] + seed / 100, 16: accs[0] + seed / 100, 32: accs[1] + seed / 100}
            recs.append(record(n, [f"pos_enc={v}", f"seed={seed}"], acc=evals[16], evals=evals, seq_len=16))
            n += 1
    t = build_table(recs)
    assert t.eval_lengths == [16, 32, 64] and t.train_length == 16
    assert t.rows[1].eval[64][0] == pytest.approx(0.705)
    md = render(t, "markdown")
    assert "acc@16" in md and "acc@32" in md and "acc@64" in md
    header = render(t, "csv").splitlines()[0].split(",")
    assert [c for c in header if c.startswith("acc@") and not c.endswith("_std")] == ["acc@16", "acc@32", "acc@64"]
    row = csv_dicts(render(t, "csv"))[1]
    assert float(row["acc@64"]) == pytest.approx(0.705)


def test_runs_trained_at_several_lengths_head_the_table_with_their_own(tmp_path):
    """task.seq_len swept (e.g. experiment=attention): each row's accuracy is at its own training
    length, not under the first run's length; only lengths beyond a run's own get a column."""
    recs, n = [], 0
    for seq_len, beyond in ((64, None), (256, 512)):
        for v in ("softmax", "linear"):
            for seed in range(2):
                acc = 0.4 + seq_len / 10_000 + seed / 100
                evals = {seq_len: acc, **({beyond: acc / 2} if beyond else {})}
                recs.append(record(n, [f"attention={v}", f"task.seq_len={seq_len}", f"seed={seed}"], acc=acc,
                                   evals=evals, seq_len=seq_len))
                n += 1
    t = build_table(recs)
    assert t.train_length is None and t.extra_lengths == [512]
    md = render(t, "markdown")
    header = _md_cells(md.splitlines()[2])
    assert header[1] == "accuracy (%)" and "acc@512 (%)" in header and "acc@64 (%)" not in header
    assert "trained at length" not in t.caption() and "its own training length" in t.caption()
    only_own = [r for r in recs if r.config["task"]["seq_len"] == 64]
    for r in recs:
        if r.config["task"]["seq_len"] == 256:
            only_own.append(replace(r, metrics=replace(r.metrics, eval={"256": r.metrics.eval["256"]})))
    t = build_table(only_own)
    assert t.extra_lengths == [] and "acc@" not in render(t, "markdown")


# --- formats ----------------------------------------------------------------------------------

def _md_cells(line):
    import re
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


def test_markdown_columns(table):
    md = render(table, "markdown")
    lines = [ln for ln in md.splitlines() if ln.startswith("|")]
    header = _md_cells(lines[0])
    assert len(lines) == 2 + len(table.rows)
    assert all(len(_md_cells(ln)) == len(header) for ln in lines)
    assert "92.0 ± 1.0" in lines[2] and "(baseline)" in lines[2]
    assert "\\*\\*" in lines[3]  # significance mark, escaped
    assert "per-run median tokens/s" in md


def test_latex_booktabs_and_escaping(tmp_path):
    recs = [record(0, ["qkv_sharing=q_k", "seed=0"], experiment={"labels": {"qkv_sharing=q_k": "Q=K & 50%"}}),
            record(1, ["qkv_sharing=kv_shared", "seed=0"])]
    tex = render(build_table(recs), "latex")
    for rule in (r"\toprule", r"\midrule", r"\bottomrule", r"\begin{tabular}", r"\end{table"):
        assert rule in tex
    assert r"Q=K \& 50\%" in tex and r"kv\_shared" in tex
    body = tex.split(r"\midrule")[1].split(r"\bottomrule")[0]
    assert "_" not in body.replace(r"\_", "")
    # rows have as many cells as the header
    head = tex.split(r"\toprule")[1].split(r"\midrule")[0]
    ncols = head.count("&") + 1
    assert all(ln.replace(r"\&", "").count("&") + 1 == ncols for ln in body.strip().splitlines())


def test_latex_pm_and_marks(table):
    tex = render(table, "latex", all_columns=True)  # memory is not a column of the paper table
    assert r"92.0 $\pm$ 1.0" in tex and "$^{**}$" in tex
    assert r"1.00$\times$" in tex and "0.75$\\times$" in tex


def test_terminal_renders(table):
    out = render(table, "terminal")
    for text in ("independent", "Q=K=V", "92.0 ± 1.0", "2 ok, 1 diverged", "1.00x", "(baseline)"):
        assert text in out


def test_csv_required_columns_raw_floats(table):
    rows = csv_dicts(render(table, "csv"))
    required = ["variant", "accuracy_mean", "accuracy_std", "n", "speed_ratio", "memory_ratio", "params",
                "status", "loss_mean", "tokens_per_s", "memory_mib", "p_value", "n_ok", "n_diverged",
                "n_failed", "speed_source", "metric"]
    assert list(rows[0])[:len(required)] == required
    assert float(rows[0]["accuracy_mean"]) == pytest.approx(0.92)  # a fraction, not percent
    assert float(rows[0]["speed_ratio"]) == 1.0 and rows[0]["params"] == "3000"
    assert rows[2]["status"] == "2 ok, 1 diverged" and rows[0]["speed_source"] == "records"


def test_corrupt_record_skipped_with_warning(sweep):
    (sweep / "99").mkdir()
    (sweep / "99" / "result.json").write_text('{"status": "ok", "overr')
    with pytest.warns(UserWarning, match="skipping"):
        recs = load_records(sweep)
    assert len(recs) == 9


def test_nested_job_dirs_and_partial_sweep(tmp_path):
    recs = qkv_records()[:4]
    for i, rec in enumerate(recs):
        rec.write(tmp_path / "multirun" / "2026-01-01" / "12-00-00" / str(i))
    t = build_table(load_records(tmp_path / "multirun"))
    assert [r.n for r in t.rows] == [2, 1, 1]


# --- bench ------------------------------------------------------------------------------------

def bench_json(rounds=20):
    med = {"independent": 2000.0, "qk_shared": 2200.0, "qkv_shared": 3000.0}
    return {"baseline": "qkv_sharing=independent", "rounds": rounds,
            "variants": {f"qkv_sharing={v}": {"tokens_per_s": {"min": m * 0.9, "median": m, "max": m * 1.1}}
                         for v, m in med.items()}}


def test_bench_json_switches_speed_source(sweep):
    (sweep / "bench.json").write_text(json.dumps(bench_json()))
    t = build_table(load_records(sweep))
    assert t.speed_source == "bench" and t.bench_rounds == 20
    assert t.rows[2].speed_ratio == pytest.approx(1.5) and t.rows[0].tokens_per_s == 2000.0
    for fmt in ("terminal", "markdown", "latex"):
        text = " ".join(render(t, fmt).split())  # the terminal wraps the caption
        assert "interleaved benchmark" in text and "20 rounds" in text
    assert csv_dicts(render(t, "csv"))[0]["speed_source"] == "bench"


def test_bench_keys_with_common_overrides(sweep):
    bench = bench_json()  # keyed as the bench may key them: with the sweep's fixed overrides too
    bench["variants"] = {f"{k},model.d_model=64": v for k, v in bench["variants"].items()}
    t = build_table(load_records(sweep), bench=bench)
    assert t.speed_source == "bench" and t.rows[1].tokens_per_s == 2200.0


def test_bench_dict_argument(sweep):
    t = build_table(load_records(sweep), bench=bench_json(rounds=5))
    assert t.speed_source == "bench" and "the median over 5 rounds of each round's tokens/s" in t.caption()
    assert build_table(load_records(sweep)).speed_source == "records"


def test_bench_speed_is_the_median_of_each_rounds_ratio_and_disagreeing_rounds_are_marked(sweep):
    """The load drifted during the benchmark: the baseline ran fast in the first rounds. Each round's
    ratio is the statistic (ablate-bench prints the same), not the ratio of the medians; Q=K=V's rounds
    disagree (IQR over 10% of the median), which the speed cell marks and the caption explains."""
    from statistics import median

    base = [3000.0] * 6 + [2000.0] * 14                    # a hog arrived after round 6
    qk = [b * 1.1 for b in base]                           # 1.1x in every round: rounds agree
    qkv = [b * (1.2 if i % 2 else 1.6) for i, b in enumerate(base)]  # rounds disagree
    bench = {"baseline": "qkv_sharing=independent", "rounds": 20, "variants": {
        f"qkv_sharing={v}": {"tokens_per_s": {"min": min(r), "median": median(r), "max": max(r)}, "round_tokens_per_s": r}
        for v, r in (("independent", base), ("qk_shared", qk), ("qkv_shared", qkv))}}
    t = build_table(load_records(sweep), bench=bench)
    by = {r.key: r for r in t.rows}
    assert by["qkv_sharing=qk_shared"].speed_ratio == pytest.approx(1.1)
    assert by["qkv_sharing=qkv_shared"].speed_ratio == pytest.approx(median([1.6, 1.2] * 10))
    assert by["qkv_sharing=qkv_shared"].speed_ratio != pytest.approx(median(qkv) / median(base))
    (speed,) = [c for c in t.columns() if c.head == "speed"]
    assert speed.text(by["qkv_sharing=qkv_shared"], "x").endswith("x§") and speed.text(by["qkv_sharing=qk_shared"], "x") == "1.10x"
    assert "x§ |" in render(t, "markdown")
    from ablate.report.plot import table_figure

    ratio_panel = table_figure(t).axes[2]
    assert [a.get_text() for a in ratio_panel.texts] == ["§"]  # beside Q=K=V's speed in table.png too
    caption = " ".join(render(t, "terminal").split())
    assert ("§: the benchmark's rounds disagree by more than 10% (IQR of the per-round ratios): Q=K=V 1.20–1.60x; "
            "the machine's load changed while timing") in caption


def _with(records, **metrics_by_variant):
    """``records`` with each variant's runs given these metrics: ``qkv_shared={"cpu_share": 0.5}``."""
    for r in records:
        v = next(o.split("=")[1] for o in r.overrides if o.startswith("qkv_sharing="))
        r.metrics.update(**metrics_by_variant.get(v, {}))
    return records


def test_speeds_timed_under_another_load_are_marked_not_comparable(tmp_path):
    """Q=K=V's runs had half their cores while timed (a hog shared them), the others all of theirs:
    its speed is weather, so the cell is marked and the caption says why and what re-times it."""
    recs = _with(qkv_records(), independent={"cpu_share": 0.98}, qk_shared={"cpu_share": 0.93},
                 qkv_shared={"cpu_share": 0.5})
    t = build_table(load_records(write_sweep(tmp_path / "sweep", recs)))
    by = {r.label: r for r in t.rows}
    assert by["Q=K=V"].speed_doubt[0] == "load" and by["Q=K, V separate"].speed_doubt == ("", "")
    (speed,) = [c for c in t.columns() if c.head == "speed"]
    assert speed.text(by["Q=K=V"], "x").endswith("§") and not speed.text(by["Q=K, V separate"], "x").endswith("§")
    caption = " ".join(render(t, "terminal").split())
    assert ("§: not comparable: timed under another load than the baseline (share of its cores in its timed steps): "
            "Q=K=V 0.50 against the baseline's 0.98; `ablate-table DIR --bench` re-times the variants interleaved") in caption
    # without the conditions recorded (older records), or with like ones, nothing is marked
    same = _with(qkv_records(), independent={"cpu_share": 0.9}, qk_shared={"cpu_share": 0.85}, qkv_shared={"cpu_share": 0.95})
    t = build_table(load_records(write_sweep(tmp_path / "same", same)))
    assert not any(r.speed_doubt[0] for r in t.rows) and "§" not in render(t, "markdown")


def test_a_speed_ratio_far_from_the_flops_ratio_is_marked(tmp_path):
    """Q=K=V costs 0.88x the FLOPs; measured 1.86x faster with seeds agreeing within a few %: flagged.
    Q=K: 1.10x at 0.94x FLOPs (1.06x predicted), within 25%: not flagged."""
    recs = qkv_records()
    for r in recs:
        v = next(o.split("=")[1] for o in r.overrides if o.startswith("qkv_sharing="))
        seed = int(next(o.split("=")[1] for o in r.overrides if o.startswith("seed=")))
        flops = {"independent": 1.0, "qk_shared": 0.94, "qkv_shared": 0.88}[v] * 1e12
        speed = {"independent": 1000.0, "qk_shared": 1100.0, "qkv_shared": 1860.0}[v] * (1 + 0.01 * seed)
        r.metrics.update(train_flops=flops, tokens_per_s=speed)
    t = build_table(load_records(write_sweep(tmp_path / "sweep", recs)))
    by = {r.label: r for r in t.rows}
    assert by["Q=K=V"].speed_doubt == ("flops", "Q=K=V 1.85x against 1.14x") and by["Q=K, V separate"].speed_doubt == ("", "")
    assert "§: the speed ratio is far from what the FLOPs ratio predicts, beyond the measurement's spread" in t.caption()


# --- files, wandb, CLI ------------------------------------------------------------------------

def test_save_outputs_writes_four_files(table, sweep):
    paths = save_outputs(table, sweep)
    assert {p.name for p in paths.values()} == {"table.md", "table.tex", "table.csv", "table.png"}
    assert (sweep / "table.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (sweep / "table.csv").read_text() == render(table, "csv")
    assert not [p for p in sweep.iterdir() if p.name.startswith(".")]  # no temp files left


def test_save_outputs_eval_plot(tmp_path):
    recs = [record(i, [f"pos_enc={v}", "seed=0"], evals={16: 0.9, 32: 0.4}) for i, v in enumerate(["a", "b"])]
    paths = save_outputs(build_table(recs), tmp_path)
    assert paths["png"].read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_log_to_wandb_offline(table, sweep, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.chdir(tmp_path)
    run_dir = log_to_wandb(table, sweep, save_outputs(table, sweep))
    assert run_dir and Path(run_dir).is_dir() and Path(run_dir).is_relative_to(sweep)
    summary = wandb_summary(run_dir)
    assert summary["state"] == "finished" and summary["project"] == "ablate-test"
    s = summary["summary"]
    assert s["baseline"] == "independent" and s["speed_source"] == "records" and s["n_variants"] == 3
    assert s["ablation_table"]["_type"] == "table-file" and s["ablation_table"]["nrows"] == 3
    assert s["ablation_plot"]["_type"] == "image-file"
    assert summary["config"]["baseline_key"] == "qkv_sharing=independent"
    run_rec = wandb_run_info(run_dir)
    assert run_rec.get("job_type") == "table" and run_rec.get("run_group") == "sweep-g"


@pytest.mark.slow  # main() logs the table to wandb: git, the wandb-core service
def test_cli_csv(sweep, capsys):
    assert main([str(sweep), "--format", "csv", "--baseline", "qkv_shared"]) == 0
    rows = csv_dicts(capsys.readouterr().out)
    assert [r["variant"] for r in rows] == ["independent", "Q=K, V separate", "Q=K=V"]
    assert rows[2]["is_baseline"] == "True" and float(rows[2]["speed_ratio"]) == 1.0


@pytest.mark.slow  # main() logs the table to wandb: git, the wandb-core service
def test_cli_terminal_and_save(sweep, capsys):
    assert main([str(sweep), "--save"]) == 0
    out = capsys.readouterr().out
    assert "Q=K=V" in out and (sweep / "table.tex").exists()


def test_cli_errors(tmp_path, sweep, capsys):
    (tmp_path / "empty").mkdir()
    assert main([str(tmp_path / "empty")]) == 2
    assert "no result.json under" in capsys.readouterr().err
    assert main([str(sweep), "--baseline", "bogus"]) == 2
    err = capsys.readouterr().err
    assert "bogus" in err and "qkv_sharing=qk_shared" in err
    with pytest.raises(SystemExit) as e:
        main([str(sweep), "--format", "html"])
    assert e.value.code == 2


# --- what the table says about its records --------------------------------------------------

def test_one_evaluated_length_adds_no_length_columns(tmp_path):
    recs = [record(i, [f"qkv_sharing={v}", f"seed={s}"], evals={16: 0.9}) for i, (v, s) in
            enumerate((v, s) for v in ("a", "b") for s in (0, 1))]
    t = build_table(recs)
    header = render(t, "csv").splitlines()[0].split(",")
    assert header == list(CSV_COLUMNS) and not [c for c in header if "@" in c]
    assert "acc@" not in render(t, "markdown") and "acc@" not in t.caption()


def test_tasks_with_different_metrics_say_which_metric_each_row_has(tmp_path):
    metrics = {"reverse": "token_accuracy", "recall": "query_accuracy", "lm": "next_token_accuracy"}
    recs, n = [], 0
    for task, metric in metrics.items():
        for seed in (0, 1):
            rec = record(n, [f"task={task}", "qkv_sharing=independent", f"seed={seed}"], metric=metric)
            rec.config["task"]["name"] = task
            recs.append(rec)
            n += 1
    t = build_table(recs)
    rows = {r["variant"]: r for r in csv_dicts(render(t, "csv"))}
    assert {v: r["metric"] for v, r in rows.items()} == metrics
    caption = t.caption()
    for task, metric in metrics.items():
        assert f"{metric} for task {task}" in caption, caption
    assert "not comparable" in caption
    for fmt in ("markdown", "latex", "terminal"):
        assert "query" in render(t, fmt) and "next" in render(t, fmt)
    # one metric: the caption names it, as before
    same = build_table(qkv_records())
    assert same.caption().startswith("token_accuracy on the test split")
    assert {r["metric"] for r in csv_dicts(render(same, "csv"))} == {"token_accuracy"}


def test_smoke_test_records_make_a_smoke_table(tmp_path):
    recs = qkv_records()
    t = build_table(recs)
    assert "smoke" not in t.caption().lower() and "smoke" not in render(t, "markdown").lower()
    for r in recs:
        r.config["smoke"] = True
        r.config["seed"] = 0  # --smoke runs seed 0 only
        r.metrics.steps = 20
    recs[0].config["smoke"] = False  # one is enough: the table is a smoke test
    t = build_table(recs)
    assert t.caption().startswith("SMOKE TEST (20 steps, seed 0), not a result;"), t.caption()
    for fmt in ("markdown", "latex", "terminal"):
        out = render(t, fmt)
        assert "SMOKE TEST" in out and "not a result" in out
    for r in recs:
        r.config["seed"] = int(r.overrides[2].split("=")[1])
    assert "20 steps, seeds 0, 1, 2" in build_table(recs).caption()


def test_jobs_that_shared_the_cores_are_named_in_the_caption(tmp_path):
    recs = qkv_records()
    assert "shared the machine" not in build_table(recs).caption()
    for r in recs:
        r.metrics.update(concurrent_jobs=1, torch_threads=2, cpu_cores=2)
    assert "shared the machine" not in build_table(recs).caption()
    for r in recs:
        r.metrics.update(concurrent_jobs=2, torch_threads=1, cpu_cores=2)
    caption = build_table(recs).caption()
    assert ("jobs shared the machine: up to 2 ran at once on 2 cores, 1 torch thread each, so the speed "
            "ratios come from runs competing for the CPU") in caption, caption
    assert "--bench" in caption and "more threads than cores" not in caption
    for r in recs:
        r.metrics.update(concurrent_jobs=10, torch_threads=1)
    assert "up to 10 ran at once on 2 cores, 1 torch thread each (more threads than cores)" in build_table(recs).caption()
    # an interleaved benchmark is the speed source: the runs' own timings are not shown
    assert "shared the machine" not in build_table(recs, bench=bench_json()).caption()


def test_docs_document_the_csv_columns():
    """docs/reading-tables.md's paragraph that starts with "The CSV has the columns" names every column a table
    of a sweep with one evaluated length has, in order, then the optional ones (FLOPs, early/final
    loss, a tuned sweep's lr), each in backquotes (``acc@L`` and pivoted ``V_...`` ones aside)."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "reading-tables.md").read_text()
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text)]
    found = [p for p in paragraphs if p.startswith("The CSV has the columns")]
    assert len(found) == 1, ("docs/reading-tables.md needs one paragraph starting with 'The CSV has the columns', "
                             "then every column in backquotes: `variant`, `accuracy_mean`, ...")
    names = [n for n in re.findall(r"`([^`]+)`", found[0]) if re.fullmatch(r"[a-z][a-z0-9_]*", n)]
    assert names == list(CSV_COLUMNS) + [c for group in OPTIONAL_CSV_COLUMNS.values() for c in group]
    # a sweep whose records have none of the optional keys has exactly the always-present columns
    assert names[:len(CSV_COLUMNS)] == [c for c in csv_columns(build_table(qkv_records())) if "@" not in c]


# --- the stages of build_table, one at a time ---------------------------------------------------

def lr_run(num, variant, lr, seed):
    rec = record(num, [f"qkv_sharing={variant}", f"seed={seed}", f"optim.lr={lr}"])
    rec.metrics.lr = lr
    return rec


def test_final_runs_are_each_variants_at_its_chosen_lr_or_else_at_the_default():
    from ablate.report.tuned import final_runs
    from ablate.sweep import Tuning
    recs = [lr_run(0, "independent", 1e-3, 0), lr_run(1, "independent", 3e-3, 0), lr_run(2, "independent", 3e-3, 1),
            lr_run(3, "qk_shared", 1e-3, 0), lr_run(4, "qk_shared", 3e-3, 0)]
    tune = Tuning(lr=[1e-3, 3e-3], default_lr=3e-3, seeds=[0], chosen={"qkv_sharing=independent": 1e-3})
    final, at_default = final_runs(recs, {"qkv_sharing"}, tune)
    # qk_shared is not tuned yet: its default-lr run; at the default lr only the tuning seed counts
    assert [r.job.num for r in final] == [0, 4]
    assert [r.job.num for r in at_default] == [1, 4]
    assert final_runs(recs, {"qkv_sharing"}, None) == (recs, [])  # untuned: every record
    with pytest.raises(ValueError, match="no records at the chosen"):
        final_runs(recs, {"qkv_sharing"}, Tuning(lr=tune.lr, default_lr=3e-3, seeds=[0],
                                                 chosen={"qkv_sharing=independent": 1e-2, "qkv_sharing=qk_shared": 1e-2}))


def test_lengths_put_the_training_length_first_unless_runs_trained_at_several():
    from ablate.report.table import _lengths
    one = [record(0, ["pos_enc=rope"], evals={8: 0.5, 16: 0.9, 32: 0.3}, seq_len=16)]
    assert _lengths(one) == ([16, 8, 32], 16, None)
    several = one + [record(1, ["pos_enc=alibi"], evals={16: 0.6, 32: 0.8}, seq_len=32)]
    assert _lengths(several) == ([8, 16, 32], None, [8, 16, 32])  # beyond: other than each run's own


def test_speeds_come_from_a_bench_that_names_the_variants():
    from ablate.report.caption import RECORDS_SPEED_NOTE, bench_speed_note
    from ablate.report.table import _speeds, _variant_rows
    swept = {"qkv_sharing"}
    flat = _variant_rows(qkv_records(), swept, {}, [])
    own = [r.tokens_per_s for r in flat]
    assert _speeds(None, swept, flat) == ("records", RECORDS_SPEED_NOTE, None)
    with pytest.warns(UserWarning, match="names none of this sweep's variants"):
        assert _speeds({"variants": {"qkv_sharing=other": 1.0}}, swept, flat) == ("records", RECORDS_SPEED_NOTE, None)
    assert [r.tokens_per_s for r in flat] == own
    assert _speeds(bench_json(rounds=5), swept, flat) == ("bench", bench_speed_note(5), 5)
    assert [r.tokens_per_s for r in flat] == [2000.0, 2200.0, 3000.0]
    assert bench_speed_note(None).endswith("ratio to baseline: the median of each round's tokens/s over the "
                                           "baseline's in that round")


def test_correction_runs_over_the_rows_shown_only():
    from ablate.report.comparisons import correct
    t = build_table(qkv_records())
    base, qk, qkv = t.rows
    assert correct([base, qk], None) == 1 and qk.p_corrected == qk.p_value  # one comparison: p itself
    assert correct(t.rows, None) == 2 and qk.p_corrected >= qk.p_value


def test_table_png_shows_the_delta_with_its_ci_and_the_marks_on_a_fitted_axis():
    """table.png carries the table's message: accuracy on an axis fitted to the values (not from 0), Δ
    to the baseline with its 95% CI, a star where the corrected p < 0.05; lengths against accuracy for
    a sweep evaluated beyond its training length."""
    from ablate.report.plot import table_figure

    accs = {"a": [0.900, 0.902, 0.901], "b": [0.951, 0.953, 0.952], "c": [0.899, 0.905, 0.903]}
    recs = [record(i * 3 + s, [f"pos_enc={v}", f"seed={s}"], acc=acc)
            for i, (v, seeds) in enumerate(accs.items()) for s, acc in enumerate(seeds)]
    t = build_table(recs, baseline="pos_enc=a")
    ax_acc, ax_delta, _ = table_figure(t).axes
    low, high = ax_acc.get_xlim()
    assert 85 < low < 90.0 and 95.3 < high < 100  # fitted around 90-95 %, not 0-100
    b = next(r for r in t.rows if r.key == "pos_enc=b")
    segments = [seg for coll in ax_delta.collections for seg in coll.get_segments() if len(seg) == 2]
    spans = {round(float(seg[0][0]), 6): round(float(seg[1][0]), 6) for seg in segments}
    assert spans[round(b.delta_ci_low * 100, 6)] == round(b.delta_ci_high * 100, 6)  # its CI, in points
    stars = [a.get_text() for a in ax_delta.texts if "*" in a.get_text()]
    assert b.p_corrected < 0.05 and stars == ["**" if b.p_corrected < 0.01 else "*"]  # c: not significant

    recs = [record(i, [f"pos_enc={v}", "seed=0"], evals={16: 0.9, 32: 0.4, 64: 0.2}) for i, v in enumerate("ab")]
    ax_len = table_figure(build_table(recs)).axes[0]
    assert ax_len.get_xlabel().startswith("evaluation length")
    assert sorted({float(x) for line in ax_len.get_lines() for x in line.get_xdata()}) == [16.0, 32.0, 64.0]


def test_the_std_bar_of_table_png_stops_at_the_metrics_range():
    """Seeds that split 1 / 99 / 98 % have a std wider than the room above their mean: the bar ends at
    100 %, below at its true length; a correlation (negative in some run) may go below 0."""
    from ablate.report.plot import table_figure

    accs = {"a": [0.01, 0.994, 0.983], "b": [0.5, 0.52, 0.51]}
    recs = [record(i * 3 + s, [f"pos_enc={v}", f"seed={s}"], acc=acc)
            for i, (v, seeds) in enumerate(accs.items()) for s, acc in enumerate(seeds)]
    t = build_table(recs, baseline="pos_enc=b")
    a = next(r for r in t.rows if r.key == "pos_enc=a")
    assert a.accuracy_mean + a.accuracy_std > 1.0
    ax_acc = table_figure(t).axes[0]
    bars = [seg for coll in ax_acc.collections for seg in coll.get_segments() if len(seg) == 2]
    ends = sorted((round(float(seg[0][0]), 6), round(float(seg[1][0]), 6)) for seg in bars)
    assert max(high for _, high in ends) == 100.0
    assert round((a.accuracy_mean - a.accuracy_std) * 100, 6) in {low for low, _ in ends}  # the lower arm: whole

    from ablate.report.plot import score_floor, std_bars

    assert std_bars([-0.5], [0.8], score_floor([-0.9, -0.1])) == [[pytest.approx(50.0)], [pytest.approx(80.0)]]
    assert std_bars([0.1], [0.3], score_floor([0.0, 0.2])) == [[pytest.approx(10.0)], [pytest.approx(30.0)]]


def test_runs_stopped_early_are_named_in_their_row_and_the_caption():
    """An EarlyStopping callback ended some runs before max_steps (``metrics.early_stopped``; their
    status stays ok): the runs cell says how many, the caption at which steps, and since a run's
    early loss is read at ``eval.early_fraction`` of the steps it trained, that it is not comparable."""
    recs = qkv_records()
    t = build_table(recs)
    assert "stopped early" not in t.caption() and "stopped early" not in render(t, "markdown")
    stops = {1: 40, 4: 55}  # qk_shared seeds 0 and 1
    for r in recs:
        r.metrics.update(early_loss=2.0, final_loss=1.0, steps=stops.get(r.job.num, 100))
        if r.job.num in stops:
            r.metrics.early_stopped = {"step": stops[r.job.num], "max_steps": 100, "monitor": "val/loss",
                                       "best": 1.0, "reason": "Monitored metric val/loss did not improve"}
    t = build_table(recs)
    base, qk, qkv = t.rows
    assert qk.stopped_early == [40, 55] and base.stopped_early == [] and qk.n == 3
    assert qk.status == "3 ok (2 stopped early)" and qkv.status == "2 ok, 1 diverged"
    assert [r["status"] for r in csv_dicts(render(t, "csv"))][1] == "3 ok (2 stopped early)"
    assert "3 ok (2 stopped early)" in render(t, "markdown")
    caption = t.caption()
    assert "2 runs stopped early by EarlyStopping (at steps 40, 55 of 100;" in caption, caption
    assert "early loss of a run stopped early was read at 25% of the steps it trained, not of max_steps" in caption
    assert "stopped early by EarlyStopping" in " ".join(render(t, "latex").split())
    # without the early loss shown, the caption names the stops only
    for r in recs:
        r.metrics.early_loss = r.metrics.final_loss = None
    caption = build_table(recs).caption()
    assert "2 runs stopped early" in caption and "early loss of a run stopped early" not in caption
    # a diverged run's early_stopped is not an early stop of a run the table summarises
    recs[8].metrics.early_stopped = {"step": 5, "max_steps": 100, "monitor": "val/loss", "best": None, "reason": "x"}
    assert build_table(recs).rows[2].status == "2 ok, 1 diverged"


def test_runs_stopped_early_in_a_pivot_and_on_the_page(tmp_path):
    from ablate.report.webpage import to_html

    recs = [record(n, [f"task={task}", f"qkv_sharing={v}", "seed=0"])
            for n, (task, v) in enumerate((t, v) for t in ("sort", "copy") for v in ("a", "b"))]
    recs[3].metrics.early_stopped = {"step": 7, "max_steps": 10, "monitor": "val/loss", "best": 1.0, "reason": "x"}
    t = build_table(recs, columns="task")
    assert [r.status for r in t.rows] == ["2 ok", "2 ok (1 stopped early)"]
    assert "1 run stopped early by EarlyStopping (at step 7 of 10;" in t.caption()
    page = to_html(t, recs, tmp_path, {})
    assert "ok (stopped early at step 7)" in page


def test_a_design_row_that_changes_the_model_size_is_a_variant_not_a_rung():
    """experiment=arch's half-depth row sets model.n_layers: a size key, but set by a design row it names
    a variant (the flat table, the row's label); a size key swept on the command line still makes rungs."""
    design = {"kind": "one_at_a_time", "base_label": "enc-dec", "base": {"model.arch": "encoder_decoder"},
              "changes": {"half depth": {"model.n_layers": 1}, "decoder": {"model.arch": "decoder"}}}
    rows = [["model.arch=encoder_decoder"], ["model.arch=encoder_decoder", "model.n_layers=1"], ["model.arch=decoder"]]
    labels = {"model.arch=encoder_decoder": "enc-dec", "model.arch=encoder_decoder,model.n_layers=1": "half depth",
              "model.arch=decoder": "decoder"}
    exp = {"name": "arch", "baseline": "model.arch=encoder_decoder", "labels": labels, "design": design, "ladder": "auto"}
    recs = [record(i * 2 + s, [*row, f"seed={s}"], acc=0.5 + 0.1 * i + 0.01 * s, experiment=exp)
            for i, row in enumerate(rows) for s in range(2)]
    for r in recs:  # what a ladder reads: training FLOPs and a final loss
        r.metrics.update(train_flops=1e12 * (1 + ("model.n_layers=1" not in r.overrides)), final_loss=1.0)
    from ablate.report import LadderTable

    t = build_table(recs)
    assert not isinstance(t, LadderTable)
    assert [r.label for r in t.rows] == ["enc-dec", "half depth", "decoder"]
    exp_swept = dict(exp, design=None)  # the same runs, n_layers swept on the command line: a ladder
    assert isinstance(build_table([replace(r, experiment=exp_swept) for r in recs]), LadderTable)
