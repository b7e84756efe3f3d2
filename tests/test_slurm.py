"""A sweep through `hydra/launcher=submitit_slurm` on a real one-node SLURM cluster on this machine
(scripts/local_slurm.sh: munged, slurmdbd, slurmctld, slurmd; real sbatch and sacct, real submitit).

Skipped, with the script's reason, where the cluster cannot start (not Linux, not root and not
already running, no apt-get to install SLURM, a daemon that fails); ABLATE_REQUIRE_SLURM=1 makes
that a failure instead (for machines that are meant to have it)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from datetime import datetime
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import QUIET, REPO, cli_env, records, run_cli, start_cli

from ablate.compose import tiny_overrides

pytestmark = pytest.mark.slow  # a local SLURM cluster and sweeps through the `ablate` CLI

SCRIPT = REPO / "scripts" / "local_slurm.sh"


def local_slurm(command: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), command], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def slurm_env() -> Iterator[dict[str, str]]:
    """The environment that points SLURM's commands (and submitit's) at the local cluster; starts the
    cluster for this module and stops it after, unless it already ran."""
    already = local_slurm("status").returncode == 0
    if not already:
        started = local_slurm("start", timeout=600)  # the first start installs the packages
        if started.returncode != 0:
            local_slurm("stop")  # what did start
            reason = (started.stderr.strip() or started.stdout.strip() or "no output").splitlines()
            message = f"no local SLURM cluster (scripts/local_slurm.sh start): {' '.join(reason[-3:])}"
            if os.environ.get("ABLATE_REQUIRE_SLURM") == "1":
                pytest.fail(message)
            pytest.skip(message)
    (conf,) = re.findall(r"SLURM_CONF=(\S+)", local_slurm("env").stdout)
    yield cli_env(SLURM_CONF=conf)
    if not already:
        local_slurm("stop")


def sacct_tasks(array_id: str, env: dict[str, str]) -> dict[str, dict[str, str]]:
    """The accounting of a job array's tasks: ``{"<array>_<i>": {State, NodeList, Start, End}}``."""
    out = subprocess.run(["sacct", "-X", "-n", "-P", "-j", array_id, "-o", "JobID,State,NodeList,Start,End"],
                         env=env, capture_output=True, text=True, timeout=30, check=True).stdout
    keys = ("State", "NodeList", "Start", "End")
    return {line.split("|")[0]: dict(zip(keys, line.split("|")[1:])) for line in out.splitlines() if line}


