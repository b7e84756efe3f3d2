"""Interleaved timing: every variant built once, their training steps alternated (A B C A B C ...).

Runs of a sweep land on a shared machine at different times, so their tokens/s carry the noise of
whatever else ran then. Here a slow spell hits all variants alike and the ratios hold. Used by
``ablate-bench`` (``ablate.bench``), ``ablate-table --bench`` and ``ablate --plan``'s estimate.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import torch
from omegaconf import DictConfig


class _Variant:
    """One variant ready to step: model, optimizer and an endless batch stream, as `ablate` builds them."""

    def __init__(self, cfg: DictConfig) -> None:
        from ablate.optim import make_optimizer
        from ablate.train import build

        data, self.model, _ = build(cfg)
        self.device = bench_device(cfg)
        self.model.to(self.device)
        self.optimizer = make_optimizer(self.model.parameters(), cfg.optim)
        self.clip = cfg.trainer.get("gradient_clip_val")
        self._loader = data.train_dataloader
        self.batches: Iterator[Any] = iter(self._loader())
        self.times: list[float] = []
        self.tokens_per_step = 0

    def _next_batch(self) -> Any:
        try:
            return next(self.batches)
        except StopIteration:  # finite (file-based) tasks: start another epoch
            self.batches = iter(self._loader())
            return next(self.batches)

    def step(self, timed: bool) -> None:
        from ablate.lit import train_step
        from ablate.measure import time_call

        batch = tuple(t.to(self.device, non_blocking=True) for t in self._next_batch())
        # Synchronised at both ends: on CUDA the step's kernels run inside the interval, the
        # previous variant's do not (a no-op on the CPU).
        seconds = time_call(lambda: train_step(self.model, self.optimizer, batch, self.clip), self.device)
        if timed:
            self.times.append(seconds)
            self.tokens_per_step = batch[0].numel()


def bench_device(cfg: DictConfig) -> torch.device:
    """The device a job of ``cfg`` trains on, as Lightning picks it from ``trainer.accelerator``
    (``gpu``/``cuda``: the first CUDA device; ``auto``: CUDA when there is one; else the CPU)."""
    accelerator = str(cfg.trainer.get("accelerator", "cpu")).lower()
    if accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available()):
        return torch.device("cuda", 0)
    if accelerator == "mps":
        return torch.device("mps")
    return torch.device("cpu")


def interleaved(configs: dict[str, DictConfig], rounds: int = 20, steps_per_round: int = 5,
                warmup_rounds: int = 2, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Time ``configs`` (variant key -> config) round-robin; per-variant min/median/max tokens/s."""
    variants = {key: _Variant(cfg) for key, cfg in configs.items()}
    for r in range(warmup_rounds + rounds):
        for variant in variants.values():
            for _ in range(steps_per_round):
                variant.step(timed=r >= warmup_rounds)
        if progress:
            progress(f"round {r + 1}/{warmup_rounds + rounds}")
    return {"rounds": rounds, "steps_per_round": steps_per_round,
            "variants": {key: _tokens_per_s(v.times, v.tokens_per_step) for key, v in variants.items()}}


def _tokens_per_s(times: list[float], tokens_per_step: int) -> dict[str, Any]:
    """bench.json's per-variant entry: tokens/s min/median/max over the timed steps."""
    from ablate.measure import summarize_times

    s = summarize_times(times, tokens_per_step)
    return {"tokens_per_s": {"min": tokens_per_step / s["step_time_s"]["max"], "median": s["tokens_per_s"],
                             "max": tokens_per_step / s["step_time_s"]["min"]}, "timed_steps": s["timed_steps"]}
