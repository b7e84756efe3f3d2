"""Speed and utilisation of a training step, as docs/measurements.md defines them (memory: ``ablate.memory``).

Speed
    ``meters.SpeedMeter`` is a Lightning callback that times every training step of a ``fit``
    (forward + backward + optimizer step, nothing else) and reports training throughput as
    the median over the timed steps, after warm-up steps, of ``tokens / step time``.
    :func:`summarize_times` is the one place where step times become that summary; the
    interleaved benchmark times its own steps with :func:`time_call` and summarises them with
    the same function. (The callback lives with the other Lightning code, so that validating a
    config, which reads :class:`MeasureSettings`, never imports Lightning.)

Utilisation
    :func:`utilisation`: training FLOPs per second over the device's peak (:data:`PEAK_FLOPS`),
    MFU (or HFU when the FLOPs count holds a recomputed forward).

Cost
    :func:`job_cost`: what one optimizer step of a config costs (tokens, FLOPs, parameters), the
    model built on the meta device: a budget's unit and ``--plan``'s, without importing Lightning.

Memory
    Peak training memory by category is ``ablate.memory``'s (:func:`measure_training_memory`,
    :func:`cuda_peak_memory`).
"""

from __future__ import annotations

import os
import statistics
import time
import warnings
from dataclasses import dataclass
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import Tensor

from ablate.components import NonNegativeInt, PositiveFloat

if TYPE_CHECKING:
    from omegaconf import DictConfig

__all__ = [
    "MeasureSettings",
    "count_input_tokens",
    "summarize_times",
    "time_call",
    "synchronize",
    "PEAK_FLOPS",
    "peak_flops",
    "utilisation",
]



@dataclass
class MeasureSettings:
    """The ``measure`` node."""

    warmup_steps: NonNegativeInt = 20  # training steps not timed (compilation, allocator warm-up)
    memory: bool = True                # account peak training memory
    peak_flops: PositiveFloat | None = None  # the device's peak FLOP/s for MFU (None: PEAK_FLOPS by name)
    # at the sweep's end, time the variants again interleaved (ablate-table --bench --save) for the speed
    # column: auto where its jobs ran at once or a speed cell was timed under another load (ablate.callbacks)
    retime: Literal["auto", "always", "never"] = "auto"


#: Dense (no 2:4 sparsity) peak FLOP/s by the device's FULL name as ``torch.cuda.get_device_name()``
#: reports it: "16" is the BF16 tensor-core peak (BF16 always accumulates in FP32, as torch's GEMMs
#: do; FP16 is the same on every device here), "32" plain fp32 (non-tensor; torch's default fp32
#: matmuls do not use TF32). MFU = training FLOPs per second / this (Chowdhery et al. 2022, app. B).
#: Matched exactly (``peak_flops``), never by a substring: "NVIDIA H100 PCIe" is not the SXM part,
#: "NVIDIA L40" is not "NVIDIA L4". A datasheet's "with sparsity" figure is written as it is printed,
#: "/ 2". Names: the NVIDIA driver's product-name table (open-gpu-kernel-modules README, "Compatible
#: GPUs"; H200 NVL and B200 from nvidia-smi reports). Left out for want of a checked name or figure:
#: the A10G (AWS's part: no vendor datasheet; not the A10's figures), "NVIDIA H100" (a further SKU),
#: H800/H20/GH200, GeForce and older parts, and the NVL parts' fp32. Set ``measure.peak_flops``.
PEAK_FLOPS: dict[str, dict[str, float]] = {
    # H100 datasheet (nvidia.com/en-us/data-center/h100): SXM BF16 1,979 TF*, FP32 67 TF; PCIe
    # BF16 1,513 TF*, FP32 51 TF; NVL BF16 1,671 TF* (* with sparsity; "one-half lower without")
    "NVIDIA H100 80GB HBM3": {"16": 1979e12 / 2, "32": 67e12},  # the SXM5 part
    "NVIDIA H100 PCIe": {"16": 1513e12 / 2, "32": 51e12},
    "NVIDIA H100 NVL": {"16": 1671e12 / 2},
    # H200 datasheet (nvidia.com/en-us/data-center/h200): SXM BF16 1,979 TF*, FP32 67 TF; NVL 1,671 TF*
    "NVIDIA H200": {"16": 1979e12 / 2, "32": 67e12},  # the SXM part (700 W); the NVL names itself
    "NVIDIA H200 NVL": {"16": 1671e12 / 2},
    # HGX B200 specifications (nvidia.com/en-us/data-center/hgx), per GPU: FP16/BF16 4.5 PF*, FP32 75 TF
    "NVIDIA B200": {"16": 4.5e15 / 2, "32": 75e12},
    # A100 datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4): BF16 312 TF (624 TF*), FP32
    # 19.5 TF, the same for the SXM and PCIe, 40 GB and 80 GB parts
    "NVIDIA A100-SXM4-40GB": {"16": 312e12, "32": 19.5e12},
    "NVIDIA A100-SXM4-80GB": {"16": 312e12, "32": 19.5e12},
    "NVIDIA A100-PCIE-40GB": {"16": 312e12, "32": 19.5e12},
    "NVIDIA A100 80GB PCIe": {"16": 312e12, "32": 19.5e12},
    # L4 datasheet (nvidia.com/en-us/data-center/l4): BF16 242 TF*, FP32 30.3 TF
    "NVIDIA L4": {"16": 242e12 / 2, "32": 30.3e12},
    # L40 datasheet: BF16 181.05 TF (362.1 TF*), FP32 90.5 TF
    "NVIDIA L40": {"16": 181.05e12, "32": 90.5e12},
    # L40S datasheet (nvidia.com/en-us/data-center/l40s): BF16 362.05 TF (733 TF*), FP32 91.6 TF
    "NVIDIA L40S": {"16": 362.05e12, "32": 91.6e12},
    # A10 datasheet (a10-datasheet.pdf): BF16 125 TF (250 TF*), FP32 31.2 TF
    "NVIDIA A10": {"16": 125e12, "32": 31.2e12},
    # AMD Instinct MI300X data sheet (amd.com/.../instinct/mi300/mi300x): peak BF16 1,307.4 TF
    # dense (2,614.9 with sparsity), FP32 (vector and matrix) 163.4 TF. The name is ROCm's
    # (hipDeviceProp.name) as torch reports it; amd-smi's "... OAM" board name is not matched.
    "AMD Instinct MI300X": {"16": 1307.4e12, "32": 163.4e12},
}

