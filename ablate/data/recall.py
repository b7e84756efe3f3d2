"""Associative recall (causal): key–value pairs, then query keys; predict each query's value.

The task of the associative-recall / induction-head literature (Graves et al., 2014, "Neural
Turing Machines", §4.3; Ba et al., 2016, "Using Fast Weights to Attend to the Recent Past";
Fu et al., 2023, "Hungry Hungry Hippos", §3.1 — the form used here).

Layout of a sequence of length ``T`` with ``P = (T - n_queries) // 2`` pairs::

    k_1 v_1 k_2 v_2 ... k_P v_P  q_1 ... q_Q        (Q = T - 2P, i.e. n_queries or n_queries+1)

Keys are distinct within a sequence and come from ids ``[0, n_keys)``; values come from the
disjoint range ``[n_keys, n_keys + n_values)`` (with repeats). Each query is a key of the
sequence, drawn uniformly; its position is labelled with that key's value (a token id), every
other position with ``-100``. A longer evaluation length holds more pairs, so
``n_keys`` must be at least the number of pairs at the longest length.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from .base import IGNORE, N_VAL, Batch, SyntheticTask, _is_int


class Recall(SyntheticTask):
    """Associative recall (Fu et al., 2023, §3.1); ``causal: true`` by default."""

    name = "recall"
    metric = "query_accuracy"
    pad_id = None

    def __init__(self, seq_len: int = 32, eval_lengths: Sequence[int] = (), batch_size: int = 64,
                 causal: bool = True, n_keys: int = 64, n_values: int = 64, n_queries: int = 1,
                 n_test: int = 1000, n_val: int = N_VAL):
        super().__init__(seq_len, eval_lengths, batch_size, causal, n_test, n_val)
        self.n_keys, self.n_values, self.n_queries = int(n_keys), int(n_values), int(n_queries)
        self.vocab_size = self.n_keys + self.n_values
        self.n_classes = self.vocab_size  # labels are value token ids

    def n_pairs(self, length: int) -> int:
        return (length - self.n_queries) // 2

    def make_batch(self, g: torch.Generator, batch: int, length: int) -> Batch:
        P = self.n_pairs(length)
        Q = length - 2 * P
        # P distinct keys in random order: the indices of the P largest of n_keys uniforms
        keys = torch.rand(batch, self.n_keys, generator=g).topk(P, dim=1).indices
        vals = torch.randint(self.n_keys, self.n_keys + self.n_values, (batch, P), generator=g)
        pick = torch.randint(0, P, (batch, Q), generator=g)
        tokens = torch.empty(batch, length, dtype=torch.long)
        tokens[:, 0:2 * P:2] = keys
        tokens[:, 1:2 * P:2] = vals
        tokens[:, 2 * P:] = keys.gather(1, pick)
        targets = torch.full((batch, length), IGNORE, dtype=torch.long)
        targets[:, 2 * P:] = vals.gather(1, pick)
        return tokens, targets

    @classmethod
    def problems(cls, cfg: dict, context: Any = None) -> list[str]:
        out = super().problems(cfg, context)
        for k in ("n_keys", "n_values", "n_queries"):
            v = cfg.get(k, 1)
            if not (_is_int(v) and v > 0):
                out.append(f"task.{k} must be a positive integer, got {v!r}")
        if out:
            return out
        nq, nk = cfg.get("n_queries", 1), cfg.get("n_keys", 64)
        seq_len = cfg.get("seq_len", 32)
        lengths = [seq_len] + list(cfg.get("eval_lengths") or [])
        if (seq_len - nq) // 2 < 1:
            out.append(f"task.seq_len={seq_len} leaves no room for a key-value pair before "
                       f"{nq} quer{'y' if nq == 1 else 'ies'}; need seq_len >= {nq + 2}")
        longest = max(lengths)
        if (longest - nq) // 2 > nk:
            out.append(f"task.n_keys={nk} is too small: length {longest} holds "
                       f"{(longest - nq) // 2} pairs with distinct keys; raise task.n_keys")
        return out
