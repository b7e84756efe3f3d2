"""Bad input, divergence, failures, resume after SIGKILL, determinism, launchers, wandb unavailable."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

from conftest import cli_env, compose_cfg, records, run_cli, start_cli, wandb_summary

from ablate.config import config_problems

pytestmark = pytest.mark.slow  # every test runs the real `ablate` CLI


def assert_nothing_trained(where: Path) -> None:
    assert not list(where.rglob("result.json")), "no record may be written for an invalid config"
    assert not list(where.rglob("offline-run-*")), "no wandb run may be created for an invalid config"


# what Hydra refuses while composing (the CLI answers with the valid choices), through the real CLI
@pytest.mark.parametrize("args,named", [
    (["qkv_sharing=nonsense"], ["nonsense", "independent", "qk_shared", "qkv_shared"]),
    (["model.foo=1"], ["foo"]),
    (["qkv_sharing=gqa", "qkv_sharing.kv_heads=3"], ["kv_heads=3", "valid: 1, 2, 4"]),  # and one validation
])
def test_bad_input_fails_fast_with_a_clear_message(tmp_path: Path, args: list[str], named: list[str]) -> None:
    started = time.monotonic()
    out = run_cli([*args, "hydra.run.dir=run"], tmp_path)
    assert out.returncode == 2, out.stderr[-2000:]
    for text in named:
        assert text in out.stderr, (text, out.stderr[-2000:])
    assert "Traceback" not in out.stderr
    assert time.monotonic() - started < 30
    assert_nothing_trained(tmp_path)


@pytest.mark.parametrize("command", [["ablate", "-m"], ["ablate", "--plan"], ["ablate-bench"]])
def test_a_misspelt_experiment_exits_2_naming_the_valid_ones(tmp_path: Path, command: list[str]) -> None:
    script, *flags = command
    out = run_cli([*flags, "experiment=qkv_shraing", "trainer=debug", "logger=none",
                   f"hydra.sweep.dir={tmp_path / 'sweep'}"], tmp_path, script=script)
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    for name in ("qkv_shraing", "qkv_sharing", "transformer_pp", "ladder"):
        assert name in out.stderr, (name, out.stderr[-2000:])
    assert "Traceback" not in out.stderr
    assert_nothing_trained(tmp_path)


# what validation refuses: the same check the CLI runs before anything trains, in-process
@pytest.mark.parametrize("args,named", [
    (["model.d_model=30"], ["model.d_model=30", "model.n_heads=4"]),
    (["pos_enc=rope", "model.d_model=12", "model.n_heads=4"], ["even head dimension", "3"]),
    (["pos_enc=learned", "task.eval_lengths=[256]"], ["pos_enc.max_len", "256"]),
    (["task=classify"], ["task.path"]),
    (["optim.lr=-1"], ["optim.lr=-1"]),
])
def test_bad_input_is_named_by_validation(args: list[str], named: list[str]) -> None:
    problems = "\n".join(config_problems(compose_cfg(args)))
    for text in named:
        assert text in problems, (text, problems)


def test_sweep_with_one_invalid_job_trains_nothing(tmp_path: Path, tiny: list[str]) -> None:
    sweep = tmp_path / "sweep"
    out = run_cli(["-m", "model.n_heads=2,3", "model.d_model=16", *tiny[:1], f"hydra.sweep.dir={sweep}"], tmp_path)
    assert out.returncode == 2
    assert "model.n_heads=3" in out.stderr and "not divisible" in out.stderr
    assert_nothing_trained(tmp_path)


def test_divergence_and_failure_are_recorded_and_the_sweep_goes_on(tmp_path: Path, tiny: list[str]) -> None:
    good, short = tmp_path / "good.txt", tmp_path / "short.txt"
    good.write_text("the quick brown fox jumps over the lazy dog. " * 200)
    short.write_text("too short")  # passes validation (the file exists) but holds no full window: fails in setup
    sweep = tmp_path / "sweep"
    out = run_cli(["-m", "task=lm", f"task.path={good},{short}", "task.seq_len=16", "optim.lr=3e-3,1e30",
                   *tiny, "trainer.max_steps=20", f"hydra.sweep.dir={sweep}"], tmp_path)
    assert out.returncode == 1, "a sweep with a failed job exits non-zero"
    recs = {(r["config"]["task"]["path"], r["config"]["optim"]["lr"]): r for r in records(sweep)}
    assert len(recs) == 4
    assert recs[(str(good), 3e-3)]["status"] == "ok"
    diverged = recs[(str(good), 1e30)]
    assert diverged["status"] == "diverged" and diverged["diverged_step"] is not None
    assert diverged["metrics"]["params"] > 0
    for lr in (3e-3, 1e30):
        failed = recs[(str(short), lr)]
        assert failed["status"] == "failed" and failed["error"]
        summary = wandb_summary(failed["wandb"]["dir"])
        assert summary["exit_code"] != 0 and summary["summary"]["status"] == "failed"
    table = (sweep / "table.csv").read_text()
    assert "diverged" in table and "failed" in table


def _sweep_args(sweep: Path, tiny: list[str], steps: int) -> list[str]:
    return ["-m", "qkv_sharing=independent,qk_shared,qkv_shared", *tiny, f"trainer.max_steps={steps}",
            "logger=none", f"hydra.sweep.dir={sweep}"]


def test_relaunch_skips_finished_jobs_and_reruns_missing_ones(tmp_path: Path, tiny: list[str]) -> None:
    sweep = tmp_path / "sweep"
    assert run_cli(_sweep_args(sweep, tiny, 6), tmp_path).returncode == 0
    paths = sorted(sweep.rglob("result.json"))
    stamps = {p: p.stat().st_mtime_ns for p in paths}
    paths[1].unlink()
    (sweep / "table.csv").unlink()
    out = run_cli(_sweep_args(sweep, tiny, 6)[::-1], tmp_path)  # the same overrides in another order
    assert out.returncode == 0
    assert out.stdout.count("already ok") == 2
    assert paths[1].exists() and (sweep / "table.csv").exists()
    for p in (paths[0], paths[2]):
        assert p.stat().st_mtime_ns == stamps[p], "finished jobs are left untouched"


@pytest.mark.timeout(600)
def test_sigkill_mid_job_then_relaunch_completes(tmp_path: Path, tiny: list[str]) -> None:
    sweep = tmp_path / "sweep"
    args = _sweep_args(sweep, tiny, 200)  # 200 steps: over a second a job on any CPU, set-up not counted
    proc = start_cli(args, tmp_path)
    deadline = time.monotonic() + 300
    while not list(sweep.glob("*qkv_sharing=qk_shared*/.hydra")) and time.monotonic() < deadline:
        time.sleep(0.05)  # the second job's directory: it is training once it exists
    time.sleep(0.3)
    (second,) = sweep.glob("*qkv_sharing=qk_shared*")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (second / "result.json").exists(), "killed in the middle of the second job"
    assert len(list(sweep.rglob("result.json"))) < 3, "killed mid-sweep"

    out = run_cli(args, tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    recs = records(sweep)
    assert len(recs) == 3 and {r["status"] for r in recs} == {"ok"}
    assert sorted(tuple(r["overrides"]) for r in recs) == sorted(set(tuple(r["overrides"]) for r in recs))
    assert not list(sweep.rglob("*.tmp"))


def test_same_seed_same_metrics_on_cpu(tmp_path: Path, tiny: list[str]) -> None:
    """Seed 0 in two processes (a single run, and the first job of a sweep) trains the same model; seed
    1 (the sweep's second job, in the same process as seed 0's) another."""
    common = [*tiny, "trainer.max_steps=15", "logger=none"]
    single = run_cli([*common, "seed=0", "hydra.run.dir=a"], tmp_path)
    assert single.returncode == 0, single.stderr[-2000:]
    sweep = run_cli(["-m", *common, "seed=0,1", "hydra.sweep.dir=s"], tmp_path)
    assert sweep.returncode == 0, sweep.stderr[-2000:]
    runs = [*records(tmp_path / "a"), *sorted(records(tmp_path / "s"), key=lambda r: r["config"]["seed"])]
    assert [r["config"]["seed"] for r in runs] == [0, 0, 1]
    metrics = [{k: r["metrics"][k] for k in ("accuracy", "loss", "eval", "params", "memory")} for r in runs]
    assert metrics[0] == metrics[1]
    assert metrics[2]["loss"] != metrics[0]["loss"], "another seed trains another model"


@pytest.mark.parametrize("env", [
    {"WANDB_MODE": "online"},  # no credentials
    # a host that refuses or never answers: tests/test_wandb_dashboard.py (a silent host, a killed first attempt)
])
def test_wandb_unavailable_falls_back_to_offline(tmp_path: Path, tiny: list[str], env: dict[str, str]) -> None:
    out = run_cli([*tiny, "hydra.run.dir=run"], tmp_path, env=cli_env(**env))
    assert out.returncode == 0, out.stderr[-2000:]
    assert "logging offline" in out.stderr
    (record,) = records(tmp_path / "run")
    assert record["status"] == "ok" and "offline-run-" in record["wandb"]["dir"]


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_ddp_keeps_one_record_and_one_wandb_run(tmp_path: Path, tiny: list[str]) -> None:
    out = run_cli([*tiny, "trainer=ddp", "trainer.devices=2", "trainer.max_steps=6", "hydra.run.dir=run"], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert len(records(tmp_path / "run")) == 1
    assert len(list((tmp_path / "run").rglob("offline-run-*"))) == 1


def test_local_multirun_refuses_ddp_before_training(tmp_path: Path) -> None:
    out = run_cli(["-m", "seed=0,1", "trainer=debug", "+trainer.strategy=ddp", f"hydra.sweep.dir={tmp_path / 's'}"],
                  tmp_path)
    assert out.returncode == 2 and "submitit_slurm" in out.stderr
    assert_nothing_trained(tmp_path)


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 4 MiB tmpfs at ``tmp_path/disk``: a real filesystem that fills up (mounting needs root)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {mounted.stderr.decode().strip()}")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(path: Path) -> None:
    """Fill the disk under ``path`` to its last byte (chunks of 64 KiB, then smaller ones): every later
    write fails, a small record's included, however much the job had written by then."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for size in (2**16, 2**12, 2**8, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError as error:
                assert "No space left" in str(error), error
    finally:
        os.close(fd)


def test_a_full_disk_names_the_job_stops_the_sweep_in_one_message_and_a_relaunch_completes(
        tmp_path: Path, tiny: list[str], small_disk: Path) -> None:
    sweep = small_disk / "sweep"
    args = ["-m", "seed=0,1", *tiny, "trainer.max_steps=200", "checkpoint.every_n_steps=50", "logger=none",
            f"hydra.sweep.dir={sweep}"]
    proc = start_cli(args, tmp_path)
    deadline = time.monotonic() + 180
    while not list(sweep.glob("*seed=0*/checkpoints/last.ckpt")) and time.monotonic() < deadline:
        time.sleep(0.02)  # the first job is training (its first checkpoint written): the disk fills up under it
    filler = small_disk / "filler"
    fill(filler)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 1, err[-3000:]
    (first,) = [line for line in err.splitlines() if "its record could not be written" in line] or [err[-3000:]]
    assert "seed=0" in first and "No space left on device" in first, first
    assert "ablate: the sweep stopped: OSError: [Errno 28] No space left on device" in err
    assert "Traceback" not in err and "Logging error" not in err, err[-3000:]

    filler.unlink()
    out = run_cli(args, tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert [r["status"] for r in records(sweep)] == ["ok", "ok"]
