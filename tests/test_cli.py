"""End to end through the real `ablate` CLI: Hydra multirun, Lightning, offline wandb, the table."""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path

import pytest
from conftest import records, run_cli, wandb_run_info, wandb_summary

from ablate.compose import tiny_overrides

pytestmark = pytest.mark.slow  # every test runs the real `ablate` console scripts


def test_single_run_prints_final_metrics(tmp_path: Path, tiny: list[str]) -> None:
    out = run_cli([*tiny, "logger=csv", "hydra.run.dir=run"], tmp_path)
    assert out.returncode == 0, out.stderr
    (record,) = records(tmp_path / "run")
    assert record["status"] == "ok"
    assert "token_accuracy@" in out.stdout and "tokens/s" in out.stdout
    assert (tmp_path / "run" / "metrics.csv").exists()
    assert record["metrics"]["steps"] == 6


def test_glue_cola_reports_matthews_correlation(tmp_path: Path) -> None:
    fixture = Path(__file__).parent / "fixtures" / "glue_cola"
    out = run_cli([*tiny_overrides("task=glue"), "task.name=cola", f"task.path={fixture}", "task.seq_len=48",
                   "logger=none", "hydra.run.dir=run"], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    (record,) = records(tmp_path / "run")
    m = record["metrics"]
    assert m["metric"] == "matthews_corr" and -1 <= m["accuracy"] <= 1
    assert 0 <= m["eval"]["48"]["label_accuracy"] <= 1


def test_multirun_sweep_records_wandb_and_table(tmp_path: Path, tiny: list[str]) -> None:
    sweep = tmp_path / "sweep"
    out = run_cli(["-m", "qkv_sharing=independent,qk_shared,qkv_shared", "seed=0,1", *tiny,
                   f"hydra.sweep.dir={sweep}"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    recs = records(sweep)
    assert len(recs) == 6 and {r["status"] for r in recs} == {"ok"}

    # the end-of-sweep callback printed and saved the table
    for name in ("table.md", "table.tex", "table.csv", "table.png"):
        assert (sweep / name).exists(), name
    assert "qk_shared" in out.stdout

    # ablate-table on the sweep directory
    table = run_cli([str(sweep), "--format", "csv", "--no-wandb"], tmp_path, script="ablate-table")
    assert table.returncode == 0, table.stderr
    rows = {r["variant"]: r for r in csv.DictReader(io.StringIO(table.stdout))}
    params = {v: int(rows[v]["params"]) for v in ("independent", "qk_shared", "qkv_shared")}
    d = 16  # model.d_model: the attention projections differ by exactly d*d per shared matrix per layer
    assert params["independent"] - params["qk_shared"] == d * d
    assert params["qk_shared"] - params["qkv_shared"] == d * d
    assert float(rows["qkv_shared"]["memory_ratio"]) < float(rows["independent"]["memory_ratio"])
    assert all(rows[v]["n"] == "2" and rows[v]["accuracy_std"] != "" for v in params)

    # wandb: one offline run per job, one group, distinct names, the summary, plus the table run
    run_dirs = [r["wandb"]["dir"] for r in recs]
    assert len(set(run_dirs)) == 6
    names, groups = set(), set()
    for r in recs:
        info = wandb_run_info(r["wandb"]["dir"])
        groups.add(info["run_group"])
        assert info["job_type"] == "train"  # the run's role; the variant is config.variant
        summary = wandb_summary(r["wandb"]["dir"])
        names.add(summary["name"])
        assert summary["state"] == "finished" and summary["exit_code"] == 0
        for key in ("accuracy", "tokens_per_s", "peak_memory_bytes", "params", "status"):
            assert key in summary["summary"], key
        assert summary["summary"]["status"] == "ok"
        assert summary["config"]["qkv_sharing"] == r["choices"]["qkv_sharing"]
        assert summary["config"]["variant"] == f"qkv_sharing={r['choices']['qkv_sharing']}"
    assert len(names) == 6 and len(groups) == 1
    table_runs = [p for p in (sweep / "wandb").glob("offline-run-*")]
    assert len(table_runs) == 1
    table_info = wandb_run_info(table_runs[0])
    assert table_info["job_type"] == "table" and table_info["run_group"] in groups
    table_summary = wandb_summary(table_runs[0])
    assert any("table" in key for key in table_summary["summary"]), table_summary["summary"]

    # the interleaved benchmark of the same variants becomes the table's speed source
    bench = run_cli([str(sweep), "--bench", "--save", "--format", "csv"], tmp_path, script="ablate-table")
    assert bench.returncode == 0, bench.stderr[-2000:]
    rows = list(csv.DictReader(io.StringIO(bench.stdout)))
    assert {r["speed_source"] for r in rows} == {"bench"} and len(rows) == 3
    saved = json.loads((sweep / "bench.json").read_text())
    assert set(saved["variants"]) == {f"qkv_sharing={v}" for v in ("independent", "qk_shared", "qkv_shared")}
    # ablate-table logs its table to the sweep's wandb group by default
    new_runs = set((sweep / "wandb").glob("offline-run-*")) - set(table_runs)
    assert len(new_runs) == 1 and wandb_run_info(new_runs.pop())["run_group"] in groups


def test_ablate_bench_times_every_variant_interleaved(tmp_path: Path, tiny: list[str]) -> None:
    out = run_cli(["experiment=qkv_sharing", *tiny, "--rounds", "3", "--out", "bench.json"], tmp_path,
                  script="ablate-bench")
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads((tmp_path / "bench.json").read_text())
    assert result["baseline"] == "qkv_sharing=independent"
    assert list(result["variants"]) == ["qkv_sharing=qkv_shared", "qkv_sharing=qk_shared", "qkv_sharing=independent"]
    for v in result["variants"].values():
        s = v["tokens_per_s"]
        assert 0 < s["min"] <= s["median"] <= s["max"] and v["timed_steps"] == 3 * 5
    assert "1.000x" in out.stdout  # the baseline's own ratio


def test_imports_run_untraced_then_their_garbage_is_freed_and_the_rest_frozen(tmp_path: Path, monkeypatch) -> None:
    """ablate.heap.imports_untraced, around the imports of torch and the model (ablate.config) and of
    Lightning (ablate.run): no automatic collection during the block; after it, the garbage the import
    left is finalized, what it left alive is frozen, and the collector is on again. A block that
    imports nothing, or one entered with the collector off, leaves the collector as it was."""
    import gc

    from ablate.heap import imports_untraced

    (tmp_path / "heap_probe.py").write_text(
        "import gc\n"
        "ENABLED = gc.isenabled()\n"
        "FINALIZED = []\n"
        "class Node:\n"
        "    def __del__(self):\n"
        "        FINALIZED.append(1)\n"
        "a, b = Node(), Node()\n"
        "a.other, b.other = b, a\n"
        "del a, b\n"
        "KEPT = [Node() for _ in range(1000)]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    frozen = gc.get_freeze_count()
    with imports_untraced():
        import heap_probe
    assert heap_probe.ENABLED is False and gc.isenabled()
    assert heap_probe.FINALIZED == [1, 1]  # the cycle the import dropped: collected once, after it
    assert gc.get_freeze_count() >= frozen + 1000  # what it kept: frozen
    frozen, fresh = gc.get_freeze_count(), [[] for _ in range(1000)]
    with imports_untraced():
        import heap_probe  # noqa: F811 - imported already: nothing new
    assert gc.get_freeze_count() < frozen + len(fresh) and gc.isenabled()  # nothing was frozen
    (tmp_path / "heap_probe_off.py").write_text("KEPT = [[] for _ in range(1000)]\n")
    gc.disable()
    try:
        with imports_untraced():
            import heap_probe_off  # noqa: F401
        assert not gc.isenabled() and gc.get_freeze_count() < frozen + 1000
    finally:
        gc.enable()
        for name in ("heap_probe", "heap_probe_off"):
            sys.modules.pop(name, None)


def test_the_exit_hook_finalizes_the_garbage_then_freezes_the_rest() -> None:
    """ablate.heap.quick_teardown, the atexit hook of every process that imports ablate.job (`ablate`, its
    job processes; tests/test_configs.py sees it run in `ablate`): garbage from before the exit is still
    finalized, then the live objects are frozen out of the interpreter's own teardown (its repeated
    collections over them took ~1.5 CPU-s a process)."""
    import gc

    from ablate.heap import quick_teardown

    finalized = []

    class Garbage:
        def __del__(self) -> None:
            finalized.append(self)

    gc.disable()  # no automatic collection: only the hook's finds the cycle
    try:
        a, b = Garbage(), Garbage()
        a.other, b.other = b, a
        del a, b
        quick_teardown()
        assert len(finalized) == 2 and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.enable()
