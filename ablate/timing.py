"""Interleaved timing: every variant built once, their training steps alternated (A B C A B C ...).

Runs of a sweep land on a shared machine at different times, so their tokens/s carry the noise of
whatever else ran then. Here a slow spell hits all variants alike and the ratios hold. Used by
``ablate-bench`` (``ablate.bench``), ``ablate-table --bench`` and ``ablate --plan``'s estimate.
What is measured here is kept in the per-user cache of step times (``ablate.step_times``).
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Iterator

from omegaconf import DictConfig

from ablate.step_times import bench_device



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
        self.cpu_times: list[float] = []  # the process's CPU seconds in each timed step (all its threads)
        self.round_times: list[list[float]] = []  # the timed steps of each round
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
        cpu = time.process_time()
        seconds = time_call(lambda: train_step(self.model, self.optimizer, batch, self.clip), self.device)
        if timed:
            self.times.append(seconds)
            self.cpu_times.append(time.process_time() - cpu)
            self.round_times[-1].append(seconds)
            self.tokens_per_step = batch[0].numel()


def interleaved(configs: dict[str, DictConfig], rounds: int = 20, steps_per_round: int = 5,
                warmup_rounds: int = 2, progress: Callable[[str], None] | None = None,
                max_seconds: float | None = None, min_rounds: int = 1) -> dict[str, Any]:
    """Time ``configs`` (variant key -> config) round-robin; per-variant min/median/max tokens/s and
    each round's tokens/s (``round_tokens_per_s``: what ``ablate-bench`` compares round by round).
    ``max_seconds``: a variant stops being timed once its timed steps took that long and it has
    ``min_rounds`` timed rounds (``ablate --plan``: seconds per variant however loaded the machine)."""
    variants = {key: _Variant(cfg) for key, cfg in configs.items()}
    for r in range(warmup_rounds + rounds):
        timed = r >= warmup_rounds
        for variant in variants.values():
            if timed and max_seconds is not None and len(variant.round_times) >= min_rounds \
                    and sum(variant.times) >= max_seconds:
                continue
            if timed:
                variant.round_times.append([])
            for _ in range(steps_per_round):
                variant.step(timed=timed)
        if progress:
            progress(f"round {r + 1}/{warmup_rounds + rounds}")
    return {"rounds": rounds, "steps_per_round": steps_per_round,
            "variants": {key: _tokens_per_s(v) for key, v in variants.items()}}


def _tokens_per_s(variant: _Variant) -> dict[str, Any]:
    """bench.json's per-variant entry: tokens/s min/median/max over the timed steps, each round's
    tokens/s, the step times' quartiles (``ablate --plan``'s range) and, on a CPU, the share of its
    threads' time the steps had (``cpu_share``: as a run records it, ``ablate.meters.SpeedMeter``)."""
    from ablate.measure import cpu_share, summarize_times

    times, tokens_per_step = variant.times, variant.tokens_per_step
    s = summarize_times(times, tokens_per_step)
    q25, _, q75 = statistics.quantiles(times, n=4, method="inclusive") if len(times) > 1 else (times[0],) * 3
    return {"tokens_per_s": {"min": tokens_per_step / s["step_time_s"]["max"], "median": s["tokens_per_s"],
                             "max": tokens_per_step / s["step_time_s"]["min"]}, "timed_steps": s["timed_steps"],
            "step_time_s": {"q25": q25, "median": s["step_time_s"]["median"], "q75": q75},
            "round_tokens_per_s": [tokens_per_step * len(r) / sum(r) for r in variant.round_times if r],
            "cpu_share": cpu_share(variant.cpu_times, times) if variant.device.type == "cpu" else None}