_PEAKS_BY_NAME = {name.casefold(): peaks for name, peaks in PEAK_FLOPS.items()}


def _precision_bits(precision: str) -> str | None:
    """The ``PEAK_FLOPS`` column of a Lightning precision: "16" for the 16-bit ones (mixed or
    true), "32" for fp32, None for any other (64-bit, FP8 engines), which has no peak here."""
    p = str(precision).strip().lower()
    if p in {"16", "bf16", "16-mixed", "bf16-mixed", "16-true", "bf16-true"}:
        return "16"
    if p in {"32", "32-true"}:
        return "32"
    return None


def peak_flops(device_name: str, precision: str, override: float | None = None) -> float | None:
    """The peak FLOP/s MFU divides by: ``override`` (``measure.peak_flops``) when set, else the
    ``PEAK_FLOPS`` entry whose name IS ``device_name`` (surrounding whitespace and letter case
    aside: no two devices' names differ only in those) for ``precision``, else None (no MFU)."""
    if override:
        return float(override)
    peaks = _PEAKS_BY_NAME.get(str(device_name).strip().casefold(), {})
    bits = _precision_bits(precision)
    return peaks.get(bits) if bits else None


def utilisation(device_name: str, precision: str, tokens_per_s: float, flops_per_token: float,
                override: float | None = None, recomputes: bool = False) -> dict[str, Any]:
    """A CUDA record's utilisation fields: ``device``, ``peak_flops`` and ``mfu`` (training FLOPs per
    second of one device over its peak), and ``utilisation``: "mfu", or "hfu" when the FLOPs count
    holds a recomputed forward (``recomputes``: attention=linear's checkpointed pattern), which
    makes the ratio hardware FLOPs utilisation. ``mfu_note``, one line, says why ``mfu`` is None or
    that it is HFU; the first of these is also warned."""
    peak = peak_flops(device_name, precision, override)
    fields: dict[str, Any] = {"device": device_name, "peak_flops": peak,
                              "mfu": tokens_per_s * flops_per_token / peak if peak else None}
    if peak is None:
        known = str(device_name).strip().casefold() in _PEAKS_BY_NAME
        why = f"for precision {precision!r}" if known else "for this device"
        fields["mfu_note"] = (f"no MFU: no peak FLOP/s of {device_name!r} {why} in ablate.measure.PEAK_FLOPS; "
                              "set measure.peak_flops=<FLOP/s> (its dense peak at this precision)")
        warnings.warn(fields["mfu_note"], stacklevel=2)
        return fields
    fields["utilisation"] = "hfu" if recomputes else "mfu"
    if recomputes:
        fields["mfu_note"] = ("mfu is HFU (hardware FLOPs utilisation): the FLOPs count includes the forward "
                              "a checkpointed attention pattern (attention=linear) recomputes in its backward")
    return fields

# --------------------------------------------------------------------------------------------
# Speed
# --------------------------------------------------------------------------------------------

