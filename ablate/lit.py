"""The LightningModule: trains whatever model it is given on ``(tokens, targets)`` batches.

It knows nothing of variants or tasks: every task labels the positions it scores and marks the
rest ``-100`` (see docs/internals.md), so one masked cross-entropy and one accuracy serve all.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import Tensor, nn

IGNORE = -100


class Diverged(RuntimeError):
    """The training loss became non-finite; the run stops at once."""

    def __init__(self, step: int, loss: float) -> None:
        super().__init__(f"non-finite loss ({loss}) at step {step}")
        self.step = step


def masked_loss(logits: Tensor, targets: Tensor) -> Tensor:
    return F.cross_entropy(logits.flatten(0, -2), targets.flatten(), ignore_index=IGNORE)


def make_optimizer(params: Any, optim: Mapping[str, Any]) -> torch.optim.Optimizer:
    """AdamW; weight decay on matrices only (not on norms, biases or gains), as in GPT-2."""
    params = [p for p in params if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": optim["weight_decay"]},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=optim["lr"], betas=tuple(optim["betas"]))


def warmup_cosine(step: int, warmup_steps: int, total_steps: int, min_ratio: float) -> float:
    """LR multiplier: linear warm-up to 1, then cosine decay to ``min_ratio``."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


class AblateModule(pl.LightningModule):
    def __init__(self, model: nn.Module, optim: Mapping[str, Any], total_steps: int,
                 val_lengths: list[int] | None = None) -> None:
        super().__init__()
        self.model = model
        self.optim = dict(optim)
        self.total_steps = total_steps
        self.val_lengths = list(val_lengths or [])
        self._eval_sums: dict[int, Tensor] = {}

    def forward(self, tokens: Tensor) -> Tensor:
        return self.model(tokens)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        tokens, targets = batch
        loss = masked_loss(self.model(tokens), targets)
        if not torch.isfinite(loss):
            raise Diverged(self.global_step, loss.item())
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        tokens, targets = batch
        logits = self.model(tokens)
        labelled = targets != IGNORE
        loss_sum = F.cross_entropy(logits.flatten(0, -2), targets.flatten(), ignore_index=IGNORE, reduction="sum")
        correct = (logits.argmax(-1) == targets)[labelled].sum()
        sums = torch.stack([loss_sum.float(), correct.float(), labelled.sum().float()])
        length = self.val_lengths[dataloader_idx] if self.val_lengths else tokens.shape[1]
        self._eval_sums[length] = self._eval_sums.get(length, 0) + sums.detach()

    def on_validation_epoch_start(self) -> None:
        self._eval_sums = {}

    def on_validation_epoch_end(self) -> None:
        for length, sums in self._eval_sums.items():
            if self.trainer.world_size > 1:  # every rank saw a shard of the held-out set
                sums = self._eval_sums[length] = self.all_gather(sums).reshape(-1, 3).sum(0)
            loss_sum, correct, count = sums.tolist()
            self.log_dict({f"val/loss@{length}": loss_sum / count, f"val/accuracy@{length}": correct / count},
                          add_dataloader_idx=False, sync_dist=False, rank_zero_only=True)

    def eval_results(self) -> dict[str, dict[str, float]]:
        """``{length: {accuracy, loss}}`` of the last validation, over every labelled position."""
        out = {}
        for length, sums in self._eval_sums.items():
            loss_sum, correct, count = sums.tolist()
            out[str(length)] = {"accuracy": correct / count, "loss": loss_sum / count, "count": int(count)}
        return out

    def configure_optimizers(self) -> Any:
        optimizer = make_optimizer(self.parameters(), self.optim)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: warmup_cosine(
            step, self.optim["warmup_steps"], self.total_steps, self.optim["min_lr_ratio"]))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}
