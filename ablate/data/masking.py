"""BERT's masked-LM corruption (Devlin et al., 2019, "BERT: Pre-training of Deep Bidirectional
Transformers for Language Understanding", §3.1 "Task #1: Masked LM", and Appendix A.1).

In each window ``max(1, round(T * rate))`` positions are selected uniformly at random (15 % in the
paper; at least one, as in the reference implementation's ``create_pretraining_data.py``, so every
window is scored). A selected token is replaced by MASK with probability 0.8, by a random token
with probability 0.1 (drawn uniformly from the tokenizer's own ids, never a special; it may be the
token itself, as in BERT) and kept with probability 0.1. The targets are the original tokens at
the selected positions and ``IGNORE`` everywhere else, so the loss and the accuracy score the
selected positions only.
"""

from __future__ import annotations

import torch

from .base import IGNORE


def bert_mask(tokens: torch.Tensor, g: torch.Generator, rate: float, mask_id: int,
              n_ids: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(inputs, targets)`` of the windows ``tokens`` (B, T) under BERT's rule, drawn from ``g``:
    random replacements come from ids ``0 .. n_ids - 1``."""
    B, T = tokens.shape
    k = min(T, max(1, int(round(T * rate))))
    chosen = torch.rand(B, T, generator=g).argsort(dim=1)[:, :k]  # k distinct positions per window
    selected = torch.zeros(B, T, dtype=torch.bool).scatter_(1, chosen, True)
    action = torch.rand(B, T, generator=g)  # < 0.8: MASK; 0.8 .. 0.9: a random token; else kept
    random_ids = torch.randint(0, n_ids, (B, T), generator=g)
    inputs = torch.where(selected & (action < 0.8), mask_id, tokens)
    inputs = torch.where(selected & (action >= 0.8) & (action < 0.9), random_ids, inputs)
    return inputs, torch.where(selected, tokens, IGNORE)
