"""The five per-token digit tasks of "Do Transformers Need Three Projections?"
(Kayyam et al., ICML 2026, Table 1): ``reverse``, ``sort``, ``sub``, ``swap``, ``copy``.

Input: a list of ``seq_len`` digits drawn uniformly from 0–9. Target: a list of the same length,
one 10-way label per position (every position is labelled). Vocabulary 10, no padding, no
special tokens; an encoder (``causal: false``) is the natural model. The headline metric is
token accuracy on held-out sequences. Evaluation at longer ``eval_lengths`` simply generates
longer lists.
"""

from __future__ import annotations

from typing import Sequence

import torch

from .base import Batch, SyntheticTask

N_DIGITS = 10


class DigitTask(SyntheticTask):
    """Base of the digit tasks; a subclass defines :meth:`target`."""

    metric = "token_accuracy"
    vocab_size = N_DIGITS
    n_classes = N_DIGITS
    pad_id = None

    def __init__(self, seq_len: int = 16, eval_lengths: Sequence[int] = (), batch_size: int = 64,
                 causal: bool = False, n_test: int = 1000):
        super().__init__(seq_len, eval_lengths, batch_size, causal, n_test)

    @staticmethod
    def target(x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def make_batch(self, g: torch.Generator, batch: int, length: int) -> Batch:
        x = torch.randint(0, N_DIGITS, (batch, length), generator=g)
        return x, self.target(x)


class Reverse(DigitTask):
    """``y = x[::-1]`` (Kayyam et al., 2026, Table 1, "reverse")."""

    name = "reverse"

    @staticmethod
    def target(x):
        return x.flip(1)


class Sort(DigitTask):
    """``y = sorted(x)``, ascending (Kayyam et al., 2026, Table 1, "sort")."""

    name = "sort"

    @staticmethod
    def target(x):
        return x.sort(dim=1).values


class Sub(DigitTask):
    """``y_i = 9 - x_i`` (Kayyam et al., 2026, Table 1, "sub")."""

    name = "sub"

    @staticmethod
    def target(x):
        return (N_DIGITS - 1) - x


class Swap(DigitTask):
    """Exchange the two halves: ``y = x[T/2:] + x[:T/2]`` (Kayyam et al., 2026, Table 1, "swap").

    For an odd length the middle digit stays in place:
    ``y = x[(T+1)//2:] + [x[T//2]] + x[:T//2]``.
    """

    name = "swap"

    @staticmethod
    def target(x):
        T = x.shape[1]
        h = T // 2
        return torch.cat([x[:, T - h:], x[:, h:T - h], x[:, :h]], dim=1)


class Copy(DigitTask):
    """``y = x`` (Kayyam et al., 2026, Table 1, "copy")."""

    name = "copy"

    @staticmethod
    def target(x):
        return x.clone()
