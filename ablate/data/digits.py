"""The five per-token digit tasks of "Do Transformers Need Three Projections?"
(Kayyam et al., ICML 2026, Table 1): ``reverse``, ``sort``, ``sub``, ``swap``, ``copy``.

Input: a list of ``seq_len`` digits drawn uniformly from ``0 .. n_values-1`` (``n_values`` = 10 by
default: the digits 0–9). Target: a list of the same length, one ``n_values``-way label per position
(every position is labelled). Vocabulary ``n_values``, no padding, no special tokens; an encoder
(``causal: false``) is the natural model. The headline metric is token accuracy on held-out
sequences. Evaluation at longer ``eval_lengths`` simply generates longer lists.

``n_values`` is a knob of this implementation, not of the paper's task definition (which uses
the digits 0–9). A uniform guess is right ``1 / n_values`` of the time; more values give the
projections more to carry: at 64 digits, d_model 32 and 300 steps, ``n_values=64`` left
independent QKV's ``reverse`` at 100% but cut Q=K=V's from 82% to 18%.
"""

from __future__ import annotations

from typing import Annotated, Sequence

import torch

from ablate.components import Range

from .base import Batch, SyntheticTask

N_DIGITS = 10


class DigitTask(SyntheticTask):
    """Base of the digit tasks; a subclass defines :meth:`target`."""

    metric = "token_accuracy"
    pad_id = None

    def __init__(self, seq_len: int = 16, eval_lengths: Sequence[int] = (), batch_size: int = 64,
                 causal: bool = False, n_test: int = 1000,
                 n_values: Annotated[int, Range(low=2)] = N_DIGITS):
        super().__init__(seq_len, eval_lengths, batch_size, causal, n_test)
        self.n_values = int(n_values)
        self.vocab_size = self.n_classes = self.n_values

    @staticmethod
    def target(x: torch.Tensor, n_values: int = N_DIGITS) -> torch.Tensor:
        """(B, T) values in ``[0, n_values)`` -> (B, T) labels."""
        raise NotImplementedError

    def make_batch(self, g: torch.Generator, batch: int, length: int) -> Batch:
        x = torch.randint(0, self.n_values, (batch, length), generator=g)
        return x, self.target(x, self.n_values)


class Reverse(DigitTask):
    """``y = x[::-1]`` (Kayyam et al., 2026, Table 1, "reverse")."""

    name = "reverse"

    @staticmethod
    def target(x, n_values=N_DIGITS):
        return x.flip(1)


class Sort(DigitTask):
    """``y = sorted(x)``, ascending (Kayyam et al., 2026, Table 1, "sort")."""

    name = "sort"

    @staticmethod
    def target(x, n_values=N_DIGITS):
        return x.sort(dim=1).values


class Sub(DigitTask):
    """``y_i = 9 - x_i`` (Kayyam et al., 2026, Table 1, "sub"); ``(n_values - 1) - x_i`` in general."""

    name = "sub"

    @staticmethod
    def target(x, n_values=N_DIGITS):
        return (n_values - 1) - x


class Swap(DigitTask):
    """Exchange the two halves: ``y = x[T/2:] + x[:T/2]`` (Kayyam et al., 2026, Table 1, "swap").

    For an odd length the middle digit stays in place:
    ``y = x[(T+1)//2:] + [x[T//2]] + x[:T//2]``.
    """

    name = "swap"

    @staticmethod
    def target(x, n_values=N_DIGITS):
        T = x.shape[1]
        h = T // 2
        return torch.cat([x[:, T - h:], x[:, h:T - h], x[:, :h]], dim=1)


class Copy(DigitTask):
    """``y = x`` (Kayyam et al., 2026, Table 1, "copy")."""

    name = "copy"

    @staticmethod
    def target(x, n_values=N_DIGITS):
        return x.clone()
