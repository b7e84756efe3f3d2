"""Lightning callbacks that time a fit's steps: :class:`SpeedMeter` (tokens per second, each
step's wall and CPU time; docs/measurements.md, *speed*) and :class:`PaceCheck` (a sweep's job
against the step time its sweep's first estimate gave it, ``ablate.pace``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import pytorch_lightning as pl

from ablate.measure import count_input_tokens, cpu_share, summarize_times, synchronize


class SpeedMeter(pl.Callback):
    """Training throughput of a Lightning ``fit``: tokens per second (docs/measurements.md, *speed*).

    What one timed interval contains: everything from the end of the last callback's
    ``on_train_batch_start`` to the start of the first callback's ``on_train_batch_end`` —
    the LightningModule's ``on_train_batch_start``, ``training_step`` (forward and loss,
    including ``self.log`` calls, which only store values), backward, the optimizer step and a
    per-step LR scheduler update. Outside it: fetching the batch and moving it to the device,
    other callbacks' batch hooks (progress bar, LR monitor, checkpointing), writing metrics to
    the loggers (``update_train_step_metrics`` runs after ``on_train_batch_end``) and
    validation. To get that order the meter moves itself to the front of ``trainer.callbacks``
    in ``setup`` and appends a small companion callback, which starts the clock, to the end.
    On CUDA/MPS the device is synchronised before each clock reading.

    Each training batch is one step (with gradient accumulation, one micro-batch). Tokens per
    step are ``count_tokens(batch)``, by default the input tokens ``batch[0].numel()`` of a
    ``(tokens, targets)`` batch (see :func:`count_input_tokens`).

    Warm-up rule: of the ``n`` steps that ran, the first ``min(warmup_steps, n - 1)`` are not
    timed. So with enough steps exactly ``warmup_steps`` are skipped, and a short debug run
    still reports its last step; :meth:`summary` returns a result whenever one step ran.
    """

    def __init__(self, warmup_steps: int = 10, count_tokens: Callable[[Any], int] = count_input_tokens,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        if warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {warmup_steps}")
        self.warmup_steps = int(warmup_steps)
        self.count_tokens = count_tokens
        self.clock = clock
        self.step_times: list[float] = []
        self.step_tokens: list[int] = []
        self.step_cpu: list[float] = []   # the process's CPU seconds in each timed step (all its threads)
        self._start: float | None = None
        self._cpu_start = 0.0
        self._on_cpu = True
        self._tokens = 0
        self._starter = _StepClockStart(self)

    # -- Lightning hooks --------------------------------------------------------------------

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        self.step_times, self.step_tokens, self.step_cpu, self._start = [], [], [], None
        self._on_cpu = pl_module.device.type == "cpu"
        others = [cb for cb in trainer.callbacks if cb is not self and cb is not self._starter]
        # A new list, not an in-place edit: Lightning may be iterating over the old one.
        trainer.callbacks = [self, *others, self._starter]

    def _begin_step(self, pl_module: pl.LightningModule, batch: Any) -> None:
        self._tokens = int(self.count_tokens(batch))
        synchronize(pl_module.device)
        self._cpu_start = time.process_time()
        self._start = self.clock()

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        if self._start is None:
            return
        synchronize(pl_module.device)
        self.step_times.append(self.clock() - self._start)
        self.step_cpu.append(time.process_time() - self._cpu_start)
        self.step_tokens.append(self._tokens)
        self._start = None

    # -- a resumed fit keeps the steps timed before its checkpoint ---------------------------

    def state_dict(self) -> dict[str, Any]:
        return {"step_times": list(self.step_times), "step_tokens": list(self.step_tokens), "step_cpu": list(self.step_cpu)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step_times = list(state.get("step_times", []))
        self.step_tokens = list(state.get("step_tokens", []))
        self.step_cpu = list(state.get("step_cpu", []))

    # -- results ----------------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        """``{"tokens_per_s", "step_time_s": {"min", "median", "max"}, "timed_steps"}`` over
        the steps after warm-up (see the class docstring for the rule). Raises ``RuntimeError``
        when no training step completed."""
        n = len(self.step_times)
        if n == 0:
            raise RuntimeError("SpeedMeter: no training step completed, nothing to summarise")
        skip = min(self.warmup_steps, n - 1)
        out = summarize_times(self.step_times[skip:], self.step_tokens[skip:])
        cpu, wall = self.step_cpu[skip:], self.step_times[skip:]
        share = cpu_share(cpu, wall) if self._on_cpu and len(cpu) == len(wall) else None
        if share is not None:  # how much of its cores the run had while timed
            out["cpu_share"] = share
        return out


class PaceCheck(pl.Callback):
    """Compares a job's steps, as :class:`SpeedMeter` times them, with the step time its sweep's first
    estimate gave them, and prints one line when they run far slower or faster (``ablate.pace``)."""

    def __init__(self, meter: SpeedMeter, sweep_dir: str | Path, step_key: str) -> None:
        from ablate.pace import SweepEstimate

        self.meter, self.sweep_dir = meter, Path(sweep_dir)
        self.estimate = SweepEstimate.read(sweep_dir)
        self.expected_s = self.estimate.step_s.get(step_key) if self.estimate else None
        self.said = False

    @property
    def active(self) -> bool:
        """Whether the sweep started with an estimate of this job's steps."""
        return bool(self.expected_s)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        from ablate.pace import CHECK_EVERY, MIN_STEPS, departure, jobs_left, pace_line, remember_said

        times, skip = self.meter.step_times, self.meter.warmup_steps
        timed = len(times) - skip  # a look every CHECK_EVERY steps, at the last MIN_STEPS only (no copy a step)
        if self.said or not self.active or not trainer.is_global_zero or timed < MIN_STEPS or timed % CHECK_EVERY:
            return
        pace = departure(self.estimate, self.expected_s, times[-MIN_STEPS:])
        if pace is None:
            return
        self.said = True
        steps_left = max(0, int(trainer.max_steps) - trainer.global_step)
        line = pace_line(self.estimate, self.expected_s, pace, steps_left, jobs_left(self.sweep_dir, self.estimate))
        print(line, flush=True)
        remember_said(self.sweep_dir, pace, line)


class _StepClockStart(pl.Callback):
    """Starts :class:`SpeedMeter`'s clock; kept last in ``trainer.callbacks`` so that every
    other callback's ``on_train_batch_start`` has run before the clock starts."""

    def __init__(self, meter: SpeedMeter) -> None:
        self.meter = meter

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        self.meter._begin_step(pl_module, batch)
