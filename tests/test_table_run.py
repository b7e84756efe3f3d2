"""A sweep keeps one wandb `table` run however often its table is made (real CLI, offline wandb)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import records, run_cli, wandb_run_info, wandb_summary

from ablate.report import table_run_id

pytestmark = pytest.mark.slow  # a sweep through the `ablate` CLI and `wandb leet`


def table_runs(sweep: Path) -> list[Path]:
    """Every local wandb run under the sweep whose job_type is `table`."""
    return [d for d in sorted(sweep.rglob("*run-*")) if d.is_dir() and not d.is_symlink()
            and list(d.glob("*.wandb")) and wandb_run_info(d).get("job_type") == "table"]


def test_the_sweep_end_and_two_ablate_table_calls_leave_one_table_run(tmp_path: Path, tiny: list[str]) -> None:
    sweep = tmp_path / "sweep"
    out = run_cli(["-m", "qkv_sharing=independent,qkv_shared", *tiny, f"hydra.sweep.dir={sweep}"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    group = records(sweep)[0]["wandb"]["group"]
    (first,) = table_runs(sweep)  # the end-of-sweep table
    run_id = wandb_run_info(first)["run_id"]
    assert run_id == table_run_id(sweep, group)

    # reformatted twice, from another directory and through a path spelled differently
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for args in (["--format", "csv"], ["--format", "latex", "--baseline", "qkv_shared"]):
        table = run_cli([f"../{sweep.name}/", *args], elsewhere, script="ablate-table")
        assert table.returncode == 0, table.stderr[-2000:]
        assert "wandb: table run in" in table.stderr

    (run,) = table_runs(sweep)
    info = wandb_run_info(run)
    assert info["run_id"] == run_id and info["run_group"] == group and info["job_type"] == "table"
    summary = wandb_summary(run)
    assert summary["state"] == "finished"
    assert summary["summary"]["baseline"] == "qkv_shared", "the run holds the latest table"
    assert summary["summary"]["ablation_table"]["nrows"] == 2
