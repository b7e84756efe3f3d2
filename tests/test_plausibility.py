"""Hostile input read back: records, a bench file, numbers a component reports about itself and
environment settings are checked for plausibility; what fails is named (where, which field, its
value, what was expected) and left out, never trusted and never a traceback.

The records are written by real in-process runs of tiny models, then one field of one copy is
edited per case, as a person (or a broken tool) might.
"""

from __future__ import annotations

import json
import math
import shutil
import warnings
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
import torch.nn as nn
from conftest import IN_PROCESS, compose_cfg
from omegaconf import OmegaConf

from ablate.compose import tiny_overrides
from ablate.config import config_problems
from ablate.job import Job, slurm_fields
from ablate.report.cli import main as ablate_table
from ablate.report.records import bench_speeds
from ablate.record import RESULT_FILE
from ablate.record_checks import record_problems
from ablate.run import run_job
from ablate.sweep import load_sweep_records

TINY = tiny_overrides(*IN_PROCESS, without=["measure.memory"])  # memory measured: a record's peak memory is checked
JOBS = [["pos_enc=learned", "seed=0"], ["pos_enc=rope", "seed=0"], ["pos_enc=rope", "seed=1"],
        ["pos_enc=rope", "seed=2", "optim.lr=1e9"]]  # the last one diverges
EDITED = "pos_enc=rope,seed=1"  # the job whose record each case edits


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory, one_thread) -> Path:
    directory = tmp_path_factory.mktemp("sweep")
    for num, overrides in enumerate(JOBS):
        run_job(compose_cfg([*TINY, *overrides]), Job(directory / ",".join(overrides), overrides, {}, str(directory), num))
    return directory


def test_the_records_real_runs_write_are_plausible(sweep: Path) -> None:
    records = [json.loads(p.read_text()) for p in sorted(sweep.rglob(RESULT_FILE))]
    assert sorted(r["status"] for r in records) == ["diverged", "ok", "ok", "ok"]
    for record in records:
        assert record_problems(record) == [], record["overrides"]


def _set_metric(key: str, value: Any) -> Callable[[dict], None]:
    return lambda r: r["metrics"].__setitem__(key, value)


def _reverse_history(r: dict) -> None:
    r["metrics"]["history"] = list(reversed(r["metrics"]["history"]))


def _set(key: str, value: Any) -> Callable[[dict], None]:
    return lambda r: r.__setitem__(key, value)


