"""What a run shows on the terminal: Lightning's progress bar over the run's steps, without the
"Epoch 0/-2" title and the logger's ``v_num`` that mean nothing for a run trained by steps, and
each finished job's one line (name, status, headline metric, time). The lines of a sweep and of a
stopped job are checked through the real CLI in ``test_launchers.py`` and ``test_hostile.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.loggers import CSVLogger

from ablate.lit import StepProgressBar
from ablate.console import duration_text, job_line
from ablate.record import JobEntry, Metrics, Record, Score


class _Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self.layer(batch).pow(2).mean()
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def test_the_progress_bar_counts_steps_without_epoch_or_version(tmp_path: Path) -> None:
    bar = StepProgressBar()
    trainer = pl.Trainer(max_steps=5, logger=CSVLogger(tmp_path), callbacks=[bar], enable_checkpointing=False,
                         enable_model_summary=False)
    module = _Tiny()
    trainer.fit(module, train_dataloaders=torch.utils.data.DataLoader(torch.randn(400, 4), batch_size=4))
    assert trainer.progress_bar_callback is bar
    title = bar._get_train_description(trainer.current_epoch)
    assert title.strip() == "Steps" and "Epoch" not in title and "-2" not in title
    metrics = bar.get_metrics(trainer, module)
    assert "v_num" not in metrics and "train/loss" in metrics, metrics


def test_a_job_line_names_status_metric_and_time() -> None:
    ok = Record(status="ok", job=JobEntry(dir="/s/a"),
                metrics=Metrics(metric="accuracy", eval={"64": Score(accuracy=0.5)}, loss=1.25, tokens_per_s=1000.0,
                                params=12, wall_time_s=75.0))
    line = job_line(ok, "qkv_sharing=mqa")
    for part in ("qkv_sharing=mqa", "ok", "accuracy@64 0.5000", "loss 1.2500", "1 min 15 s", "/s/a/result.json"):
        assert part in line, (part, line)
    ok.metrics.early_stopped = {"step": 40, "max_steps": 100, "monitor": "val/loss"}
    assert "stopped early at step 40" in job_line(ok, "qkv_sharing=mqa")
    failed = job_line(Record(status="failed", error="ValueError: bad", metrics=Metrics(wall_time_s=2.0)), "seed=1")
    assert "seed=1: failed" in failed and "ValueError: bad" in failed and "2.0 s" in failed
    assert [duration_text(s) for s in (3.21, 61, 7300)] == ["3.2 s", "1 min 01 s", "2 h 01 min"]
