"""A stop signal inside a real Lightning fit, in-process: wherever in a step it lands, the job stops
at the next step boundary with a checkpoint (``lit.Preempted``), never through Lightning's own
SIGTERM exit (a bare SystemExit: exit code 0, no checkpoint, no interrupted record)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch

from ablate.lit import Checkpointer, Preempted, checkpoint_state
from ablate.stops import StopSignals


class _Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.layer(batch).pow(2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class _SignalAfterCallbacks(pl.Callback):
    """Sends the signal to this process at ``step``, after the checkpointer's own check of that step:
    the window in which Lightning's handler used to end the fit first."""

    def __init__(self, step: int, signum: int) -> None:
        self.step, self.signum = step, signum

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), self.signum)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGUSR1])
def test_a_signal_after_the_checkpointer_looked_stops_at_the_next_step_with_a_checkpoint(
        tmp_path: Path, signum: int) -> None:
    checkpointer = Checkpointer(tmp_path / "last.ckpt")
    trainer = pl.Trainer(max_steps=50, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[checkpointer, _SignalAfterCallbacks(3, signum)])
    before = signal.getsignal(signum)
    data = torch.utils.data.DataLoader(torch.randn(400, 4), batch_size=4)
    with pytest.raises(Preempted) as stopped, StopSignals(checkpointer):
        trainer.fit(_Tiny(), train_dataloaders=data)
    assert (stopped.value.step, stopped.value.signum) == (4, signum)
    assert checkpoint_state(checkpointer.path)["step"] == 4  # the step it stopped at, saved
    assert signal.getsignal(signum) is before  # the handlers are given back


# ---------------------------------------------------------------------------- a stop during set-up

from ablate.data.digits import Reverse  # noqa: E402


SETTING_UP = threading.Event()


class SlowSetupReverse(Reverse):
    """The reverse task with a set-up that takes ``setup_s`` seconds (a slow data preparation)."""

    def __init__(self, setup_s: float = 20.0, **settings: Any) -> None:
        super().__init__(**settings)
        self.setup_s = setup_s

    def _setup(self) -> None:
        SETTING_UP.set()
        deadline = time.monotonic() + self.setup_s
        while time.monotonic() < deadline:
            time.sleep(0.05)


def test_a_stop_signal_during_set_up_stops_at_once_and_records_interrupted(tmp_path: Path) -> None:
    """The same ``run_job`` the CLI runs, in-process: SIGTERM while the task's ``_setup`` runs (before
    the first step) stops the job at once, with an ``interrupted`` record, and exits 128 + 15."""
    from conftest import compose_cfg

    from ablate.job import Job
    from ablate.record import read_record
    from ablate.run import _stopped, run_job

    cfg = compose_cfg(["trainer=debug", "logger=none", "model.d_model=16", "model.n_heads=2", "model.n_layers=1",
                       "task=reverse",
                       f"task._target_={__name__}.SlowSetupReverse", "+task.setup_s=20", "measure.memory=false"])
    job = Job(tmp_path / "job", ["seed=0"], {}, None, None)
    SETTING_UP.clear()
    sent: list[float] = []

    def stop_when_setting_up() -> None:
        if SETTING_UP.wait(timeout=120):
            sent.append(time.monotonic())
            os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=stop_when_setting_up, daemon=True).start()
    try:
        with pytest.raises(SystemExit) as stopped:
            run_job(cfg, job)
    finally:
        assert _stopped == [128 + signal.SIGTERM]  # this process starts no other job...
        _stopped.clear()  # ...but the test process goes on to other tests
    assert sent and time.monotonic() - sent[0] < 5, "stopped at once, not after the 20 s set-up"
    assert stopped.value.code == 128 + signal.SIGTERM
    record = read_record(job.dir)
    assert record.status == "interrupted" and "during set-up" in record.error, record.error
    assert record.metrics.steps is None
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # the handlers are given back