# case -> (the edit, the field named, what the message says is expected)
CASES = {
    "accuracy above 1": (_set_metric("accuracy", 7.5), "metrics.accuracy=7.5", "a number in [0, 1]"),
    "accuracy below 0": (_set_metric("accuracy", -0.2), "metrics.accuracy=-0.2", "a number in [0, 1]"),
    "accuracy a string": (_set_metric("accuracy", "high"), "metrics.accuracy='high'", "a number in [0, 1]"),
    "accuracy NaN though ok": (_set_metric("accuracy", math.nan), "metrics.accuracy=nan", "ended ok"),
    "eval accuracy above 1": (lambda r: r["metrics"]["eval"]["16"].__setitem__("accuracy", 3.0),
                              "metrics.eval.16.accuracy=3.0", "a number in [0, 1]"),
    "speed NaN": (_set_metric("tokens_per_s", math.nan), "metrics.tokens_per_s=nan", "a finite number > 0"),
    "speed negative": (_set_metric("tokens_per_s", -5.0), "metrics.tokens_per_s=-5.0", "a finite number > 0"),
    "speed zero": (_set_metric("tokens_per_s", 0), "metrics.tokens_per_s=0", "a finite number > 0"),
    "params negative": (_set_metric("params", -3), "metrics.params=-3", "an integer >= 0"),
    "params not an integer": (_set_metric("params", 2.5), "metrics.params=2.5", "an integer >= 0"),
    "memory negative": (_set_metric("peak_memory_bytes", -100), "metrics.peak_memory_bytes=-100", ">= 0"),
    "loss negative": (_set_metric("loss", -1.0), "metrics.loss=-1.0", "a number >= 0"),
    "history backwards": (_reverse_history, "metrics.history=", "steps go backwards"),
    "history not a list": (_set_metric("history", "abc"), "metrics.history='abc'", "a list"),
    "status unknown": (_set("status", "done"), "status='done'", "one of ok, diverged, failed, interrupted"),
    "overrides a string": (_set("overrides", "pos_enc=rope seed=1"), "overrides='pos_enc=rope seed=1'",
                           "a list of override strings"),
    "overrides not strings": (_set("overrides", [1, 2]), "overrides=[1, 2]", "a list of override strings"),
    "metrics not a mapping": (_set("metrics", [1]), "metrics=[1]", "a mapping"),
    "config not a mapping": (_set("config", "x"), "config='x'", "a mapping"),
    "eval not a mapping": (_set_metric("eval", "x"), "metrics.eval='x'", "a mapping"),
    "seed a list": (lambda r: r["config"].__setitem__("seed", [1]), "config.seed=[1]", "an integer"),
    "job not a mapping": (_set("job", "x"), "job='x'", "a mapping"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_an_implausible_record_is_named_and_left_out_of_the_table(case: str, sweep: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture) -> None:
    edit, field, expected = CASES[case]
    directory = shutil.copytree(sweep, tmp_path / "sweep")
    path = directory / EDITED / RESULT_FILE
    record = json.loads(path.read_text())
    edit(record)
    path.write_text(json.dumps(record))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        records = load_sweep_records(directory)
    assert EDITED not in {r.path.parent.name for r in records} and len(records) == len(JOBS) - 1
    named = [str(w.message) for w in caught if str(path) in str(w.message)]
    assert len(named) == 1, [str(w.message) for w in caught]
    assert "\n" not in named[0] and field in named[0] and expected in named[0], named[0]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert ablate_table([str(directory), "-f", "csv"]) == 0  # the table of the others, no traceback
    rows = {line.split(",")[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    good = json.loads((directory / "pos_enc=rope,seed=0" / RESULT_FILE).read_text())["metrics"]["accuracy"]
    assert rows["rope"].split(",")[1] == repr(float(good))  # the rope row's mean: its one plausible ok run


def test_a_signed_metric_keeps_its_own_range(sweep: Path) -> None:
    record = json.loads((sweep / EDITED / RESULT_FILE).read_text())
    record["metrics"].update(metric="matthews_corr", accuracy=-0.5)
    record["metrics"]["eval"]["16"]["accuracy"] = -0.5
    assert record_problems(record) == []  # a Matthews correlation may be negative
    record["metrics"]["accuracy"] = -1.5
    assert record_problems(record) == ["metrics.accuracy=-1.5 (expected a number in [-1, 1])"]


def test_a_diverged_record_may_have_a_nan_loss_but_not_a_negative_one(sweep: Path) -> None:
    diverged = json.loads((sweep / "pos_enc=rope,seed=2,optim.lr=1e9" / RESULT_FILE).read_text())
    diverged["metrics"].update(loss=math.nan, accuracy=math.nan)
    assert record_problems(diverged) == []
    diverged["metrics"]["loss"] = -2.0
    assert record_problems(diverged) == ["metrics.loss=-2.0 (expected a number >= 0)"]


def test_a_bench_speed_that_is_not_positive_is_named_and_not_used() -> None:
    bench = {"variants": {"pos_enc=rope": {"tokens_per_s": {"median": -5.0}},
                          "pos_enc=learned": {"tokens_per_s": {"median": 1000.0}}}}
    with pytest.warns(UserWarning, match=r"bench.json: ignoring variants\['pos_enc=rope'\]: tokens_per_s=-5.0 "
                                         r"\(expected a finite number > 0\)"):
        speeds = bench_speeds(bench, {"pos_enc"})
    assert speeds == {"pos_enc=learned": 1000.0}


# ------------------------------------------------------------- numbers a component reports

class ReportingFFN(nn.Module):
    """A plain FFN whose ``flops`` reports whatever it is told to (or raises)."""

    def __init__(self, d_model: int, reported: Any = 0.0) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(d_model, 2 * d_model), nn.Linear(2 * d_model, d_model)
        self.reported = reported

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))

    def flops(self, seq_len: int, batch_size: int) -> float:
        if self.reported == "raise":
            raise RuntimeError("cannot count")
        return self.reported


def _ffn_problems(reported: Any) -> list[str]:
    cfg = OmegaConf.to_container(compose_cfg(TINY), resolve=True)
    cfg["ffn"] = {"_target_": "test_plausibility.ReportingFFN", "reported": reported}
    return config_problems(cfg)


@pytest.mark.parametrize("reported, said", [(math.nan, "returned nan"), (-1.0, "returned -1.0"),
                                            ("many", "returned 'many'"), ("raise", "raised RuntimeError")])
def test_a_component_reporting_implausible_flops_is_refused_before_training(reported: Any, said: str) -> None:
    problems = _ffn_problems(reported)
    assert len(problems) == 1 and problems[0].startswith("ffn: test_plausibility.ReportingFFN"), problems
    assert said in problems[0]
    if reported != "raise":
        assert "flops(seq_len=16, batch_size=2)" in problems[0] and "expected a finite number >= 0" in problems[0]


def test_a_component_reporting_plausible_flops_passes() -> None:
    assert _ffn_problems(1234.0) == []


# ------------------------------------------------------------- environment settings

def test_malformed_slurm_variables_are_named_and_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "four")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "-1")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fields = slurm_fields()
        share = Job._cpu_share({"_target_": "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher",
                                "cpus_per_task": 3}, None)
    assert fields["cpus_per_task"] is None and fields["restart_count"] == 0 and fields["job_id"] == "77"
    assert share == ("submitit_slurm", 1, 3, 0)  # the launcher's own cpus_per_task instead
    messages = {str(w.message) for w in caught}
    assert "ignoring the environment's SLURM_CPUS_PER_TASK='four': expected an integer >= 1" in messages
    assert "ignoring the environment's SLURM_RESTART_COUNT='-1': expected an integer >= 0" in messages
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "6")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")
    assert slurm_fields()["cpus_per_task"] == 6 and slurm_fields()["restart_count"] == 2



