"""Shared machinery of the tasks: the :class:`Task` interface, seeding, and loaders.

A task turns its config keys (``conf/task/<name>.yaml``, minus ``name``) into

* sizes the model needs before it is built: ``vocab_size``, ``n_classes``, ``pad_id``;
* an unbounded, seeded stream of ready ``(tokens, targets)`` batches for training;
* fixed held-out batches at each evaluation length.

Batches are ``(tokens, targets)``, both ``LongTensor (B, T)``; ``targets`` holds ``-100``
(:data:`IGNORE`) wherever nothing is predicted, so one masked cross-entropy and one accuracy
over labelled positions serve every task.

Seeding. The training stream of run ``seed`` comes from ``torch.Generator`` seeded by
``SeedSequence([seed, TRAIN_STREAM, crc32(task)])``; held-out data comes from
``SeedSequence([EVAL_SEED, EVAL_STREAM, crc32(task), length])``, which does not depend on the
run seed: every variant and every seed of a sweep is scored on the very same examples, and the
two streams never share a generator state. Both are plain functions of their inputs, so a new
process with the same seed sees the same batches.
"""

from __future__ import annotations

import zlib
from typing import Any, ClassVar, Iterator, Sequence

import numpy as np
import torch

IGNORE = -100  # target value of positions without a label (cross_entropy's ignore_index)

TRAIN_STREAM = 0x7A1
EVAL_STREAM = 0xE7A1
EVAL_SEED = 20240607  # fixed: held-out sets are the same for every run seed

Batch = tuple[torch.Tensor, torch.Tensor]


def make_generator(*keys: int | str) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded from ``keys`` (ints or strings) via NumPy's SeedSequence."""
    ints = [k if isinstance(k, int) else zlib.crc32(str(k).encode()) for k in keys]
    if any(k < 0 for k in ints):
        ints = [k % (1 << 64) for k in ints]
    state = np.random.SeedSequence(ints).generate_state(2, dtype=np.uint32)
    g = torch.Generator()
    g.manual_seed(int(state[0]) << 31 ^ int(state[1]))
    return g


def train_generator(task: str, seed: int, rank: int = 0) -> torch.Generator:
    """The training stream's generator; each data-parallel rank > 0 gets its own stream
    (rank 0's is the single-process stream)."""
    if rank:
        return make_generator(int(seed), TRAIN_STREAM, task, int(rank))
    return make_generator(int(seed), TRAIN_STREAM, task)


def eval_generator(task: str, length: int) -> torch.Generator:
    return make_generator(EVAL_SEED, EVAL_STREAM, task, int(length))


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


class Task:
    """The contract of a ``task`` option (built-in or your own subclass, named by ``_target_``).

    Built as ``cls(**settings)`` (the YAML's keys but ``_target_`` and ``name``), in every job,
    before the model: set ``vocab_size``, ``n_classes`` (the per-token head size) and ``pad_id``
    there; ``metric`` names the headline accuracy. Implement ``train_batches`` (an unbounded
    seeded stream) and ``eval_batches`` (fixed held-out batches per length), both yielding
    ``(tokens, targets)`` LongTensors (B, T) with ``targets == -100`` where nothing is predicted;
    heavy loading goes into ``_setup``. ``problems(settings)`` reports bad settings without
    reading data. ``check`` verifies all but the data before training.
    """

    name: ClassVar[str] = ""
    metric: ClassVar[str] = "token_accuracy"
    #: whether ``task.path`` must be set (classify, tagging)
    path_required: ClassVar[bool] = False

    vocab_size: int
    n_classes: int
    pad_id: int | None = None

    def __init__(self, seq_len: int, eval_lengths: Sequence[int] = (), batch_size: int = 64,
                 causal: bool = False):
        self.seq_len = int(seq_len)
        self.eval_lengths = [int(x) for x in (eval_lengths or [])]
        self.batch_size = int(batch_size)
        self.causal = bool(causal)
        self._ready = False

    # ---- sizes -------------------------------------------------------------------------
    @property
    def val_lengths(self) -> list[int]:
        return [self.seq_len] + list(self.eval_lengths)

    @property
    def max_len(self) -> int:
        return max(self.val_lengths)

    # ---- data --------------------------------------------------------------------------
    def prepare(self) -> None:
        """Download step (rank 0 only under DDP). Only GLUE without ``path`` needs one."""

    def setup(self) -> None:
        """Heavy loading, done once; every data method calls it first."""
        if not self._ready:
            self._setup()
            self._ready = True

    def _setup(self) -> None:
        pass

    def train_batches(self, seed: int, rank: int = 0) -> Iterator[Batch]:
        """Unbounded stream of training batches, a pure function of ``seed`` (and of the
        data-parallel ``rank``, so ranks see different batches)."""
        raise NotImplementedError

    def eval_batches(self, length: int) -> list[Batch]:
        """The fixed held-out batches at input length ``length``."""
        raise NotImplementedError

    # ---- checks ------------------------------------------------------------------------
    @classmethod
    def problems(cls, cfg: dict, context: Any = None) -> list[str]:
        """Human-readable problems of the settings ``cfg`` beyond their types (which
        ``ablate.components`` checks from the constructor's signature); empty if fine. Cheap:
        reads no data."""
        out: list[str] = []
        seq_len = cfg.get("seq_len")
        if "seq_len" in cfg and not (_is_int(seq_len) and seq_len > 0):
            out.append(f"task.seq_len must be a positive integer, got {seq_len!r}")
        bs = cfg.get("batch_size", 1)
        if not (_is_int(bs) and bs > 0):
            out.append(f"task.batch_size must be a positive integer, got {bs!r}")
        ev = cfg.get("eval_lengths", [])
        if ev is None:
            ev = []
        if not isinstance(ev, (list, tuple)):
            out.append(f"task.eval_lengths must be a list of integers, got {ev!r}")
        else:
            for x in ev:
                if not (_is_int(x) and x > 0):
                    out.append(f"task.eval_lengths must hold positive integers, got {x!r}")
                elif _is_int(seq_len) and x < seq_len:
                    out.append(f"task.eval_lengths entry {x} is shorter than task.seq_len={seq_len}; "
                               "eval_lengths are extra, longer lengths to evaluate at")
        for key in ("n_test",):
            if key in cfg and cfg[key] is not None and not (_is_int(cfg[key]) and cfg[key] > 0):
                out.append(f"task.{key} must be a positive integer, got {cfg[key]!r}")
        return out


