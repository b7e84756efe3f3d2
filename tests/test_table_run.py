"""What a sweep leaves in wandb, read back from its offline run files (real CLI, `wandb leet`): one
`table` run however often its table is made, holding every figure and the table's artifact; job
runs with every series against `trainer/global_step`, best-value summaries, tags, notes, entity,
their record (and, with checkpoint.keep=true, their weights) as artifacts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import leet_inspect, records, run_cli, wandb_run_info, wandb_summary

from ablate.report import table_run_id
from ablate.code_version import code_version

pytestmark = pytest.mark.slow  # a sweep through the `ablate` CLI and `wandb leet`


def table_runs(sweep: Path) -> list[Path]:
    """Every local wandb run under the sweep whose job_type is `table`."""
    return [d for d in sorted(sweep.rglob("*run-*")) if d.is_dir() and not d.is_symlink()
            and list(d.glob("*.wandb")) and wandb_run_info(d).get("job_type") == "table"]


def wandb_log(run_dir: str | Path) -> list[dict]:
    """Every record of a run's offline .wandb log, as `wandb leet inspect --json` prints them."""
    return [json.loads(line) for line in leet_inspect(run_dir, "--json").splitlines() if line.strip()]


def of_type(log: list[dict], kind: str) -> list[dict]:
    return [r[kind] for r in log if r.get("type") == kind]


def artifacts(log: list[dict]) -> dict[str, dict]:
    """``{name: {type, files, metadata}}`` of the artifacts a run logged."""
    return {a["name"]: {"type": a["type"], "files": sorted(c["path"] for c in a["manifest"]["contents"]),
                        "metadata": json.loads(a.get("metadata") or "{}")} for a in of_type(log, "artifact")}


def test_a_sweep_in_wandb_as_a_wandb_user_would_log_it(tmp_path: Path, tiny: list[str]) -> None:
    sweep = tmp_path / "sweep"
    out = run_cli(["-m", "qkv_sharing=independent,qkv_shared", *tiny, "eval.every=2", "smoke=true",
                   "experiment.name=dash", "logger.tags=[first-look]", "logger.notes=why I ran it",
                   "logger.entity=my-team", "checkpoint.keep=true", f"hydra.sweep.dir={sweep}"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    recs = records(sweep)
    group = recs[0]["wandb"]["group"]
    (first,) = table_runs(sweep)  # the end-of-sweep table
    run_id = wandb_run_info(first)["run_id"]
    assert run_id == table_run_id(sweep, group)
    table_files = artifacts(wandb_log(first))[f"table-{group}"]["files"]
    assert set(table_files) >= {"curves.png", "sweep.json", "table.csv", "table.md", "table.png", "table.tex",
                                "report.html"}

    # job runs: the run's role as job_type, the variant in the config; tags, notes, entity
    for r in recs:
        log, summary = wandb_log(r["wandb"]["dir"]), wandb_summary(r["wandb"]["dir"])
        (info,) = of_type(log, "run")
        assert info["job_type"] == "train" and summary["config"]["variant"] == f"qkv_sharing={r['choices']['qkv_sharing']}"
        assert info["tags"] == ["first-look", "dash", "smoke", code_version()]
        assert code_version().startswith("git:")  # this checkout's commit
        assert info["notes"].startswith("why I ran it\n\nablate ") and r["choices"]["qkv_sharing"] in info["notes"]
        assert summary["entity"] == "my-team"
        # every series against trainer/global_step, the best value of each curve in the summary
        metrics = of_type(log, "metric")
        defined = {m.get("name") or m["glob_name"]: m for m in metrics}
        assert defined["*"]["step_metric"] == "trainer/global_step"
        assert all(m.get("step_metric") == "trainer/global_step" for k, m in defined.items() if k != "trainer/global_step")
        assert defined["val/loss"]["summary"] == {"min": True, "last": True}
        assert defined["val/accuracy"]["summary"] == {"max": True, "last": True}
        history = [h["item"] for h in of_type(log, "history")]
        assert {k for h in history for k in h if k.startswith(("train/", "test/"))} >= {"train/loss", "test/loss@64"}
        assert all("trainer/global_step" in h for h in history)
        curve = r["metrics"]["history"]
        assert len(curve) == 3
        s = summary["summary"]
        assert s["val/loss"] == pytest.approx({"min": min(p["loss"] for p in curve), "last": curve[-1]["loss"]})
        assert s["val/accuracy"]["max"] == pytest.approx(max(p["accuracy"] for p in curve))
        # the record and the kept weights as artifacts
        logged = artifacts(log)
        assert logged[f"record-{info['run_id']}"]["files"] == ["result.json"]
        assert logged[f"model-{info['run_id']}"]["type"] == "model"
        assert logged[f"model-{info['run_id']}"]["files"] == ["last.ckpt"]

    # reformatted twice, from another directory and through a path spelled differently, without --save
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for args in (["--format", "csv"], ["--format", "latex", "--baseline", "qkv_shared"]):
        table = run_cli([f"../{sweep.name}/", *args], elsewhere, script="ablate-table")
        assert table.returncode == 0, table.stderr[-2000:]
        assert "wandb: table run in" in table.stderr

    (run,) = table_runs(sweep)
    info = wandb_run_info(run)
    assert info["run_id"] == run_id and info["run_group"] == group and info["job_type"] == "table"
    assert info["tags"][:3] == ["table", "first-look", "dash"]
    summary = wandb_summary(run)
    assert summary["state"] == "finished"
    assert summary["summary"]["baseline"] == "qkv_shared", "the run holds the latest table"
    assert summary["summary"]["ablation_table"]["nrows"] == 2
    assert {"ablation_plot", "learning_curves"} <= set(summary["summary"]), "every figure, every time"
    table_artifact = artifacts(wandb_log(run))[f"table-{group}"]
    assert table_artifact["type"] == "ablation-table" and table_artifact["files"] == table_files
    assert sorted(j["id"] for j in table_artifact["metadata"]["job_runs"]) == sorted(r["wandb"]["id"] for r in recs)
