"""Every sweep ends in its table: each artefact of the sweep's end is written on its own, and a part
that fails is named in one line with the command that redoes the end alone; the sweep exits 1."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import records, run_cli, tiny  # noqa: F401 - tiny is a fixture
from test_table import qkv_records, write_sweep

from ablate.report import build_table
from ablate.report.cli import main as ablate_table
from ablate.report.publish import publish, redo_command
from ablate.report.webpage import REPORT_FILE


def _blocked(sweep: Path, name: str) -> None:
    """A directory where the file ``name`` goes: writing that file fails, as on a real disk."""
    (sweep / name).mkdir(parents=True)
    (sweep / name / "keep").write_text("a directory a user left here\n")


@pytest.mark.parametrize("blocked", ["table.md", "table.png", REPORT_FILE])
def test_one_failing_artefact_costs_only_itself(tmp_path: Path, blocked: str) -> None:
    sweep = write_sweep(tmp_path / "sweep", qkv_records())
    _blocked(sweep, blocked)
    done = publish(build_table(qkv_records()), qkv_records(), sweep)
    assert len(done.problems) == 1 and done.problems[0].startswith(f"{blocked} (IsADirectoryError"), done.problems
    expected = {"table.md", "table.tex", "table.csv", "table.png", REPORT_FILE} - {blocked}
    assert expected <= {p.name for p in done.written.values()}, done.written
    assert all(p.is_file() for p in done.written.values())
    assert (sweep / blocked / "keep").is_file()  # nothing a user left is lost


def test_ablate_table_redoes_the_end_and_names_a_failure_in_one_line(tmp_path: Path, capsys) -> None:
    sweep = write_sweep(tmp_path / "sweep", qkv_records())
    _blocked(sweep, REPORT_FILE)
    assert ablate_table([str(sweep), "--save", "--html", "--no-wandb"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith(f"ablate-table: cannot write into {sweep}: {REPORT_FILE} ("), err
    assert (sweep / "table.csv").is_file()
    (sweep / REPORT_FILE / "keep").unlink()
    (sweep / REPORT_FILE).rmdir()
    assert ablate_table([str(sweep), "--save", "--html", "--no-wandb"]) == 0
    assert (sweep / REPORT_FILE).is_file()


def test_the_redo_command_quotes_its_directory() -> None:
    assert redo_command(Path("/tmp/a b")) == "ablate-table '/tmp/a b' --save --html"
    assert redo_command("/tmp/s", wandb=True) == "ablate-table /tmp/s --save --html --wandb"


@pytest.mark.slow
def test_a_sweep_whose_end_fails_exits_1_naming_the_part_and_the_command(tmp_path: Path, tiny: list[str]) -> None:
    """Through the real CLI: the report cannot be written (a directory stands where it goes); the
    table files (and the table in the sweep's TensorBoard) still are, the sweep exits 1 with one line naming report.html and the command, and
    that command, once the way is clear, writes the report."""
    sweep = tmp_path / "sweep"
    _blocked(sweep, REPORT_FILE)
    out = run_cli(["-m", *tiny, "logger=tensorboard", "trainer.max_steps=20", "qkv_sharing=independent,qk_shared",
                   f"hydra.sweep.dir={sweep}"], tmp_path)
    assert out.returncode == 1, out.stderr[-3000:]
    assert [r["status"] for r in records(sweep)] == ["ok", "ok"]
    (line,) = [ln for ln in out.stderr.splitlines() if "the sweep's end could not write" in ln] or [out.stderr[-3000:]]
    assert f"{REPORT_FILE} (IsADirectoryError" in line and redo_command(sweep) in line, line
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    assert {"table.md", "table.csv", "table.png"} <= {p.name for p in sweep.iterdir()}
    assert list((sweep / "tensorboard" / "table").glob("events.out.tfevents.*"))  # the loggers' table too
    (sweep / REPORT_FILE / "keep").unlink()
    (sweep / REPORT_FILE).rmdir()
    redo = run_cli(redo_command(sweep).split()[1:], tmp_path, script="ablate-table")
    assert redo.returncode == 0, redo.stderr[-3000:]
    assert (sweep / REPORT_FILE).is_file()
