"""One layer of a stack: attention then FFN, each a residual sublayer wired by the norm placement
(pre / post / sandwich, ``norms.py``). The encoder–decoder's decoder layer adds cross-attention
(``seq2seq.DecoderBlock``)."""

from __future__ import annotations

from typing import Callable

import torch.nn as nn
from torch import Tensor

from .norms import PLACEMENTS
from .positions import Position


class Block(nn.Module):
    """One layer: x -> sublayer(attention) -> sublayer(FFN), wired by ``placement``:
    pre x + f(N(x)); post N(α·x + f(x)); sandwich x + N'(f(N(x)))."""

    def __init__(self, attn: nn.Module, ffn: nn.Module, norm: Callable[[], nn.Module],
                 placement: str, alpha: float = 1.0, dropout: float = 0.0) -> None:
        super().__init__()
        if placement not in PLACEMENTS:
            raise ValueError(f"norm.placement={placement!r}; valid choices: {', '.join(PLACEMENTS)}")
        self.attn, self.ffn = attn, ffn
        self.attn_norm, self.ffn_norm = norm(), norm()
        if placement == "sandwich":
            self.attn_out_norm, self.ffn_out_norm = norm(), norm()
        self.placement, self.alpha = placement, alpha
        self.drop = nn.Dropout(dropout)

    def sublayer(self, x: Tensor, f: Callable[[Tensor], Tensor], norm: nn.Module,
                 out_norm: nn.Module | None = None) -> Tensor:
        if self.placement == "pre":
            return x + self.drop(f(norm(x)))
        if self.placement == "post":
            return norm((x if self.alpha == 1.0 else self.alpha * x) + self.drop(f(x)))
        return x + self.drop(out_norm(f(norm(x))))  # sandwich

    def forward(self, x: Tensor, pos: Position, attn_mask: Tensor | None = None,
                is_causal: bool = False) -> Tensor:
        x = self.sublayer(x, lambda h: self.attn(h, pos, attn_mask, is_causal),
                          self.attn_norm, getattr(self, "attn_out_norm", None))
        return self.sublayer(x, self.ffn, self.ffn_norm, getattr(self, "ffn_out_norm", None))
