"""Job directories of a sweep: one flat, safe, stable directory per job, whatever the overrides.

Hydra's default ``override_dirname`` crashes on a sweep of ~20 keys (file name too long), nests
directories for a path override and puts glob characters into names for a list override; the
sweep's ``subdir`` is ``ablate.sweep.job_dir_name`` instead. Through the real ``ablate`` CLI.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import records, run_cli, wandb_summary

from ablate.job import cpu_cores
from ablate.jobdir import job_dir_name

# 24 real keys of the config, each set to one value (their defaults, or tiny sizes)
SINGLE_VALUED = [
    "trainer=debug", "logger=none", "model.d_model=16", "model.n_heads=2", "model.n_layers=1",
    "model.dropout=0.0", "model.bias=false", "task.batch_size=8", "task.seq_len=32", "task.val_fraction=0.1",
    "task.n_test=64", "measure.warmup_steps=2", "measure.memory=true", "optim.lr=0.003",
    "optim.weight_decay=0.01", "optim.warmup_steps=2", "optim.min_lr_ratio=0.1", "trainer.max_steps=4",
    "trainer.gradient_clip_val=1.0", "trainer.log_every_n_steps=1", "norm.eps=1e-05", "norm.placement=pre",
    "ffn.mult=2", "init.std=0.02",
]


LAUNCHER_ARGS = {"basic": [], "joblib": ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"],
                 "submitit_local": ["hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10"]}


def job_dirs(sweep: Path) -> list[Path]:
    """The directories holding a record, checked to be direct children of the sweep with safe names."""
    dirs = [Path(r["job"]["dir"]) for r in records(sweep)]
    for d in dirs:
        assert d.parent == sweep, f"{d} is not a direct child of {sweep}"
        assert len(d.name.encode()) <= 255 and not set(d.name) & set("/[]*?"), d.name
        assert (d / ".hydra" / "overrides.yaml").is_file()
    return dirs


@pytest.mark.slow
def test_sweep_of_25_keys(tmp_path: Path) -> None:
    assert len(SINGLE_VALUED) == 24 and len({o.split("=")[0] for o in SINGLE_VALUED}) == 24
    sweep = tmp_path / "sweep"
    args = ["-m", "seed=0,1", *SINGLE_VALUED, f"hydra.sweep.dir={sweep}"]
    assert len(",".join(SINGLE_VALUED)) > 255, "Hydra's override_dirname would not fit a file name"
    out = run_cli(args, tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    recs = records(sweep)
    assert len(recs) == 2 and {r["status"] for r in recs} == {"ok"}
    dirs = job_dirs(sweep)
    assert len(set(dirs)) == 2
    for r in recs:  # the record keeps every override, whatever the directory's name
        assert {o.split("=")[0] for o in r["overrides"]} == {o.split("=")[0] for o in SINGLE_VALUED} | {"seed"}

    # relaunched into the same directory: both jobs are found finished, in the same directories
    again = run_cli(args, tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("already ok") == 2
    assert job_dirs(sweep) == dirs and len(records(sweep)) == 2


def same_named_files(root: Path, n: int) -> list[Path]:
    """``n`` text files of the same name in nested directories (``root/data/<i>/deeper/train.txt``)."""
    text = "the quick brown fox jumps over the lazy dog. " * 300
    paths = []
    for i in range(n):
        path = root / "data" / chr(ord("a") + i) / "deeper" / "train.txt"
        path.parent.mkdir(parents=True)
        path.write_text(text)
        paths.append(path)
    return paths


def path_sweep(paths: list[Path], sweep: Path) -> list[str]:
    """A sweep over ``task.path`` (and an evaluation at another length, to check every length's record)."""
    return ["-m", "task=lm", f"task.path={','.join(map(str, paths))}", "pos_enc=rope", "task.eval_lengths=[128]",
            "task.seq_len=32", f"hydra.sweep.dir={sweep}"]


def check_path_sweep(sweep: Path, paths: list[Path], launcher: str) -> list[dict]:
    """What a launcher owes each job of a :func:`path_sweep`: its own directory named from the path
    overrides, one record and one wandb run, its share of the cores, where its time went."""
    recs = records(sweep)
    assert len(recs) == len(paths) and {r["status"] for r in recs} == {"ok"}
    assert {r["config"]["task"]["path"] for r in recs} == {str(p) for p in paths}
    assert all("128" in r["metrics"]["eval"] for r in recs)
    dirs = job_dirs(sweep)
    assert len(set(dirs)) == len(paths)
    assert {p for p in sweep.iterdir() if p.is_dir() and not p.name.startswith(".")} - {sweep / "wandb"} == set(dirs)

    assert len({r["wandb"]["dir"] for r in recs}) == len(paths)
    for r in recs:
        assert wandb_summary(r["wandb"]["dir"])["summary"]["status"] == "ok"
        if launcher == "joblib":  # two jobs at once share the cores
            assert r["metrics"]["torch_threads"] == max(1, cpu_cores() // 2)
        # where the job's time went: its process's start, then each phase (scripts/bench_startup.py)
        assert r["job"]["process_started_at"] <= r["job"]["started_at"]
        phases = r["metrics"]["time_s"]
        assert set(phases) == {"validate", "wandb_init", "setup", "memory", "fit", "steps", "test"}
        assert all(v >= 0 for v in phases.values()) and phases["steps"] <= phases["fit"]
    if launcher == "submitit_local":  # a process per job
        assert len({r["job"]["process_started_at"] for r in recs}) == len(paths)
    assert (sweep / "table.csv").exists()
    return recs


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["basic", "joblib"])
def test_path_and_list_overrides_under_every_launcher(tmp_path: Path, tiny: list[str], launcher: str) -> None:
    """Hydra names the job directory in the process that runs the job: the resolver must be
    there for every launcher (joblib workers and submitit jobs get it with Hydra's state). The same
    sweep checks what a parallel launcher owes each job (:func:`check_path_sweep`). The
    submitit_local case is tests/test_launchers.py's cores test, whose sweep is this one."""
    paths = same_named_files(tmp_path, 2)  # the same file name in two nested directories
    sweep = tmp_path / "sweep"
    out = run_cli([*path_sweep(paths, sweep), *tiny, *LAUNCHER_ARGS[launcher]], tmp_path, timeout=400)
    assert out.returncode == 0, out.stderr[-3000:]
    check_path_sweep(sweep, paths, launcher)


# --- job_dir_name -------------------------------------------------------------------------------

SAFE = re.compile(r"[A-Za-z0-9._=,+-]+")


def check_name(name: str) -> str:
    assert SAFE.fullmatch(name), name
    assert len(name.encode()) <= 200 and not name.startswith((".", "-")), name
    return name


def test_short_safe_overrides_read_as_before() -> None:
    # as Hydra's override_dirname (sorted, experiment= left out): existing sweeps keep their layout
    assert job_dir_name(["seed=1", "qkv_sharing=qk_shared", "experiment=qkv_sharing"]) == "qkv_sharing=qk_shared,seed=1"
    assert job_dir_name([]) == job_dir_name(["experiment=x"]) == "defaults"


def test_unique_when_only_replaced_characters_differ() -> None:
    variants = [["task.path=/a/b"], ["task.path=/a_b"], ["task.path=_a_b"], ["task.path=/a b"], ["task.path=/a?b"],
                ["task.eval_lengths=[1,2]"], ["task.eval_lengths=[1],[2]"], ["task.eval_lengths=(1,2)"],
                ["a=1,b=2"], ["a=1", "b=2"], ["~model.bias"], ["+model.bias=1"], ["++model.bias=1"]]
    names = [check_name(job_dir_name(v)) for v in variants]
    assert len(set(names)) == len(names), names
    assert re.fullmatch(r"task\.path=_a_b-[0-9a-f]{8}", names[0])


def test_deterministic() -> None:
    overrides = ["task.path=/data/x/train.txt", "seed=3", "task.eval_lengths=[256,512]", "pos_enc=rope"]
    name = job_dir_name(overrides)
    assert job_dir_name(list(reversed(overrides))) == name  # the command line's order does not matter
    assert job_dir_name(overrides + ["experiment=pos_enc"]) == name
    assert name == check_name(name) and "pos_enc=rope" in name and "seed=3" in name


@pytest.mark.parametrize("overrides", [
    [f"model.key_{i}=value_{i}" for i in range(200)],
    ["task.path=/" + "very/long/path/" * 100 + "train.txt"],
    ["model." + "k" * 300 + "=1"],
    ["a=" + "é" * 300],
    [".hidden=1"], ["-x=1"],
])
def test_length_and_characters_bounded(overrides: list[str]) -> None:
    name = check_name(job_dir_name(overrides))
    assert re.search(r"-[0-9a-f]{8}$", name)
    changed = overrides[:-1] + [overrides[-1] + "0"]
    assert job_dir_name(changed) != name


def test_long_sweep_names_keep_what_tells_jobs_apart() -> None:
    base = [*SINGLE_VALUED]
    a, b = job_dir_name([*base, "seed=0"]), job_dir_name([*base, "seed=1"])
    assert a != b and len(a) <= 200 and len(b) <= 200
    tiny = ["trainer=debug", "model.d_model=16", "model.n_heads=2", "model.n_layers=1", "task.batch_size=8",
            "measure.warmup_steps=2", "logger=none", "trainer.max_steps=1000"]
    assert "qkv_sharing=qk_shared" in job_dir_name([*tiny, "qkv_sharing=qk_shared"])
