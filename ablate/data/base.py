"""Shared machinery of the tasks: the :class:`Task` interface, seeding, and loaders.

A task turns its config keys (``conf/task/<name>.yaml``, minus ``name``) into

* sizes the model needs before it is built: ``vocab_size``, ``n_classes``, ``pad_id``;
* an unbounded, seeded stream of ready ``(tokens, targets)`` batches for training;
* two fixed held-out splits (:data:`SPLITS`): ``"validation"``, for choices made while
  developing (learning rates, early stopping), and ``"test"``, the reported numbers. The
  datamodule reads validation at the training length and test at every evaluation length.

Batches are ``(tokens, targets)``, both ``LongTensor (B, T)``; ``targets`` holds ``-100``
(:data:`IGNORE`) wherever nothing is predicted, so one masked cross-entropy and one accuracy
over labelled positions serve every task.

Seeding. The training stream of run ``seed`` comes from ``torch.Generator`` seeded by
``SeedSequence([seed, TRAIN_STREAM, crc32(task)])``; generated test data comes from
``SeedSequence([EVAL_SEED, EVAL_STREAM, crc32(task), length])`` and generated validation data
from ``SeedSequence([EVAL_SEED, VAL_STREAM, crc32(task), length])``; neither depends on the run
seed, so every variant and every seed of a sweep is scored on the very same examples, and no two
streams share a generator state. Tasks over files carve their validation rows out of the
training file with ``SeedSequence([EVAL_SEED, VAL_STREAM, crc32(task)])`` (:func:`carve_validation`),
the same rows for every seed. All are plain functions of their inputs, so a new process with the
same seed sees the same batches.
"""

from __future__ import annotations

import numbers

import inspect
import zlib
from typing import Any, ClassVar, Iterator, Sequence

import numpy as np
import torch

IGNORE = -100  # target value of positions without a label (cross_entropy's ignore_index)

TRAIN_STREAM = 0x7A1
EVAL_STREAM = 0xE7A1  # the test split (the one held-out split before validation existed)
VAL_STREAM = 0x5A11D  # the validation split
EVAL_SEED = 20240607  # fixed: held-out sets are the same for every run seed

#: the held-out splits of every task, in the order a run uses them
SPLITS: tuple[str, ...] = ("validation", "test")
#: default size of the validation split (examples, or windows for ``lm``): cheap to evaluate often
N_VAL = 256

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
    """The test split's generator at ``length`` (unchanged since there was one held-out split)."""
    return make_generator(EVAL_SEED, EVAL_STREAM, task, int(length))


def validation_generator(task: str, length: int) -> torch.Generator:
    """The validation split's generator at ``length``: fixed, independent of the test stream."""
    return make_generator(EVAL_SEED, VAL_STREAM, task, int(length))


def held_out_generator(task: str, length: int, split: str) -> torch.Generator:
    """The generator of held-out ``split`` ("validation" or "test") at ``length``."""
    check_split(split)
    return validation_generator(task, length) if split == "validation" else eval_generator(task, length)


def check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(map(repr, SPLITS))}, got {split!r}")