def test_a_sweep_runs_as_slurm_jobs_and_ends_in_its_table(tmp_path: Path, tiny: list[str],
                                                          slurm_env: dict[str, str]) -> None:
    """3 variants, one SLURM array task each (1 CPU, the node's default memory share): on a 2-CPU node
    the third waits for a free CPU."""
    sweep = tmp_path / "sweep"
    out = run_cli(["-m", "qkv_sharing=independent,qk_shared,qkv_shared", *tiny, "logger=none",
                   "hydra/launcher=submitit_slurm", "hydra.launcher.partition=local",
                   "hydra.launcher.cpus_per_task=1", "hydra.launcher.timeout_min=5",
                   f"hydra.sweep.dir={sweep}"], tmp_path, env=slurm_env, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "Bypassing sacct error" not in out.stdout + out.stderr, "submitit could not read the jobs' states"

    recs = records(sweep)
    assert len(recs) == 3 and {r["status"] for r in recs} == {"ok"}, [r["error"] for r in recs]
    for r in recs:
        assert r["job"]["launcher"] == "submitit_slurm"
        assert r["metrics"]["torch_threads"] == 1, "torch follows the job's SLURM_CPUS_PER_TASK"
        slurm = r["job"]["slurm"]  # the job's SLURM_* variables
        assert slurm["job_id"] and slurm["restart_count"] == 0 and slurm["partition"] == "local"
    table = (sweep / "table.md").read_text()
    assert table.count("| 1 ok |") == 3, table

    # each record was written by one task of one SLURM job array, which sacct knows as completed
    folders = sorted(p for p in (sweep / ".submitit").iterdir() if re.fullmatch(r"\d+_\d+", p.name))
    assert len(folders) == 3, folders
    (array_id,) = {p.name.split("_")[0] for p in folders}
    for r in recs:
        (task,) = [p.name for p in folders if r["job"]["dir"] in (p / f"{p.name}_0_log.out").read_text()]
        log = "".join(p.read_text() for p in (sweep / ".submitit" / task).glob("*_log.*"))
        assert f"JobEnvironment(job_id={task}," in log, "submitit saw the task's SLURM job id in its environment"
    tasks = sacct_tasks(array_id, slurm_env)
    assert sorted(tasks) == [p.name for p in folders]
    assert {t["State"] for t in tasks.values()} == {"COMPLETED"}, tasks
    node, cpus = subprocess.run(["sinfo", "-h", "-o", "%N %c"], env=slurm_env, capture_output=True, text=True,
                                check=True).stdout.split()
    assert {t["NodeList"] for t in tasks.values()} == {node}

    # one-CPU jobs share the node: two ran at once (a job that asks for no memory does not take it all)
    spans = sorted((datetime.fromisoformat(t["Start"]), datetime.fromisoformat(t["End"])) for t in tasks.values())
    if int(cpus) >= 2:
        assert any(b[0] < a[1] for a, b in zip(spans, spans[1:])), spans


def test_a_requeued_job_resumes_from_its_checkpoint(tmp_path: Path, tiny: list[str],
                                                    slurm_env: dict[str, str]) -> None:
    """`scontrol requeue` (what preemption does): SLURM sends SIGTERM, the job saves a checkpoint and
    stops, SLURM starts it again, and it resumes there: the same steps, nothing trained twice."""
    sweep = tmp_path / "sweep"
    # 300 steps (seconds of training) after the first checkpoint: the requeue, sent as soon as that
    # checkpoint appears, lands during training; the resumed attempt trains the rest
    process = start_cli(
        ["-m", "seed=0", *tiny, "trainer.max_steps=350", "checkpoint.every_n_steps=50",
         "logger=none", "hydra/launcher=submitit_slurm", "hydra.launcher.partition=local",
         "hydra.launcher.cpus_per_task=1", "hydra.launcher.timeout_min=5", f"hydra.sweep.dir={sweep}"],
        tmp_path, env=slurm_env)
    deadline = time.monotonic() + 120
    while not list(sweep.glob("*/checkpoints/last.ckpt")):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()[1][-3000:]
        time.sleep(0.1)
    (job_id,) = subprocess.run(["squeue", "-h", "-o", "%i"], env=slurm_env, capture_output=True, text=True,
                               check=True).stdout.split()
    subprocess.run(["scontrol", "requeue", job_id], env=slurm_env, check=True)
    out, err = process.communicate(timeout=240)
    assert process.returncode == 0, out[-2000:] + err[-3000:]

    (record,) = records(sweep)
    assert record["status"] == "ok" and record["metrics"]["steps"] == 350
    assert record["metrics"]["resumed_from_step"] >= 50  # resumed from a checkpoint, not restarted
    logs = "".join(p.read_text() for p in (sweep / ".submitit").rglob("*_log.*"))
    stopped = re.findall(r"stopped by signal 15 at step (\d+); checkpoint saved", logs)
    if stopped:  # the first attempt's log survives the requeue where SLURM appends to it
        assert record["metrics"]["resumed_from_step"] == int(stopped[-1])  # the checkpoint SIGTERM made
    assert record["job"]["slurm"]["restart_count"] == 1
    states = subprocess.run(["sacct", "-n", "-P", "-D", "-X", "-j", job_id.split("_")[0], "-o", "State"],
                            env=slurm_env, capture_output=True, text=True, check=True).stdout.split()
    assert "REQUEUED" in states and states[-1] == "COMPLETED", states


def test_the_fine_tune_stage_runs_as_slurm_jobs_after_its_pretraining(tmp_path: Path, slurm_env: dict[str, str]) -> None:
    """Pretrain (masked LM, 2 seeds), then fine-tune each checkpoint, every job a SLURM array task:
    the fine-tunes start once the pretraining has ended and name the job they started from."""
    sweep = tmp_path / "sweep"
    classify = REPO / "tests" / "fixtures" / "classify"
    out = run_cli(["-m", "seed=0,1", *tiny_overrides(*QUIET, "task=mlm", "task.seq_len=32"), "eval.every=0",
                   "measure.memory=false", "finetune.tasks=[classify]", "finetune.steps=4", "finetune.seq_len=32",
                   f"+finetune.settings.classify.path={classify}", "hydra/launcher=submitit_slurm",
                   "hydra.launcher.partition=local", "hydra.launcher.cpus_per_task=1", "hydra.launcher.timeout_min=5",
                   f"hydra.sweep.dir={sweep}"], tmp_path, env=slurm_env, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    recs = records(sweep)
    assert {r["status"] for r in recs} == {"ok"}, [r["error"] for r in recs]
    pre = {r["job"]["dir"]: r for r in recs if r["stage"] == "pretrain"}
    fine = [r for r in recs if r["stage"] == "finetune"]
    assert len(pre) == 2 and len(fine) == 2
    for r in fine:
        assert r["job"]["launcher"] == "submitit_slurm" and r["job"]["slurm"]["job_id"]
        started_from = pre[r["finetune"]["from_job"]]
        assert r["finetune"]["checkpoint"] == started_from["finetune"]["checkpoint"]
        assert r["job"]["started_at"] >= max(p["job"]["started_at"] + p["metrics"]["wall_time_s"] for p in pre.values())
    assert "classify" in (sweep / "table.md").read_text()


def test_seed_rounds_run_as_slurm_job_arrays(tmp_path: Path, slurm_env: dict[str, str]) -> None:
    """``seed=auto``: each round is one SLURM job array of the undecided rows' next seeds (the
    sweeper's stage, as tuning and fine-tuning are), and the sweep ends in one table."""
    from test_rounds_sweep import _check_rounds, _sweep

    sweep, args = _sweep(tmp_path, "rounds", "logger=none", "hydra/launcher=submitit_slurm",
                         "hydra.launcher.partition=local", "hydra.launcher.cpus_per_task=1",
                         "hydra.launcher.timeout_min=5", variants="independent,qk_shared")
    out = run_cli(args, tmp_path, env=slurm_env, timeout=400)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    plan = _check_rounds(sweep)
    assert {r["job"]["launcher"] for r in records(sweep)} == {"submitit_slurm"}
    arrays = {p.name.split("_")[0] for p in (sweep / ".submitit").iterdir() if re.fullmatch(r"\d+_\d+", p.name)}
    assert len(arrays) == plan["rounds"]["run"], "one job array per round"
