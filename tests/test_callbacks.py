"""The ``callbacks`` group: any Lightning callback, built-in option or a user's own class, joins a run
by ``_target_``; a bad one is named before anything trains (the CLI's exit 2: test_hostile.py)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import pytorch_lightning as pl
from conftest import IN_PROCESS, compose_cfg

from ablate.components import PositiveInt
from ablate.compose import tiny_overrides
from ablate.config import config_problems
from ablate.job import Job
from ablate.optim import warmup_cosine
from ablate.run import run_job

TINY = tiny_overrides(*IN_PROCESS, without=["logger", "eval.every"])  # a logger per test, the default eval.every
USER = f"{__name__}.CountingCallback"


class CountingCallback(pl.Callback):
    """A user's own callback: counts the training batches it saw and writes them, with its setting,
    to ``path`` when training ends."""

    def __init__(self, path: str, every: PositiveInt = 1) -> None:
        if not Path(path).parent.is_dir():
            raise ValueError(f"no directory for {path}")
        self.path, self.every, self.batches = Path(path), every, 0

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args, **kwargs) -> None:
        self.batches += 1

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.path.write_text(json.dumps({"batches": self.batches, "global_step": trainer.global_step,
                                         "every": self.every}))


def test_a_lightning_callback_and_a_users_own_join_the_run(tmp_path: Path, one_thread) -> None:
    counted = tmp_path / "counted.json"
    overrides = [*TINY, "logger=csv", "trainer.max_steps=6", "optim.warmup_steps=3", "callbacks=lr_monitor",
                 f"+callbacks.counter._target_={USER}", f"+callbacks.counter.path={counted}",
                 "+callbacks.counter.every=2"]
    cfg = compose_cfg(overrides)
    job = Job(tmp_path / "job", overrides, {}, None, None)
    record = run_job(cfg, job)
    assert record.status == "ok", record.error

    assert json.loads(counted.read_text()) == {"batches": 6, "global_step": 6, "every": 2}
    with open(job.dir / "metrics.csv", newline="") as f:  # logger=csv: what LearningRateMonitor logged
        rows = list(csv.DictReader(f))
    lr_columns = [c for c in rows[0] if c.startswith("lr-AdamW")]
    assert lr_columns, list(rows[0])
    expected = [cfg.optim.lr * warmup_cosine(step, 3, 6, cfg.optim.min_lr_ratio) for step in range(6)]
    for column in lr_columns:
        logged = [float(r[column]) for r in rows if r.get(column)]
        assert logged == pytest.approx(expected), column  # the schedule, step by step


BAD = {
    # a class that cannot be imported, a key it does not take, a value it refuses in its constructor
    "+callbacks.monitor._target_=no_such_module.Monitor":
        "callbacks.monitor._target_='no_such_module.Monitor' cannot be imported",
    "callbacks=lr_monitor +callbacks.lr_monitor.interval=step":
        "callbacks.lr_monitor.interval is not a setting of pytorch_lightning.callbacks.lr_monitor.LearningRateMonitor;"
        " valid: logging_interval, log_momentum, log_weight_decay",
    "callbacks=lr_monitor callbacks.lr_monitor.logging_interval=hour":
        "callbacks.lr_monitor.logging_interval='hour' must be one of 'step', 'epoch' or null",
    "callbacks=lr_monitor logger=none": "logger=none has none; valid here: logger=wandb or logger=csv",
    # the user's own class: its type hints are the schema, as for a model component
    f"+callbacks.counter._target_={USER} +callbacks.counter.path=counted.json +callbacks.counter.every=0":
        "callbacks.counter.every=0 must be > 0",
    f"+callbacks.counter._target_={USER}": f"callbacks.counter.path is required by {USER}",
    f"+callbacks.counter._target_={USER} +callbacks.counter.path=/no/such/dir/counted.json":
        f"callbacks.counter: {USER} raised ValueError: no directory for /no/such/dir/counted.json",
    "+callbacks.counter._target_=argparse.Namespace":
        "callbacks.counter: argparse.Namespace must build a pytorch_lightning.Callback, got Namespace",
    "+callbacks.counter=3": "callbacks.counter must be a callback node with a _target_",
}


@pytest.mark.parametrize("args,named", BAD.items(), ids=list(BAD))
def test_a_bad_callback_is_named_before_training(args: str, named: str) -> None:
    problems = config_problems(compose_cfg([*TINY, "logger=csv", *args.split()]))
    assert any(named in p for p in problems), problems


def test_the_default_and_the_builtin_option_validate() -> None:
    for args in ([], ["callbacks=lr_monitor"], ["callbacks=[none,lr_monitor]", "logger=wandb"]):
        assert config_problems(compose_cfg([*TINY, "logger=csv", *args])) == [], args


def test_early_stopping_and_model_checkpoint_watch_val_loss_at_the_curve_points(tmp_path: Path, one_thread) -> None:
    """`callbacks=[early_stopping,model_checkpoint]` as a Lightning user types it: val/loss reaches
    both at each learning-curve point, the run stops early and its record says where and why, and
    the best weights are in the job's model_checkpoints (ablate's own checkpoints/ left alone)."""
    overrides = [*TINY, "logger=csv", "trainer.max_steps=40", "eval.every=2", "optim.warmup_steps=2",
                 "callbacks=[early_stopping,model_checkpoint]", "callbacks.early_stopping.patience=1",
                 "callbacks.early_stopping.min_delta=10"]  # no point improves by 10: stops at the second point
    job = Job(tmp_path / "job", overrides, {}, None, None)
    record = run_job(compose_cfg(overrides), job)
    assert record.status == "ok", record.error
    m = record.metrics
    history = [p.step for p in m.history]
    assert history == [2, 4] and m.steps == 4
    stopped = m.early_stopped
    assert (stopped["step"], stopped["max_steps"], stopped["monitor"]) == (4, 40, "val/loss")
    assert stopped["best"] == pytest.approx(m.history[0].loss) and "did not improve" in stopped["reason"]
    kept = m.model_checkpoint
    assert kept["dir"] == str((job.dir / "model_checkpoints").resolve())
    best = min(m.history, key=lambda p: p.loss)
    assert kept["best_model_score"] == pytest.approx(best.loss) and Path(kept["best_model_path"]).is_file()
    assert f"step={best.step}" in Path(kept["best_model_path"]).name
    assert not (job.dir / "checkpoints").exists()  # ablate's own, removed as the job ended ok


MONITOR_BAD = {
    "callbacks=early_stopping callbacks.early_stopping.monitor=val_loss":
        "callbacks.early_stopping.monitor='val_loss' is not a metric a callback sees in an ablate run; valid: "
        "val/loss, val/accuracy, train/loss",
    "callbacks=early_stopping callbacks.early_stopping.monitor=val/accuracy":
        "callbacks.early_stopping.mode='min' with monitor=val/accuracy, where higher is better; valid here: mode=max",
    "callbacks=model_checkpoint callbacks.model_checkpoint.monitor=loss":
        "callbacks.model_checkpoint.monitor='loss' is not a metric a callback sees in an ablate run",
    "callbacks=model_checkpoint callbacks.model_checkpoint.dirpath=checkpoints":
        "callbacks.model_checkpoint.dirpath='checkpoints' is ablate's own checkpoints directory",
}


@pytest.mark.parametrize("args,named", MONITOR_BAD.items(), ids=list(MONITOR_BAD))
def test_a_monitor_ablate_never_gives_is_named_before_training(args: str, named: str) -> None:
    problems = config_problems(compose_cfg([*TINY, "logger=csv", *args.split()]))
    assert any(named in p for p in problems), problems
    assert config_problems(compose_cfg([*TINY, "callbacks=[early_stopping,model_checkpoint]"])) == []
