"""Hostile input: every bad value gets a clear answer naming it, before anything trains.

The property test feeds wrong-typed values to every leaf key of the default config and of each
task's config and checks that validation names the key (and never raises); the CLI tests run the
cases users actually hit through the real `ablate`: exit 2, the key named, no record, no traceback.
"""

from __future__ import annotations

import copy
import csv
import functools
import io
import json
import random
from pathlib import Path
from typing import Any, Iterator

import pytest
from conftest import builtin_options, compose_cfg, records, run_cli
from omegaconf import OmegaConf

from ablate.config import config_problems

FIXTURES = Path(__file__).parent / "fixtures"
TASK_PATHS = {"classify": FIXTURES / "classify", "tagging": FIXTURES / "tagging", "glue": FIXTURES / "glue_sst2",
              "seq2seq_file": FIXTURES / "seq2seq_file"}
BASE = ["trainer=debug", "logger=none", "model.d_model=16", "model.n_heads=2", "model.n_layers=1"]



def task_overrides(task: str) -> list[str]:
    return [f"task={task}"] + ([f"task.path={TASK_PATHS[task]}"] if task in TASK_PATHS else [])


def leaves(node: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from leaves(value, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix, node


def wrong_values(value: Any, rng: random.Random) -> list[Any]:
    """Two values of a type the key does not take, drawn at random from the candidates."""
    if isinstance(value, bool):
        candidates = ["abc", 2, [True], {"a": 1}]
    elif isinstance(value, int):
        candidates = ["abc", 1.5, True, [1], {"a": 1}]
    elif isinstance(value, float):
        candidates = ["abc", True, [1.0], {"a": 1}, float("nan")]
    elif isinstance(value, str):
        candidates = [[1], 3, {"a": 1}] if not value.startswith("ablate.") else [3, "no.such.Class"]
    elif isinstance(value, list):
        candidates = ["abc", 5, [[1]], [{"a": 1}]]  # ["abc"] would be right for a list of strings (logger.tags)
    elif value is None:  # str, number, list or mapping when set: no scalar is wrong for all of them
        candidates = [[1], {"a": 1}, [{"b": 2}]]
    else:  # an empty mapping (experiment.labels)
        candidates = ["abc", 5, [1]]
    return rng.sample(candidates, 2)


def keys_named(problems: list[str], key: str) -> bool:
    short = key.split(".", 1)[-1]
    return any(key in p or f"{short}=" in p or f".{short}" in p or f"`{short}`" in p for p in problems)


#: the configs whose leaves are fed wrong types: the default config, and each task's node (a glue_*
#: task is task=glue with its name set: glue's keys)
CONFIGS = ["default", *(task for task in builtin_options("task") if not task.startswith("glue_"))]


@functools.cache
def _composed(overrides: tuple[str, ...]) -> Any:
    return compose_cfg(list(overrides))


def _overrides(config: str) -> tuple[str, ...]:
    return () if config == "default" else tuple(task_overrides(config))


@functools.cache
def cases(config: str) -> list[tuple[str, Any]]:
    """(leaf key, wrong value) for every leaf of ``config`` (one of :data:`CONFIGS`): two wrong values
    a key, drawn by a generator seeded by the config's name. Composed when a test asks, not at
    collection (a Hydra composition per task, seconds in every test process)."""
    rng = random.Random(f"20261129-{config}")
    if config == "default":
        default = OmegaConf.to_container(_composed(()), resolve=True)
        keys = [(key, value) for key, value in leaves(default)
                if not key.startswith("task.") and key != "model.causal"]  # model.causal follows task.causal
    else:
        node = OmegaConf.to_container(_composed(_overrides(config)).task, resolve=True)
        keys = [(key, value) for key, value in leaves(node, "task")
                if key != "task.name" or config == "glue"]  # a label, free text
    return [(key, bad) for key, value in keys for bad in wrong_values(value, rng)]


@pytest.mark.slow  # 300+ validations, one Hydra composition per config (each case gets its own copy)
@pytest.mark.parametrize("config", CONFIGS)
def test_every_leaf_key_refuses_a_wrong_type_by_name(config: str) -> None:
    missed = []
    for key, bad in cases(config):
        cfg = copy.deepcopy(_composed(_overrides(config)))
        OmegaConf.update(cfg, key, bad, force_add=True, merge=False)
        problems = config_problems(cfg)  # never raises
        if not problems:
            missed.append(f"{key}={bad!r} was accepted")
        elif not keys_named(problems, key):
            missed.append(f"{key}={bad!r} not named in {problems}")
    assert cases(config) and not missed, "\n".join(missed)


@pytest.mark.slow  # seconds: a Hydra composition per task
def test_every_task_validates_with_its_defaults() -> None:
    for task in builtin_options("task"):
        problems = config_problems(compose_cfg(task_overrides(task)))
        assert all("datasets" in p for p in problems), (task, problems)  # glue without task.path: the hub


# ---------------------------------------------------------------------------- through the CLI

BAD_SINGLE_RUNS = {
    "task.eval_lengths=128": "task.eval_lengths",
    "task.eval_lengths=[abc]": "task.eval_lengths",
    "model.dropout=abc": "model.dropout='abc'",
    "init.std=-1": "init.std=-1 must be > 0",
    "model.d_model=16.9": "model.d_model=16.9 must be an integer",
    "model.d_model=64.5 model.n_heads=1": "model.d_model=64.5 must be an integer",
    "measure.warmup_steps=-1": "measure.warmup_steps=-1 must be >= 0",
    "seed=-1": "seed=-1 must be >= 0",
    "seed=abc": "seed='abc' must be an integer",
    f"seed={2**70}": f"seed={2**70} must be >= 0 and <= {2**32 - 1}",
    "optim.lr=nan": "optim.lr=nan must be a finite number",
    "optim.lr=inf": "optim.lr=inf must be a finite number",
    "+dry_run=true": "dry_run: not a key of the config",
    "trainer.devices=abc": "devices",
    "+callbacks.monitor._target_=no_such.Monitor": "callbacks.monitor._target_='no_such.Monitor' cannot be imported",
}


@pytest.mark.slow  # a Hydra composition per case (in-process: the CLI runs the same validation, below)
@pytest.mark.parametrize("args,named", BAD_SINGLE_RUNS.items(), ids=list(BAD_SINGLE_RUNS))
def test_bad_value_is_refused_naming_it(args: str, named: str) -> None:
    problems = config_problems(compose_cfg([*BASE, *args.split()]))
    assert any(named in p for p in problems), problems


# one bad value in each node at once: the CLI names every one of them in one answer
BAD_AT_ONCE = ["seed=abc", "optim.lr=nan", "measure.warmup_steps=-1", "init.std=-1", "+dry_run=true",
               "model.dropout=abc", "task.eval_lengths=[abc]", "trainer.devices=abc",
               "+callbacks.monitor._target_=no_such.Monitor"]


@pytest.mark.slow
def test_bad_values_through_the_cli_exit_2_naming_each(tmp_path: Path) -> None:
    out = run_cli([*BASE, *BAD_AT_ONCE, "hydra.run.dir=run"], tmp_path)
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
    for args in BAD_AT_ONCE:
        assert BAD_SINGLE_RUNS[args] in out.stderr, (args, out.stderr[-3000:])
    assert not (tmp_path / "run" / "result.json").exists()


@pytest.mark.slow
@pytest.mark.parametrize("sweep,named", [("init.std=0.02,-1", "init.std=-1 must be > 0")])
def test_sweep_with_one_bad_job_trains_nothing(tmp_path: Path, sweep: str, named: str) -> None:
    out = run_cli(["-m", *BASE, sweep, f"hydra.sweep.dir={tmp_path / 'sweep'}"], tmp_path)
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    assert "nothing was trained" in out.stderr and named in out.stderr, out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    assert records(tmp_path / "sweep") == []


@pytest.mark.slow  # a Hydra composition
def test_empty_lm_corpus_is_named(tmp_path: Path) -> None:
    (tmp_path / "empty.txt").write_text("")
    problems = config_problems(compose_cfg([*BASE, f"task.path={tmp_path / 'empty.txt'}"]))
    assert any("empty.txt' is empty" in p for p in problems), problems


def _classify_dir(tmp_path: Path, train: bytes) -> Path:
    d = tmp_path / "data"
    d.mkdir()
    (d / "train.tsv").write_bytes(train)
    (d / "dev.tsv").write_bytes(b"sentence\tlabel\ngood film\t1\nbad film\t0\n")
    return d


BAD_TRAIN_FILES = {
    "a quoted tab": (b'sentence\tlabel\ngood film\t1\n"a quoted\ttab"\t0\n',
                     "train.tsv, line 3: 3 tab-separated fields but the header has 2"),
    "not UTF-8": (b"sentence\tlabel\ngood film\t1\nb\xffd film\t0\n", "train.tsv, line 3: not valid UTF-8"),
}


def _classify_task(data: Path):
    from ablate.data import build_task

    return build_task(compose_cfg([*BASE, "task=classify", f"task.path={data}", "task.seq_len=16"]).task)


@pytest.mark.slow  # a Hydra composition per case
@pytest.mark.parametrize("case", BAD_TRAIN_FILES)
def test_a_bad_data_file_is_named_with_its_line(tmp_path: Path, case: str) -> None:
    train, message = BAD_TRAIN_FILES[case]
    with pytest.raises(Exception, match=message.replace("(", r"\(")):
        _classify_task(_classify_dir(tmp_path, train)).setup()


@pytest.mark.slow
def test_a_bad_data_file_fails_the_job_through_the_cli(tmp_path: Path) -> None:
    train, message = BAD_TRAIN_FILES["not UTF-8"]
    data = _classify_dir(tmp_path, train)
    out = run_cli([*BASE, "task=classify", f"task.path={data}", "task.seq_len=16", "hydra.run.dir=run"], tmp_path)
    assert out.returncode == 1, out.stderr[-2000:]
    (record,) = records(tmp_path / "run")
    assert record["status"] == "failed" and message in record["error"], record["error"]
    assert record["metrics"].get("steps") is None  # failed before training


@pytest.mark.slow  # a Hydra composition
def test_utf8_bom_in_a_tsv_header_is_dropped(tmp_path: Path) -> None:
    task = _classify_task(_classify_dir(tmp_path, b"\xef\xbb\xbfsentence\tlabel\ngood film\t1\nbad film\t0\n"))
    task.setup()  # the header is "sentence", not "\ufeffsentence": no missing column
    assert task.n_classes == 2


# ---------------------------------------------------------------------------- sweeps and records

@pytest.mark.slow
def test_relaunch_with_other_overrides_is_refused_unless_redefined(tmp_path: Path, tiny: list[str]) -> None:
    sweep = tmp_path / "sweep"
    first = ["-m", *tiny, "logger=none", f"hydra.sweep.dir={sweep}", "qkv_sharing=independent,qk_shared"]
    assert run_cli(first, tmp_path).returncode == 0
    other = [*first, "model.n_layers=2"]
    out = run_cli(other, tmp_path)
    assert out.returncode == 2 and "holds another sweep" in out.stderr and "--redefine" in out.stderr, out.stderr
    assert len(records(sweep)) == 2  # nothing trained, nothing lost
    out = run_cli(["--redefine", *other], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert len(records(sweep)) == 4
    table = run_cli([str(sweep), "--format", "csv", "--no-wandb"], tmp_path, script="ablate-table")
    rows = list(csv.DictReader(io.StringIO(table.stdout)))
    assert len(rows) == 2 and all(r["n"] == "1" and r["status"] == "1 ok" for r in rows), table.stdout
    assert "leaving out 2 record(s)" in table.stderr
    # After --redefine the directory holds the new definition, so the original command is refused in
    # turn, and an unreadable sweep.json does not switch the guard off: the same claim_directory
    # refusal (exit 2, one line) that the relaunch above went through; tests/test_planner.py
    # (test_a_relaunch_of_the_same_sweep_claims_its_directory_again, ..._refuses_another_definition)
    # checks both in process.
    definition = json.loads((sweep / "sweep.json").read_text())["definition"]
    assert definition and all("model.n_layers=2" in job for job in definition)  # the redefinition is recorded


@pytest.mark.slow
def test_a_stop_during_set_up_and_ctrl_c_record_interrupted_without_a_traceback(tmp_path: Path, tiny: list[str]) -> None:
    """SIGTERM while the job's wandb run starts (before training: the handlers cover the whole set-up),
    then, relaunched, Ctrl-C during training: each exits 128 + the signal with one line and no
    traceback, the record says interrupted (no traceback kept), and both attempts are one wandb run."""
    import os
    import signal
    import time

    from conftest import start_cli, wandb_summary

    args = [*tiny, "trainer.max_steps=1000000", "checkpoint.every_n_steps=20", "hydra.run.dir=run"]

    def stopped(signum: int, ready: Path, group: bool) -> str:
        proc = start_cli(args, tmp_path)
        deadline = time.monotonic() + 180
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ready.exists(), f"{ready} never appeared"
        if group:
            os.killpg(proc.pid, signum)  # what Ctrl-C in a terminal does
        else:
            os.kill(proc.pid, signum)  # a scheduler's stop, to the job's process
        try:  # communicate, not wait: a child writing more than a pipe holds to stderr would block forever
            _, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        assert proc.returncode == 128 + signum, (proc.returncode, err[-2000:])
        assert "Traceback" not in err, err[-3000:]
        return err

    # the job writes its wandb run id just before wandb starts: the stop comes during set-up
    err = stopped(signal.SIGTERM, tmp_path / "run" / "wandb" / "run_id", group=False)
    assert [line for line in err.splitlines() if "stopped by SIGTERM" in line], err[-2000:]
    (record,) = records(tmp_path / "run")
    assert record["status"] == "interrupted" and "during set-up" in record["error"], record["error"]
    assert record["traceback"] is None and record["wandb"] is not None  # a stop is its own explanation
    first_run = record["wandb"]["id"]
    assert wandb_summary(record["wandb"]["dir"])["summary"]["status"] == "interrupted"  # its run finished

    # relaunched, it trains (a checkpoint at step 20) until Ctrl-C
    err = stopped(signal.SIGINT, tmp_path / "run" / "checkpoints" / "last.ckpt", group=True)
    assert len([line for line in err.splitlines() if "interrupted" in line]) == 1, err[-2000:]
    (record,) = records(tmp_path / "run")
    # the first Ctrl-C stops at the end of the step, with a checkpoint (no exception inside the step)
    assert record["status"] == "interrupted" and record["error"].startswith("interrupted by Ctrl-C (SIGINT) at step "), \
        record["error"]
    assert record["error"].endswith("checkpoint saved"), record["error"]
    assert record["traceback"] is None and record["wandb"]["id"] == first_run  # one job, one wandb run
    table = run_cli([str(tmp_path / "run"), "--format", "csv", "--no-wandb"], tmp_path, script="ablate-table")
    (row,) = csv.DictReader(io.StringIO(table.stdout))
    assert row["status"] == "1 interrupted" and row["n_failed"] == "0" and row["n"] == "0"


@pytest.mark.slow
def test_records_and_tables_follow_the_umask(tmp_path: Path, tiny: list[str]) -> None:
    from conftest import start_cli

    sweep = tmp_path / "sweep"
    process = start_cli(["-m", *tiny, "logger=none", "seed=0,1", f"hydra.sweep.dir={sweep}"], tmp_path, umask=0o022)
    _, err = process.communicate(timeout=240)
    assert process.returncode == 0, err[-2000:]
    files = [*sweep.rglob("result.json"), sweep / "sweep.json", *(sweep / f"table.{x}" for x in ("md", "tex", "csv", "png"))]
    for path in files:
        assert path.stat().st_mode & 0o777 == 0o644, (path, oct(path.stat().st_mode))


def _random_picks(seed: int, n: int = 6) -> list[tuple[str, Any]]:
    """``n`` wrong-typed leaf keys of the default config at once (one value per key)."""
    rng = random.Random(seed)
    picks = rng.sample([c for c in cases("default") if not c[0].startswith("experiment.labels")], n)
    return list({key: (key, bad) for key, bad in picks}.values())


def _checkable(key: str, picks: list[tuple[str, Any]]) -> bool:
    """A setting of a group whose ``_target_`` is broken too cannot be checked (no class to check
    it against); its ``_target_``, ``name`` and ``placement`` still are."""
    broken = {k.split(".")[0] for k, _ in picks if k.endswith("._target_")}
    return key.split(".")[0] not in broken or key.endswith(("._target_", ".name", ".placement"))


@pytest.mark.parametrize("seed", range(40))
def test_random_combinations_of_wrong_types_name_every_key(seed: int) -> None:
    picks = _random_picks(seed)
    cfg = compose_cfg([])
    for key, bad in picks:
        OmegaConf.update(cfg, key, bad, force_add=True, merge=False)
    problems = config_problems(cfg)
    for key, bad in picks:
        assert not _checkable(key, picks) or keys_named(problems, key), (key, bad, picks, problems)


def _cli_value(value: Any) -> str:
    """A value as a Hydra command-line override writes it."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ",".join(_cli_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_cli_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, float) and value != value:
        return "nan"
    return str(value)


@pytest.mark.slow
def test_random_wrong_types_through_the_cli_exit_2_naming_every_key(tmp_path: Path) -> None:
    """One run with a random handful of wrong-typed leaf keys of the default config at once."""
    picks = _random_picks(7)
    args = [f"{key}={_cli_value(bad)}" for key, bad in picks]
    out = run_cli([*args, "hydra.run.dir=run"], tmp_path)
    assert out.returncode == 2, (args, out.stderr[-2000:])
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    assert not list(tmp_path.rglob("result.json"))
    problems = out.stderr.splitlines()
    for key, _ in picks:
        assert not _checkable(key, picks) or keys_named(problems, key), (key, args, out.stderr)


@pytest.mark.slow
def test_a_sweep_start_check_that_cannot_run_stops_the_sweep(tmp_path: Path, tiny: list[str]) -> None:
    """A sweep whose plan cannot be recorded stops before any job starts: here sweep.json cannot be
    written (a file stands where the directory should be)."""
    (tmp_path / "afile").write_text("not a directory")
    out = run_cli(["-m", *tiny, "logger=none", "seed=0,1", f"hydra.sweep.dir={tmp_path / 'afile' / 'sweep'}"], tmp_path)
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    assert "could not run" in out.stderr and "nothing was trained" in out.stderr, out.stderr[-2000:]
    assert not list(tmp_path.rglob("result.json"))


# ---------------------------------------------------------------------------- a task's batches

def _broken_task(broken: str):
    """The built-in reverse task, with one rule of the batch contract broken (``broken``)."""
    from ablate.data.digits import Reverse

    class BrokenReverse(Reverse):
        def make_batch(self, g, batch, length):
            tokens, targets = super().make_batch(g, batch, length)
            if broken == "dtype":
                return tokens.float(), targets
            if broken == "shape":
                return tokens.flatten(), targets.flatten()
            if broken == "labels":
                return tokens, targets + self.n_classes
            if broken == "length":
                return tokens[:, :-1], targets[:, :-1]
            if broken == "unlabelled":
                return tokens, targets.fill_(-100)
            return tokens, targets

    return BrokenReverse(seq_len=8, batch_size=4, n_test=8)


@pytest.mark.parametrize("broken,rule", [
    ("dtype", "tokens must be a LongTensor (torch.int64), got torch.float32"),
    ("shape", "tokens and targets must both be (batch, length), got (32,) and (32,)"),
    ("labels", "targets must be -100 or lie in [0, n_classes=10), got 10..19"),
    ("length", "its length is 7, it must be 8"),
    ("unlabelled", "no position is labelled"),
])
def test_a_task_breaking_the_batch_contract_is_named_before_training(broken: str, rule: str) -> None:
    """The first training batch and the first held-out batches are checked before anything trains:
    the task's class and the broken rule are named, not a PyTorch error from inside the model."""
    from ablate.data.datamodule import AblateDataModule, TrainStream

    task = _broken_task(broken)
    with pytest.raises(ValueError) as training:
        next(iter(TrainStream(task, seed=0)))
    with pytest.raises(ValueError) as held_out:
        AblateDataModule.eval_batches(_data_of(task), 8, "validation")
    for error, what in ((training, "the first training batch"), (held_out, "the first validation batch")):
        assert "BrokenReverse" in str(error.value) and what in str(error.value), str(error.value)
        assert rule in str(error.value), str(error.value)


def _data_of(task):
    """An ``AblateDataModule`` around an already built task (its constructor builds one from a config)."""
    from ablate.data.datamodule import AblateDataModule

    data = AblateDataModule.__new__(AblateDataModule)
    data.task, data._held_out = task, {}
    return data


def test_a_task_keeping_the_contract_passes_the_check() -> None:
    from ablate.data.datamodule import TrainStream

    tokens, targets = next(iter(TrainStream(_broken_task("none"), seed=0)))
    assert tokens.shape == targets.shape == (4, 8)


# ---------------------------------------------------------------------------- ablate-table --save

@pytest.mark.parametrize("blocked", ["read-only directory", "a directory where table.md goes"])
def test_table_save_that_cannot_write_exits_2_with_one_line(tmp_path: Path, blocked: str, capsys) -> None:
    import os

    from ablate.report.cli import main
    from test_table import qkv_records, write_sweep

    sweep = write_sweep(tmp_path / "sweep", qkv_records())
    if blocked == "read-only directory":
        if os.geteuid() == 0:
            pytest.skip("root writes into read-only directories; the other case covers the same path")
        sweep.chmod(0o555)
    else:
        (sweep / "table.md").mkdir()
    try:
        code = main([str(sweep), "--format", "csv", "--save", "--no-wandb"])
    finally:
        sweep.chmod(0o755)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.strip().count("\n") == 0 and err.startswith("ablate-table: cannot write into"), err