def validation_size(n_rows: int, n_val: int) -> int:
    """Rows carved out of ``n_rows`` training rows for validation: ``n_val``, but at most a tenth
    of them (and at least one), so a small training file keeps nine tenths for training."""
    return max(1, min(int(n_val), n_rows // 10))


def carve_validation(task: str, n_rows: int, n_val: int, source: str = "") -> tuple[torch.Tensor, torch.Tensor]:
    """Split row indices ``0 .. n_rows-1`` of a training file into ``(train, validation)``, both
    sorted: ``validation_size(n_rows, n_val)`` rows drawn by a fixed permutation (the same for
    every run seed), the rest train. Raises ``ValueError`` when fewer than two rows exist."""
    if n_rows < 2:
        raise ValueError(f"{source or task}: {n_rows} example{'s' if n_rows != 1 else ''}; at least 2 "
                         "are needed, since validation examples are taken out of the training file")
    k = validation_size(n_rows, n_val)
    perm = torch.randperm(n_rows, generator=make_generator(EVAL_SEED, VAL_STREAM, task))
    return perm[k:].sort().values, perm[:k].sort().values


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


class Task:
    """The contract of a ``task`` option (built-in or your own subclass, named by ``_target_``).

    Built as ``cls(**settings)`` (the YAML's keys but ``_target_`` and ``name``), in every job,
    before the model: set ``vocab_size``, ``n_classes`` (the per-token head size) and ``pad_id``
    there; ``metric`` names the headline accuracy. Implement

    * ``train_batches(seed, rank=0)``: an unbounded stream, a pure function of its arguments;
    * ``eval_batches(length, split="test")``: the fixed held-out batches of ``split`` at input
      length ``length``. ``split="test"`` is the reported held-out set; ``split="validation"``
      is a second fixed set, disjoint from test and from training, for choices made while
      developing. Neither may depend on the run seed. The datamodule asks for validation at
      ``seq_len`` and for test at every length of ``test_lengths``.

    Both yield ``(tokens, targets)`` LongTensors (B, T) with ``targets == -100`` where nothing
    is predicted; heavy loading goes into ``_setup``. A :class:`SyntheticTask` only implements
    ``make_batch``: it draws each split from its own fixed stream. ``problems(settings)`` reports
    bad settings without reading data. ``check`` verifies all but the data before training
    (an ``eval_batches`` without a ``split`` argument, the contract before validation existed,
    is reported there).
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
    def test_lengths(self) -> list[int]:
        """The lengths the test split is read at: ``seq_len``, then ``eval_lengths``."""
        return [self.seq_len] + list(self.eval_lengths)

    @property
    def val_lengths(self) -> list[int]:
        """Older name of :attr:`test_lengths`."""
        return self.test_lengths

    @property
    def max_len(self) -> int:
        return max(self.test_lengths)

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

    def eval_batches(self, length: int, split: str = "test") -> list[Batch]:
        """The fixed held-out batches of ``split`` ("validation" or "test") at input length
        ``length``; the same for every run seed."""
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
        for key in ("n_test", "n_val"):
            if key in cfg and cfg[key] is not None and not (_is_int(cfg[key]) and cfg[key] > 0):
                out.append(f"task.{key} must be a positive integer, got {cfg[key]!r}")
        return out


class TaskContractError(ValueError):
    """A task's batches break the batch contract (checked on the first batch of every stream)."""


def batch_problems(task: Task, batch: Any, length: int, what: str, batch_size: int | None = None) -> list[str]:
    """The rules of the batch contract (``(tokens, targets)``, both LongTensor (B, T); token ids in
    ``[0, vocab_size)``; targets ``-100`` or in ``[0, n_classes)``, at least one labelled; a task with
    ``regression`` true: float32 targets, ``-100`` or finite scores) that
    ``batch`` breaks, each naming the task class and ``what`` batch it is (e.g. ``the first
    training batch``). ``length``: the T asked for; ``batch_size``: the B asked for (None: any)."""
    from ablate.components import qualname

    name = f"task {qualname(type(task))}: {what}"
    if not (isinstance(batch, (tuple, list)) and len(batch) == 2
            and all(isinstance(t, torch.Tensor) for t in batch)):
        return [f"{name} must be a pair (tokens, targets) of tensors, got {type(batch).__name__}"
                + (f" of {len(batch)}" if isinstance(batch, (tuple, list)) else "")]
    tokens, targets = batch
    regression = bool(getattr(task, "regression", False))  # its targets are scores (GLUE's STS-B)
    out = [f"{name}: tokens must be a LongTensor (torch.int64), got {tokens.dtype}"] if tokens.dtype != torch.long else []
    if regression and targets.dtype != torch.float32:
        out.append(f"{name}: targets must be a FloatTensor (torch.float32) for a regression, got {targets.dtype}")
    elif not regression and targets.dtype != torch.long:
        out.append(f"{name}: targets must be a LongTensor (torch.int64), got {targets.dtype}")
    if tokens.dim() != 2 or tokens.shape != targets.shape:
        return out + [f"{name}: tokens and targets must both be (batch, length), got {tuple(tokens.shape)} "
                      f"and {tuple(targets.shape)}"]
    if tokens.shape[1] != length:
        out.append(f"{name}: its length is {tokens.shape[1]}, it must be {length}")
    if batch_size is not None and tokens.shape[0] != batch_size:
        out.append(f"{name}: it holds {tokens.shape[0]} sequences, task.batch_size is {batch_size}")
    if out or tokens.numel() == 0:
        return out
    if int(tokens.min()) < 0 or int(tokens.max()) >= int(task.vocab_size):
        out.append(f"{name}: token ids must lie in [0, vocab_size={task.vocab_size}), got "
                   f"{int(tokens.min())}..{int(tokens.max())}")
    labelled = targets[targets != IGNORE]
    if labelled.numel() == 0:
        out.append(f"{name}: no position is labelled (every target is {IGNORE}): there is nothing to learn")
    elif regression:
        if not bool(labelled.isfinite().all()):
            out.append(f"{name}: a regression's targets must be finite numbers (or {IGNORE})")
    elif int(labelled.min()) < 0 or int(labelled.max()) >= int(task.n_classes):
        out.append(f"{name}: targets must be {IGNORE} or lie in [0, n_classes={task.n_classes}), got "
                   f"{int(labelled.min())}..{int(labelled.max())}")
    return out


def check_batch(task: Task, batch: Any, length: int, what: str, batch_size: int | None = None) -> None:
    """Raise :class:`TaskContractError` naming every rule of the batch contract ``batch`` breaks."""
    problems = batch_problems(task, batch, length, what, batch_size)
    if problems:
        raise TaskContractError("the batch contract (docs/extending.md, Tasks) is broken:\n  "
                                + "\n  ".join(problems))


class SyntheticTask(Task):
    """A task whose examples are generated from a seed: whole batches at a time."""

    def __init__(self, seq_len: int, eval_lengths: Sequence[int] = (), batch_size: int = 64,
                 causal: bool = False, n_test: int = 1000, n_val: int = N_VAL):
        super().__init__(seq_len, eval_lengths, batch_size, causal)
        self.n_test = int(n_test)
        self.n_val = int(n_val)

    def make_batch(self, g: torch.Generator, batch: int, length: int) -> Batch:
        raise NotImplementedError

    def train_batches(self, seed: int, rank: int = 0) -> Iterator[Batch]:
        g = train_generator(self.name, seed, rank)
        B, T = self.batch_size, self.seq_len
        while True:
            yield self.make_batch(g, B, T)

    def eval_batches(self, length: int, split: str = "test") -> list[Batch]:
        """``n_test`` (test) or ``n_val`` (validation) examples of ``length``, each split drawn
        from its own fixed stream. Both streams are independent of training and of each other;
        where the space of sequences is small, an example may still recur by chance."""
        g = held_out_generator(self.name, length, split)
        out, left = [], self.n_test if split == "test" else self.n_val
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
    return contract_problems(target) + merge_problems(settings_problems("task", target, settings),
                                                      own_problems("task", target, settings, context))


def contract_problems(target: type[Task]) -> list[str]:
    """The ways the methods of task class ``target`` break the contract, read from their
    signatures: ``eval_batches`` must take a ``split``. A task written when there was one
    held-out split (``eval_batches(self, length)``) is stopped here, before training, rather
    than failing when it is first asked for a split after training."""
    from ablate.components import qualname

    try:
        params = inspect.signature(target.eval_batches).parameters
    except (TypeError, ValueError):
        return []
    if "split" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return []
    return [f"task: {qualname(target)}.eval_batches({', '.join(params)}) takes no "
            "`split`: a task now has two held-out splits. Define eval_batches(self, length, "
            "split='test'): for split='test' return the held-out batches it returns today, for "
            "split='validation' other fixed batches, disjoint from test and from training "
            "(ablate.data.base.validation_generator gives generated tasks their own stream; a "
            "SyntheticTask that implements only make_batch has both splits already). "
            "See docs/extending.md, Tasks"]


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
    task = target(**settings)
    problems = size_problems(task)
    if problems:
        raise TaskContractError("the task contract (docs/extending.md, Tasks) is broken:\n  " + "\n  ".join(problems))
    return task


def size_problems(task: Task) -> list[str]:
    """What is wrong with the sizes a built task reports for the model: ``vocab_size`` and
    ``n_classes`` positive integers, ``pad_id`` None or a token id in ``[0, vocab_size)``."""
    from ablate.components import qualname

    def integer(x: Any) -> bool:  # NumPy's integers too
        return isinstance(x, numbers.Integral) and not isinstance(x, bool)

    name, out = f"task {qualname(type(task))}", []
    sizes = {key: getattr(task, key, None) for key in ("vocab_size", "n_classes")}
    for key, value in sizes.items():
        if not (integer(value) and value > 0):
            out.append(f"{name}: {key} must be a positive integer, got {value!r}")
    pad = getattr(task, "pad_id", None)
    vocab = sizes["vocab_size"]
    if pad is not None and not (integer(pad) and 0 <= pad and (not integer(vocab) or pad < vocab)):
        out.append(f"{name}: pad_id must be None or a token id in [0, vocab_size={vocab!r}), got {pad!r}")
    return out
