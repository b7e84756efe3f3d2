"""``AblateDataModule``: the one LightningDataModule of every task."""

from __future__ import annotations

import itertools
from typing import Any, Iterator

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from .base import IGNORE, Batch, Task, build_task, check_batch, check_split


def _identity(batch):
    return batch


def rank_share(batches: list[Batch], rank: int, world: int) -> list[Batch]:
    """Rank ``rank`` of ``world``'s share of a held-out split: batches r, r+w, ... where every rank
    gets one; else (a split of fewer batches than ranks: a small dev set) rows r, r+w, ... as one
    batch, and a rank left without a row gets one whose labels are all ignored, so it still runs
    the evaluation and its collectives and adds nothing to the sums (Lightning stops on a rank with
    an empty loader)."""
    if len(batches) >= world:
        return batches[rank::world]
    tokens, targets = (torch.cat(parts) for parts in zip(*batches))
    if rank < len(tokens):
        return [(tokens[rank::world], targets[rank::world])]
    return [(tokens[:1], torch.full_like(targets[:1], IGNORE))]


def _rank() -> int:
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist.get_rank()
    return 0


class TrainStream(IterableDataset):
    """The task's unbounded training stream of ready ``(B, T)`` batches. Each ``iter()``
    restarts it from the beginning, so it is a pure function of ``seed``. Under data-parallel
    training each rank draws its own stream (Lightning adds no sampler to an iterable)."""

    def __init__(self, task: Task, seed: int, skip: int = 0):
        self.task, self.seed, self.skip = task, seed, skip

    def __iter__(self) -> Iterator[Batch]:
        """From batch ``skip`` on: a job resumed from a checkpoint at step s continues the stream
        where it stopped (``skip`` = s batches, the same ones the interrupted job drew)."""
        stream = self.task.train_batches(self.seed, _rank())
        first = next(stream)  # checked before training: a broken contract is named, not a PyTorch error
        check_batch(self.task, first, self.task.seq_len, "the first training batch", self.task.batch_size)
        return itertools.islice(itertools.chain([first], stream), self.skip, None)


class FixedBatches(Dataset):
    """A fixed list of ready batches (a held-out split at one length)."""

    def __init__(self, batches: list[Batch]):
        self.batches = batches

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int) -> Batch:
        return self.batches[i]


class AblateDataModule(pl.LightningDataModule):
    """Data of any task, built from ``task_cfg`` (the ``task`` node).

    Known after construction (so the model can be built): ``vocab_size``, ``n_classes``
    (per-token head size), ``pad_id`` (``None`` for fixed-length tasks; padding is on the
    right), ``test_lengths`` (``[seq_len] + eval_lengths``; ``val_lengths`` is the same list
    under its older name), ``max_len``, ``metric`` (label of the accuracy), ``causal``,
    ``seq_len``, ``batch_size``, ``tokens_per_batch`` (``B*T`` of the input); for a seq2seq task
    ``layout`` (how its rows split into source and target; else None) and ``max_decode``.

    Loaders, all pure functions of the task and ``seed``:

    * ``train_dataloader()``: the unbounded training stream (``trainer.max_steps`` ends training);
    * ``val_dataloader()``: ONE loader, the validation split at ``seq_len``;
    * ``test_dataloader()``: one loader per entry of ``test_lengths``, the test split at that
      length (index ``i`` is ``test_lengths[i]``).

    Held-out batches depend on the task only, never on ``seed``: every variant and seed of a
    sweep is validated and tested on the same examples.
    """

    def __init__(self, task_cfg: Any, seed: int = 0):
        super().__init__()
        self.task = build_task(task_cfg)
        self.seed = int(seed)
        t = self.task
        self.name: str = t.name
        self.vocab_size: int = int(t.vocab_size)
        self.n_classes: int = int(t.n_classes)
        self.pad_id: int | None = t.pad_id
        self.test_lengths: list[int] = list(t.test_lengths)
        self.val_lengths: list[int] = list(self.test_lengths)  # older name of test_lengths
        self.max_len: int = int(t.max_len)
        self.metric: str = t.metric
        self.layout = getattr(t, "layout", None)  # a seq2seq task's rows (ablate.model.seq2seq.Seq2SeqLayout)
        self.max_decode: int | None = getattr(t, "max_decode", None)
        self.detokenize = t.detokenize if getattr(t, "text", False) else None  # a text seq2seq task's ids -> text
        self.causal: bool = t.causal
        self.seq_len: int = t.seq_len
        self.batch_size: int = t.batch_size
        self.tokens_per_batch: int = t.batch_size * t.seq_len
        self._held_out: dict[tuple[str, int], list[Batch]] = {}

    @staticmethod
    def count_tokens(batch: Batch) -> int:
        """Input tokens of a batch (``B*T``, padding included), for throughput."""
        return int(batch[0].numel())

    def prepare_data(self) -> None:
        self.task.prepare()

    def setup(self, stage: str | None = None) -> None:
        self.task.setup()

    def train_dataloader(self, skip: int = 0) -> DataLoader:
        """The training stream, from its ``skip``-th batch on (a resumed job's position)."""
        return DataLoader(TrainStream(self.task, self.seed, skip), batch_size=None, num_workers=0,
                          collate_fn=_identity)

    def eval_batches(self, length: int, split: str = "test") -> list[Batch]:
        """The fixed batches of held-out ``split`` ("validation" or "test") at ``length``
        (computed once, cached)."""
        check_split(split)
        key = (split, int(length))
        if key not in self._held_out:
            batches = self.task.eval_batches(int(length), split=split)
            if batches:
                check_batch(self.task, batches[0], int(length), f"the first {split} batch at length {length}")
            self._held_out[key] = batches
        return self._held_out[key]

    def held_out_dataloader(self, split: str, length: int) -> DataLoader:
        """A loader over ``eval_batches(length, split)``, in order. Under data-parallel training each
        rank gets its share (:func:`rank_share`: no row twice, none left out, so the ranks' sums add up
        to the single-process evaluation; Lightning's own sampler would pad with repeats), so DDP
        trainers run with ``use_distributed_sampler: false``."""
        batches = self.eval_batches(length, split)
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            batches = rank_share(batches, dist.get_rank(), dist.get_world_size())
        return DataLoader(FixedBatches(batches), batch_size=None, shuffle=False, num_workers=0,
                          collate_fn=_identity)

    def val_dataloader(self) -> DataLoader:
        """The validation split at the training length ``seq_len``: one loader."""
        return self.held_out_dataloader("validation", self.seq_len)

    def test_dataloader(self) -> list[DataLoader]:
        """The test split, one loader per entry of ``test_lengths``."""
        return [self.held_out_dataloader("test", L) for L in self.test_lengths]
