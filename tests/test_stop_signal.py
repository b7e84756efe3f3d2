"""A stop signal inside a real Lightning fit, in-process: wherever in a step it lands, the job stops
at the next step boundary with a checkpoint (``lit.Preempted``), never through Lightning's own
SIGTERM exit (a bare SystemExit: exit code 0, no checkpoint, no interrupted record)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch

from ablate.lit import Checkpointer, Preempted, checkpoint_state
from ablate.run import _StopSignals


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
    with pytest.raises(Preempted) as stopped, _StopSignals(checkpointer):
        trainer.fit(_Tiny(), train_dataloaders=data)
    assert (stopped.value.step, stopped.value.signum) == (4, signum)
    assert checkpoint_state(checkpointer.path)["step"] == 4  # the step it stopped at, saved
    assert signal.getsignal(signum) is before  # the handlers are given back