class SyntheticTask(Task):
    """A task whose examples are generated from a seed: whole batches at a time."""

    def __init__(self, seq_len: int, eval_lengths: Sequence[int] = (), batch_size: int = 64,
                 causal: bool = False, n_test: int = 1000):
        super().__init__(seq_len, eval_lengths, batch_size, causal)
        self.n_test = int(n_test)

    def make_batch(self, g: torch.Generator, batch: int, length: int) -> Batch:
        raise NotImplementedError

    def train_batches(self, seed: int, rank: int = 0) -> Iterator[Batch]:
        g = train_generator(self.name, seed, rank)
        B, T = self.batch_size, self.seq_len
        while True:
            yield self.make_batch(g, B, T)

    def eval_batches(self, length: int) -> list[Batch]:
        g = eval_generator(self.name, length)
        out, left = [], self.n_test
        while left > 0:
            b = min(self.batch_size, left)
            out.append(self.make_batch(g, b, length))
            left -= b
        return out


class RowsStream:
    """Shuffled, unbounded stream over N pre-encoded rows: successive seeded permutations
    read ``batch_size`` rows at a time (batches cross epoch boundaries, so every batch is full)."""

    def __init__(self, n: int, batch_size: int, g: torch.Generator):
        self.n, self.batch_size, self.g = n, batch_size, g

    def __iter__(self) -> Iterator[torch.Tensor]:
        buf = torch.empty(0, dtype=torch.long)
        while True:
            while buf.numel() < self.batch_size:
                buf = torch.cat([buf, torch.randperm(self.n, generator=self.g)])
            idx, buf = buf[: self.batch_size], buf[self.batch_size:]
            yield idx


def check(target: Any, settings: dict, context: Any = None) -> list[str]:
    """Every way ``target`` breaks the task contract, without building it (which reads data)."""
    from ablate.components import merge_problems, own_problems, qualname, settings_problems

    if not (isinstance(target, type) and issubclass(target, Task)):
        return [f"task: {qualname(target)} must be a subclass of ablate.data.Task"]
    return merge_problems(settings_problems("task", target, settings), own_problems("task", target, settings, context))


def build_task(node: Any) -> Task:
    """The task of a ``task`` config node (``DictConfig`` or mapping); raises ``ValueError``
    listing every problem."""
    from omegaconf import OmegaConf

    from ablate.components import resolve

    node = OmegaConf.to_container(OmegaConf.create(dict(node)), resolve=True)
    target, settings = resolve("task", node)
    problems = check(target, settings)
    if problems:
        raise ValueError("invalid task config:\n  " + "\n  ".join(problems))
    return target(**settings)
