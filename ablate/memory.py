"""Peak training memory by category: parameters, gradients, optimizer state and activations.

:func:`measure_training_memory` runs a few training steps on a copy of the model and reports the
peak of live tensor bytes, split into those categories (docs/measurements.md). It counts tensor
storages, not allocator blocks, so it is device independent and deterministic: the same model,
optimizer and batch give the same numbers on every machine and every call. On CUDA the
allocator's own peak (``torch.cuda.max_memory_allocated``) is the headline number instead;
:func:`cuda_peak_memory` measures it for the same steps.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

__all__ = ["measure_training_memory", "cuda_peak_memory"]

PARAMETERS, GRADIENTS, OPTIMIZER, ACTIVATIONS = "parameters", "gradients", "optimizer", "activations"


class _LiveStorageTracker(TorchDispatchMode):
    """Bytes of live tensor storages, their peak, and which storages made up the peak.

    Every tensor that an ATen operator takes or returns while the mode is active (plus those
    passed to :meth:`track`) has its untyped storage registered once, by identity: views and
    in-place results share their base's storage and are not counted again. A weakref on the
    storage object removes it when the storage is freed (PyTorch keeps one Python object per
    live storage, so the weakref dies with the storage, not with a Python handle). The live
    total is compared with the peak after every operator, when the operator's inputs and
    outputs are all alive; memory an operator allocates and frees internally is not seen.

    Each storage gets a serial number (never reused, unlike addresses), and a role once it is
    seen serving as a parameter, gradient or optimizer state; the role is looked up only at
    the end, so a gradient counts as a gradient even at a peak reached while backward had just
    computed it and not yet stored it in ``.grad``.
    """

    def __init__(self) -> None:
        super().__init__()
        self._serial_of: dict[int, int] = {}  # id(storage object) -> serial, live storages only
        self._refs: dict[int, weakref.ref] = {}  # serial -> weakref whose callback frees it
        self._live: dict[int, int] = {}  # serial -> bytes, live storages only
        self._next_serial = 0
        self.live_bytes = 0
        self.peak_bytes = 0
        self.peak_storages: dict[int, int] = {}  # serial -> bytes, at the first time the peak was reached
        self.roles: dict[int, str] = {}  # serial -> first role seen

    def track(self, tensor: Tensor, role: str | None = None) -> None:
        """Register ``tensor``'s storage (if new, or resized) and give it ``role`` if it has none."""
        try:
            storage = tensor.untyped_storage()
        except (RuntimeError, NotImplementedError):  # sparse, nested or wrapper tensors: no storage
            return
        if storage.device.type == "meta":
            return
        key, nbytes = id(storage), storage.nbytes()
        serial = self._serial_of.get(key)
        if serial is None:
            serial = self._next_serial
            self._next_serial += 1
            self._serial_of[key] = serial
            self._refs[serial] = weakref.ref(storage, lambda _, s=serial, k=key: self._free(s, k))
            self._live[serial] = nbytes
            self.live_bytes += nbytes
        elif self._live[serial] != nbytes:  # resized in place (resize_, out= arguments)
            self.live_bytes += nbytes - self._live[serial]
            self._live[serial] = nbytes
        if role is not None:
            self.roles.setdefault(serial, role)

    def _free(self, serial: int, key: int) -> None:
        self.live_bytes -= self._live.pop(serial)
        del self._refs[serial]
        if self._serial_of.get(key) == serial:
            del self._serial_of[key]

    def update_peak(self) -> None:
        if self.live_bytes > self.peak_bytes:
            self.peak_bytes = self.live_bytes
            self.peak_storages = dict(self._live)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten((out, args, kwargs))[0]:
            if isinstance(t, Tensor):
                self.track(t)
        self.update_peak()
        return out

    def peak_breakdown(self) -> dict[str, int]:
        result = dict.fromkeys((PARAMETERS, GRADIENTS, OPTIMIZER, ACTIVATIONS), 0)
        for serial, nbytes in self.peak_storages.items():
            result[self.roles.get(serial, ACTIVATIONS)] += nbytes
        result["peak"] = sum(result.values())
        assert result["peak"] == self.peak_bytes
        return result

    def release(self) -> None:
        """Forget every storage (the weakref callbacks die with the weakrefs)."""
        self._refs.clear()
        self._serial_of.clear()
        self._live.clear()


def _tensors(obj: Any) -> list[Tensor]:
    return [t for t in tree_flatten(obj)[0] if isinstance(t, Tensor)]


def _train_steps(model: nn.Module, optimizer: torch.optim.Optimizer, batch: Any,
                 loss_fn: Callable[[nn.Module, Any], Tensor], steps: int,
                 after_step: Callable[[], None] | None = None) -> None:
    """``steps`` plain training steps: zero_grad(set_to_none=True), forward + loss, backward,
    optimizer step. The loss of a step stays alive until its optimizer step has finished."""
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model, batch)
        loss.backward()
        optimizer.step()
        if after_step is not None:
            after_step()
        del loss


def _cuda_devices(model: nn.Module, batch: Any) -> list[int]:
    tensors = [*model.parameters(), *model.buffers(), *_tensors(batch)]
    return sorted({t.device.index or 0 for t in tensors if t.is_cuda})