def test_a_relaunch_and_the_plan_do_not_trust_an_implausible_ok_record(sweep: Path, tmp_path: Path) -> None:
    """A job whose ok record is implausible is not "done": --plan lists it to rerun, and a relaunch
    trains it again (and writes a plausible record over the edited one)."""
    from ablate.preview import job_status

    directory = shutil.copytree(sweep, tmp_path / "sweep")
    overrides = EDITED.split(",")
    assert job_status(directory, overrides) == "done"
    path = directory / EDITED / RESULT_FILE
    record = json.loads(path.read_text())
    record["metrics"]["accuracy"] = 7.5
    path.write_text(json.dumps(record))
    assert job_status(directory, overrides) == "rerun"
    rerun = run_job(compose_cfg([*TINY, *overrides]), Job(directory / EDITED, overrides, {}, str(directory), 2))
    assert rerun.status == "ok" and 0 <= rerun.metrics.accuracy <= 1
    assert record_problems(json.loads(path.read_text())) == []



def _sized_reverse(**sizes: Any) -> type:
    """The built-in reverse task, reporting other sizes (``vocab_size``, ``n_classes``, ``pad_id``)."""
    from ablate.data.digits import Reverse

    class SizedReverse(Reverse):
        def __init__(self, **settings: Any) -> None:
            super().__init__(**settings)
            for key, value in sizes.items():
                setattr(self, key, value)

    return SizedReverse


#: a task that reports no vocabulary, for build_task to import by its _target_
ZeroVocabReverse = _sized_reverse(vocab_size=0)


@pytest.mark.parametrize("sizes,said", [
    ({"vocab_size": 0}, "vocab_size must be a positive integer, got 0"),
    ({"n_classes": 2.5}, "n_classes must be a positive integer, got 2.5"),
    ({"vocab_size": "10"}, "vocab_size must be a positive integer, got '10'"),
    ({"pad_id": 99}, "pad_id must be None or a token id in [0, vocab_size=10), got 99"),
])
def test_a_task_reporting_implausible_sizes_is_named(sizes: dict, said: str) -> None:
    from ablate.data.base import size_problems

    problems = size_problems(_sized_reverse(**sizes)(seq_len=8, batch_size=4, n_test=8))
    assert len(problems) == 1 and "SizedReverse" in problems[0] and said in problems[0], problems


def test_plausible_task_sizes_pass_and_a_built_task_is_checked_before_the_model() -> None:
    import numpy as np

    from ablate.data.base import TaskContractError, build_task, size_problems

    numpy_sizes = _sized_reverse(vocab_size=np.int64(10), pad_id=np.int64(0))(seq_len=8, batch_size=4, n_test=8)
    assert size_problems(numpy_sizes) == []
    node = {"name": "reverse", "seq_len": 8, "batch_size": 4, "n_test": 8}
    assert build_task({"_target_": "ablate.data.digits.Reverse", **node}).vocab_size == 10
    with pytest.raises(TaskContractError, match=r"SizedReverse: vocab_size must be a positive integer, got 0"):
        build_task({"_target_": f"{__name__}.ZeroVocabReverse", **node})
