"""A synthetic task of one's own as an ``ablate`` ``task`` option (``conf/task/count.yaml``).

``count``: for each position, how many times its symbol has appeared so far. Chosen as a
probe of the normalisation of attention: a sigmoid head (Ramapuram et al. 2024, "Theory,
Analysis, and Best Practices for Sigmoid Self-Attention", ICLR 2025) can add up the weights
of the keys that match a query, which is the count; a softmax head (Vaswani et al. 2017,
§3.2.1) only averages over them, so it has to recover the count some other way (e.g. from
how much weight its match takes away from the rest).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from ablate.components import PositiveInt
from ablate.data.base import Batch, SyntheticTask


class RunningCount(SyntheticTask):
    """Count so far: y_i = #{j <= i : x_j = x_i}, over ``n_symbols`` symbols drawn uniformly.

    Input: ``seq_len`` symbols from ``0 .. n_symbols - 1`` (vocabulary ``n_symbols``, no
    padding). Target at every position: how many times that position's symbol occurs among
    the positions up to and including it (1 at a symbol's first occurrence). Labels run from
    1 to the longest evaluated length, so ``n_classes = max_len + 1``. The natural model is a
    decoder (``causal: true``): the answer at position i depends on x_0 .. x_i only.
    Deterministic: a batch is a function of the ``torch.Generator`` it is drawn from.

    Only ``make_batch`` is implemented: ``SyntheticTask`` draws the training stream, the
    validation split (``n_val`` sequences) and the test split (``n_test`` sequences per
    evaluated length) from three separate seeded streams, the held-out ones fixed for every
    run seed. With few symbols and short sequences the same sequence can occur in more than
    one of them by chance (4 symbols over 16 positions: 4**16 possible inputs, so rarely).
    """

    name = "count"
    metric = "token_accuracy"
    pad_id = None

    def __init__(self, seq_len: PositiveInt = 16, eval_lengths: Sequence[int] = (),
                 batch_size: PositiveInt = 64, causal: bool = True, n_test: PositiveInt = 1000,
                 n_symbols: PositiveInt = 4, n_val: PositiveInt = 256) -> None:
        super().__init__(seq_len, eval_lengths, batch_size, causal, n_test, n_val)
        self.n_symbols = int(n_symbols)
        self.vocab_size = self.n_symbols
        self.n_classes = self.max_len + 1  # counts 1 .. max_len

    @staticmethod
    def target(x: torch.Tensor) -> torch.Tensor:
        """(B, T) symbols -> (B, T) running counts of each position's own symbol."""
        T = x.shape[1]
        same = x[:, :, None] == x[:, None, :]                       # same[b, i, j]: x_i == x_j
        so_far = torch.ones(T, T, dtype=torch.bool).tril()          # j <= i
        return (same & so_far).sum(dim=-1)

    def make_batch(self, g: torch.Generator, batch: int, length: int) -> Batch:
        x = torch.randint(0, self.n_symbols, (batch, length), generator=g)
        return x, self.target(x)

    @classmethod
    def problems(cls, cfg: dict, context: Any = None) -> list[str]:
        out = super().problems(cfg, context)
        n = cfg.get("n_symbols", 4)
        if isinstance(n, int) and n < 2:
            out.append(f"task.n_symbols={n} leaves nothing to tell apart: use at least 2")
        return out