@contextlib.contextmanager
def _fixed_seed(cuda_devices: list[int]) -> Iterator[None]:
    """Seed 0 for the CPU generator and the given CUDA devices' generators inside, and their
    previous states restored afterwards. (``torch.manual_seed`` would also re-seed, or queue a
    seed for, every other CUDA device, which ``fork_rng`` would not restore.)"""
    with torch.random.fork_rng(devices=cuda_devices):
        torch.random.default_generator.manual_seed(0)
        for index in cuda_devices:
            with torch.cuda.device(index):
                torch.cuda.manual_seed(0)
        yield


def measure_training_memory(model: nn.Module,
                            make_optimizer: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer],
                            batch: Any, loss_fn: Callable[[nn.Module, Any], Tensor],
                            steps: int = 2) -> dict[str, int]:
    """Peak live tensor bytes during ``steps`` training steps, by category (docs/measurements.md, *memory*).

    Runs ``steps`` steps — ``zero_grad(set_to_none=True)``, ``loss = loss_fn(model, batch)``,
    ``loss.backward()``, ``optimizer.step()`` — on a deep copy of ``model`` in training mode
    with a fresh ``make_optimizer(copy.parameters())``, under a fixed seed. The caller's model,
    its gradients and the global RNG state are left as they were. Two steps by default: the
    first creates the optimizer state, the second runs forward and backward with it alive.

    Counted: every tensor storage alive between two ATen operator calls (parameters and the
    batch from the start, and everything the steps create), each once, at its ``nbytes``.
    Returns ints, in bytes, at the moment the live total first reached its maximum:

    - ``parameters``: the model's parameters and buffers;
    - ``gradients``: storages that serve as a parameter's ``.grad``;
    - ``optimizer``: tensors in ``optimizer.state`` (Adam: ``exp_avg``, ``exp_avg_sq``, and
      its 0-dim float32 ``step`` per parameter);
    - ``activations``: everything else alive then — the batch, tensors saved for backward,
      outputs and gradients of intermediate results, and temporaries (including the
      optimizer's per-step temporaries, e.g. Adam's ``exp_avg_sq.sqrt() / c``);
    - ``peak``: their sum.

    Not counted: allocator rounding and caching, memory an operator allocates and frees
    internally (workspaces), and non-tensor memory. The result depends only on the model,
    optimizer, batch and loss, never on the machine, the allocator, addresses or timing.
    Pass the bare ``nn.Module`` (not a LightningModule attached to a trainer: it is deep-copied).
    """
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    # no collection during the steps: cyclic garbage made there lives until the end, every time.
    # (Garbage from before is not tracked, so no gc.collect() first: with torch and Lightning
    # loaded a full collection costs ~0.2 s, most of this measurement for a small model.)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    tracker = _LiveStorageTracker()
    try:
        with _fixed_seed(_cuda_devices(model, batch)):
            work = copy.deepcopy(model).train()
            for p in work.parameters():
                p.grad = None
            optimizer = make_optimizer(work.parameters())
            for t in (*work.parameters(), *work.buffers()):
                tracker.track(t, PARAMETERS)
            for t in _tensors(batch):
                tracker.track(t)
            hooks = [p.register_post_accumulate_grad_hook(lambda p: tracker.track(p.grad, GRADIENTS))
                     for p in work.parameters() if p.requires_grad]

            def mark_optimizer_state() -> None:
                for t in _tensors(list(optimizer.state.values())):
                    tracker.track(t, OPTIMIZER)

            tracker.update_peak()
            with tracker:
                _train_steps(work, optimizer, batch, loss_fn, steps, after_step=mark_optimizer_state)
            for h in hooks:
                h.remove()
            result = tracker.peak_breakdown()
    finally:
        tracker.release()
        if gc_was_enabled:
            gc.enable()
    return result


def cuda_peak_memory(model: nn.Module,
                     make_optimizer: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer],
                     batch: Any, loss_fn: Callable[[nn.Module, Any], Tensor],
                     steps: int = 2) -> dict[str, int]:
    """The CUDA allocator's peak for the same steps as :func:`measure_training_memory`:
    ``{"peak": bytes}``.

    ``model`` and ``batch`` must already be on the GPU. The steps run on deep copies of both
    (so the batch is counted, as in the CPU accounting); ``peak`` is
    ``torch.cuda.max_memory_allocated`` during the steps minus what was allocated before the
    copies were made. Unlike the CPU accounting it includes allocator rounding (512-byte
    blocks) and library workspaces (cuBLAS, cuDNN). Resets the device's peak memory stats.
    During a real ``fit`` the caller can instead reset the stats before and read
    ``torch.cuda.max_memory_allocated()`` after.
    """
    device = next(model.parameters()).device
    if device.type != "cuda":
        raise ValueError(f"cuda_peak_memory needs a model on a CUDA device, got {device}")
    with _fixed_seed(_cuda_devices(model, batch)):
        gc.collect()
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        work = copy.deepcopy(model).train()
        for p in work.parameters():
            p.grad = None
        work_batch = copy.deepcopy(batch)
        optimizer = make_optimizer(work.parameters())
        _train_steps(work, optimizer, work_batch, loss_fn, steps)
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device) - before
        del work, work_batch, optimizer
    return {"peak": int(peak)}
