"""Checkpoints inside a job: a job killed mid-training resumes where it stopped, with nothing lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import WarmProcess, records, run_cli, start_cli, wandb_summary

pytestmark = pytest.mark.slow  # every test kills, resumes or relaunches the real `ablate` CLI

ARGS = ["trainer=debug", "model.d_model=16", "model.n_heads=2", "model.n_layers=1", "task.batch_size=8",
        "measure.warmup_steps=2", "trainer.max_steps=60", "eval.every=20", "optim.warmup_steps=5"]


def _start(args: list[str], cwd: Path) -> WarmProcess:
    return start_cli(args, cwd)


def _wait_for(path: Path, process: subprocess.Popen, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def _same_numbers(a: dict, b: dict) -> None:
    for key in ("accuracy", "loss", "early_loss", "final_loss", "steps", "train_flops"):
        assert a[key] == b[key], key
    assert a["history"] == b["history"] and a["eval"] == b["eval"] and a["val"] == b["val"]


def test_a_killed_job_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    whole = run_cli([*ARGS, "logger=none", "hydra.run.dir=whole"], tmp_path)
    assert whole.returncode == 0, whole.stderr[-3000:]
    (uninterrupted,) = records(tmp_path / "whole")

    args = [*ARGS, "checkpoint.every_n_steps=10", "hydra.run.dir=run"]
    process = _start(args, tmp_path)
    _wait_for(tmp_path / "run" / "checkpoints" / "last.ckpt", process)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert not (tmp_path / "run" / "result.json").exists()  # killed: no record, only its checkpoint

    again = run_cli(args, tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    (record,) = records(tmp_path / "run")
    m = record["metrics"]
    assert record["status"] == "ok" and 10 <= m["resumed_from_step"] < 60
    _same_numbers(m, uninterrupted["metrics"])  # nothing lost, nothing trained twice
    assert not (tmp_path / "run" / "checkpoints").exists()  # removed once the job is done

    # one wandb run in one folder: the resumed process logged to the run the killed one had started,
    # the killed attempt's folder moved aside (its history carried over), where `wandb sync` does not look
    (run,) = sorted((tmp_path / "run" / "wandb").glob("offline-run-*"))
    (earlier,) = sorted((tmp_path / "run" / "wandb" / "earlier-attempts").glob("offline-run-*"))
    assert record["wandb"]["id"] == run.name.rsplit("-", 1)[-1] == earlier.name.rsplit("-", 1)[-1]
    assert wandb_summary(record["wandb"]["dir"])["summary"]["steps"] == 60


def test_a_stop_signal_saves_a_checkpoint_and_a_relaunch_finishes(tmp_path: Path) -> None:
    """SIGTERM, what a scheduler sends before it stops or requeues a job (SIGUSR1/SIGUSR2, SLURM's and
    submitit's warnings, take the same path)."""
    signum = signal.SIGTERM
    # enough steps after the first checkpoint (seconds of training) that the signal lands during
    # training (a signal after the last step lets the job finish: it exits 0 with an ok record).
    # Where in a step it lands does not matter: tests/test_stop_signal.py covers that in-process.
    steps = 600
    args = [*ARGS, f"trainer.max_steps={steps}", "eval.every=500", "checkpoint.every_n_steps=50", "logger=none",
            "hydra.run.dir=run"]
    process = _start(args, tmp_path)
    _wait_for(tmp_path / "run" / "checkpoints" / "last.ckpt", process)  # training is under way
    process.send_signal(signum)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 128 + signum, err[-3000:]
    record = json.loads((tmp_path / "run" / "result.json").read_text())
    assert record["status"] == "interrupted" and "checkpoint saved" in record["error"]
    assert (tmp_path / "run" / "checkpoints" / "last.ckpt").is_file()

    again = run_cli([*args, "checkpoint.keep=true"], tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    (record,) = records(tmp_path / "run")
    assert record["status"] == "ok" and record["metrics"]["steps"] == steps
    assert record["metrics"]["resumed_from_step"] > 50  # the checkpoint the signal saved, not the scheduled one
    assert (tmp_path / "run" / "checkpoints" / "last.ckpt").is_file()  # checkpoint.keep=true
    assert os.path.getsize(tmp_path / "run" / "checkpoints" / "last.ckpt") > 0