def synchronize(device: torch.device | str | None) -> None:
    """Wait for queued kernels on ``device`` (CUDA or MPS); a no-op on CPU or ``None``."""
    if device is None:
        return
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def time_call(fn: Callable[[], Any], device: torch.device | str | None = None,
              clock: Callable[[], float] = time.perf_counter) -> float:
    """Seconds of wall-clock time that ``fn()`` takes, with ``device`` synchronised before the
    clock is read at both ends (so queued GPU work is inside the interval, earlier work is not)."""
    synchronize(device)
    start = clock()
    fn()
    synchronize(device)
    return clock() - start


def cpu_share(cpu_s: Sequence[float], wall_s: Sequence[float]) -> float | None:
    """The share of its threads' time timed steps had: their CPU seconds (all threads) over their
    wall seconds and torch's threads; about 1 alone, lower where another process shared the cores.
    None without a step of wall time."""
    if sum(wall_s) <= 0:
        return None
    return round(sum(cpu_s) / sum(wall_s) / max(1, torch.get_num_threads()), 3)


def summarize_times(times: Sequence[float], tokens_per_step: int | Sequence[int]) -> dict[str, Any]:
    """Summary of timed training steps.

    ``times[i]`` is the duration in seconds of step ``i`` and ``tokens_per_step`` its number of
    input tokens (one int for all steps, or one per step). Returns::

        {"tokens_per_s": median_i(tokens_i / times_i),
         "step_time_s": {"min": .., "median": .., "max": ..},
         "timed_steps": len(times)}

    The median of per-step throughputs, rather than total tokens over total time, keeps one
    slow step (a page fault, another process on a shared machine) from moving the result.
    """
    times = [float(t) for t in times]
    if not times:
        raise ValueError("summarize_times needs at least one step time")
    if isinstance(tokens_per_step, int):
        tokens = [tokens_per_step] * len(times)
    else:
        tokens = [int(n) for n in tokens_per_step]
        if len(tokens) != len(times):
            raise ValueError(f"{len(times)} step times but {len(tokens)} token counts")
    if min(times) <= 0:
        raise ValueError(f"step times must be positive, got {min(times)}")
    return {
        "tokens_per_s": float(statistics.median(n / t for n, t in zip(tokens, times))),
        "step_time_s": {"min": min(times), "median": float(statistics.median(times)), "max": max(times)},
        "timed_steps": len(times),
    }


def load_average() -> float | None:
    """The machine's 1-minute load average (None where the platform has none)."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def cpu_model() -> str | None:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else ``platform.processor()``), None if unknown."""
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8", errors="replace"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or None


def count_input_tokens(batch: Any) -> int:
    """Input tokens of a batch: ``batch.numel()`` for a tensor, ``batch[0].numel()`` for a
    ``(tokens, targets, ...)`` tuple or list, ``batch["input_ids"].numel()`` (or ``"tokens"``)
    for a dict."""
    if isinstance(batch, Tensor):
        return batch.numel()
    if isinstance(batch, (tuple, list)) and batch and isinstance(batch[0], Tensor):
        return batch[0].numel()
    if isinstance(batch, dict):
        for key in ("input_ids", "tokens"):
            if isinstance(batch.get(key), Tensor):
                return batch[key].numel()
    raise TypeError(f"cannot count the tokens of a batch of type {type(batch).__name__}; "
                    "pass SpeedMeter(count_tokens=...)")


# ------------------------------------------------------------------ what a step costs

def flops_per_token(model: Any, seq_len: int, batch_size: int) -> float:
    """Training FLOPs per input token of ``model`` at ``seq_len`` in batches of ``batch_size``
    sequences (docs/measurements.md, "FLOPs")."""
    return float(model.flops_per_token(seq_len, batch_size))


def accumulated_batches(cfg: DictConfig) -> int:
    """How many batches one optimizer step of ``cfg`` trains on (``trainer.accumulate_grad_batches``)."""
    return int(cfg.trainer.get("accumulate_grad_batches") or 1)


def job_cost(cfg: DictConfig) -> dict[str, float]:
    """What one training step of ``cfg`` costs, without data or weights (the task's sizes, the model
    on the meta device): ``{max_steps, tokens_per_step, flops_per_token, params}``, a step being one
    optimizer step (every accumulated batch counted). A budget's unit."""
    from ablate.data import build_task
    from ablate.model.transformer import assemble

    task = build_task(cfg.task)
    with torch.device("meta"):
        model = assemble(cfg, int(task.vocab_size), int(task.n_classes), int(task.max_len), task.pad_id,
                         getattr(task, "layout", None))
    return {"max_steps": int(cfg.trainer.max_steps),
            "tokens_per_step": task.batch_size * task.seq_len * accumulated_batches(cfg),
            "flops_per_token": flops_per_token(model, task.seq_len, task.batch_size), "params": model.num_params()}
