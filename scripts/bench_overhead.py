"""Framework overhead: the same model trained by a plain PyTorch loop and by `ablate`'s Lightning path.

The model is the project's speed yardstick: a ~0.9M-parameter pre-LN GPT (d 128, 4 layers,
4 heads, 128 tokens, batch 32, SDPA), built by `ablate` from its config, on the built-in byte-level
LM task. Both sides use the same model, data stream, optimizer, LR schedule and gradient clipping:

  plain   for tokens, targets in loader: zero_grad; masked_loss(model(tokens), targets).backward();
          clip_grad_norm_; optimizer.step(); scheduler.step()
  ablate  AblateModule + the pytorch_lightning.Trainer that `ablate` builds (progress bar on, as a user
          sees it; no metric logger)

Throughput counts everything between two step starts (data, logging, progress bar), so framework
overhead cannot hide. Rounds alternate plain / ablate so that a noisy spell on this shared machine hits
both; each side's figure is the median over all its timed steps.

    .venv/bin/python scripts/bench_overhead.py            # prints tokens/s of both and their ratio
    .venv/bin/python scripts/bench_overhead.py --rounds 5 --steps 60
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from typing import Any

import pytorch_lightning as pl
import torch

from ablate.compose import compose
from ablate.lit import train_step
from ablate.optim import make_optimizer, warmup_cosine
from ablate.train import build, make_trainer, quiet_lightning

YARDSTICK = ["task=lm", "task.seq_len=128", "task.batch_size=32", "model.d_model=128", "model.n_layers=4",
             "model.n_heads=4", "model.causal=true", "pos_enc=learned", "norm=layernorm", "ffn=gelu",
             "qkv_sharing=independent", "init=normal", "logger=none"]


class StepStarts(pl.Callback):
    def __init__(self) -> None:
        self.starts: list[float] = []

    def on_train_batch_start(self, *args: Any) -> None:
        self.starts.append(time.perf_counter())


def plain_loop(model: torch.nn.Module, loader: Any, cfg: Any, steps: int) -> list[float]:
    optimizer = make_optimizer(model.parameters(), cfg.optim)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: warmup_cosine(
        s, cfg.optim.warmup_steps, cfg.trainer.max_steps, cfg.optim.min_lr_ratio))
    starts = []
    for _, batch in zip(range(steps), loader):
        starts.append(time.perf_counter())
        train_step(model, optimizer, batch, cfg.trainer.gradient_clip_val)
        schedule.step()
    starts.append(time.perf_counter())
    return starts


def lightning_loop(module: pl.LightningModule, loader: Any, cfg: Any, steps: int) -> list[float]:
    cfg = copy.deepcopy(cfg)
    cfg.trainer.max_steps = steps
    clock = StepStarts()
    trainer = make_trainer(cfg, logger=False, callbacks=[clock])
    trainer.fit(module, train_dataloaders=loader)
    return clock.starts + [time.perf_counter()]


def intervals(starts: list[float], warmup: int) -> list[float]:
    return [b - a for a, b in zip(starts[warmup:], starts[warmup + 1:])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40, help="steps per side per round (after warm-up)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps at the start of each round")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides (e.g. model.n_layers=2)")
    args = parser.parse_args()

    quiet_lightning()
    cfg = compose(YARDSTICK + args.overrides)
    data, model, module = build(cfg)
    loader = data.train_dataloader()
    params = sum(p.numel() for p in model.parameters())
    tokens = cfg.task.batch_size * cfg.task.seq_len
    print(f"model: {params / 1e6:.2f}M params, {tokens} tokens/step, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads")

    plain: list[float] = []
    framework: list[float] = []
    n = args.warmup + args.steps
    for r in range(args.rounds):
        plain += intervals(plain_loop(model, loader, cfg, n), args.warmup)
        framework += intervals(lightning_loop(module, loader, cfg, n), args.warmup)
        print(f"round {r + 1}/{args.rounds}: plain {tokens / statistics.median(plain):,.0f} tokens/s, "
              f"ablate {tokens / statistics.median(framework):,.0f} tokens/s")

    plain_tps, ablate_tps = tokens / statistics.median(plain), tokens / statistics.median(framework)
    print(f"\nplain PyTorch loop : {plain_tps:10,.0f} tokens/s  (median of {len(plain)} steps)")
    print(f"ablate (Lightning) : {ablate_tps:10,.0f} tokens/s  (median of {len(framework)} steps)")
    print(f"ratio ablate/plain : {ablate_tps / plain_tps:.3f}")


if __name__ == "__main__":
    main()
