"""Position-wise feed-forward networks (Shazeer 2020, "GLU Variants Improve Transformer").

The contract of an ``ffn`` option (built-in or your own class, named by ``_target_``): an
``nn.Module`` built as ``cls(d_model, **settings)``, one per layer, whose ``forward(x)`` maps
(B, T, d_model) to (B, T, d_model). Optional: the output projection named ``out_proj`` (the init
schemes treat it as a residual-branch output), a fused input Linear whose ``roles`` tag its rows,
a ``problems(settings, context)`` classmethod, and ``flops(seq_len, batch_size)`` (forward FLOPs per
token; without it, or with a ``forward`` it does not describe, the forward is measured on the meta
device, ``flops.py``). ``check`` verifies the contract before training.

The built-in classes are built as ``cls(d_model, mult=4, bias=True, match_params=True)``:

* plain:  FFN(x) = act(x W1 + b1) W2 + b2, hidden width h = mult·d      (eqs. 1-3)
* gated:  FFN(x) = (act(x W + b) ⊗ (x V + c)) W2 + b2                   (eqs. 5-6)
  with, when ``match_params``, the width g whose parameter count is nearest the plain FFN's
  (§2 of the paper: "we reduce the number of hidden units ... by a factor of 2/3"): without
  biases g = 2/3 · h, with biases g = h · (2d + 1)/(3d + 2) (:func:`matched_hidden`); else g = h.
  ``match_params`` has no effect on plain FFNs. A width is an integer, so the match is exact only
  when that g is one; ``param_mismatch()`` is what is left (parameters above the plain FFN's).

W and V are one fused ``fc`` Linear (rows tagged with ``roles`` for the init schemes); the
output projection is ``out_proj`` (a residual branch output, see ``init.py``).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from ablate.components import Context, PositiveFloat, check_module, shape_problem

from .flops import linear_flops


def plain_params(d_model: int, mult: float, bias: bool) -> int:
    """Parameters of the plain FFN: W1 (d×h), W2 (h×d), and biases h + d."""
    h = int(round(mult * d_model))
    return 2 * d_model * h + (h + d_model if bias else 0)


def matched_hidden(d_model: int, mult: float, bias: bool) -> int:
    """The gated width g whose parameter count 3·d·g + (2·g + d)·[bias] is nearest the plain FFN's
    2·d·h + (h + d)·[bias], h = mult·d: g = h·(2d + b)/(3d + 2b) rounded, b = 1 with biases."""
    h, b = int(round(mult * d_model)), int(bias)
    return max(1, int(round(h * (2 * d_model + b) / (3 * d_model + 2 * b))))


class FFN(nn.Module):
    """Plain two-layer FFN; subclasses set ``act``."""

    act: Callable[[Tensor], Tensor]

    def __init__(self, d_model: int, mult: PositiveFloat = 4, bias: bool = True, match_params: bool = True) -> None:
        super().__init__()
        self.d_model, self.mult, self.use_bias = d_model, mult, bias
        self.hidden = int(round(mult * d_model))
        self.fc = nn.Linear(d_model, self.hidden, bias=bias)
        self.out_proj = nn.Linear(self.hidden, d_model, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.out_proj(self.act(self.fc(x)))

    def flops(self, seq_len: int, batch_size: int) -> float:
        """2·d·h + 2·h·d per token (the two matmuls; the activation is elementwise)."""
        return linear_flops(self)

    def param_mismatch(self) -> int:
        """Parameters above (+) or below (-) the plain FFN of the same d_model, mult and bias: 0."""
        return sum(p.numel() for p in self.parameters()) - plain_params(self.d_model, self.mult, self.use_bias)


class ReLU(FFN):
    """max(0, xW1 + b1) W2 + b2 (Vaswani et al. 2017, eq. 2; Shazeer 2020, eq. 1)."""

    act = staticmethod(F.relu)


class GELU(FFN):
    """GELU(xW1) W2 (Hendrycks & Gimpel 2016; Shazeer 2020, eq. 3, FFN_GELU)."""

    act = staticmethod(F.gelu)


class Swish(FFN):
    """Swish_1(xW1) W2 = SiLU (Ramachandran et al. 2017; Shazeer 2020, eq. 3, FFN_Swish)."""

    act = staticmethod(F.silu)


class GatedFFN(nn.Module):
    """Gated FFN; subclasses set ``gate`` (the activation on x W)."""

    gate: Callable[[Tensor], Tensor]

    def __init__(self, d_model: int, mult: PositiveFloat = 4, bias: bool = True, match_params: bool = True) -> None:
        super().__init__()
        self.d_model, self.mult, self.use_bias = d_model, mult, bias
        self.hidden = matched_hidden(d_model, mult, bias) if match_params else int(round(mult * d_model))
        self.fc = nn.Linear(d_model, 2 * self.hidden, bias=bias)  # [W | V]
        self.fc.roles = (("gate", self.hidden), ("value", self.hidden))
        self.out_proj = nn.Linear(self.hidden, d_model, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        a, b = self.fc(x).chunk(2, dim=-1)
        return self.out_proj(self.gate(a) * b)

    def flops(self, seq_len: int, batch_size: int) -> float:
        """2·d·2h + 2·h·d per token ([W | V] fused, then W2; the gate is elementwise)."""
        return linear_flops(self)

    param_mismatch = FFN.param_mismatch


def _identity(x: Tensor) -> Tensor:
    return x


class GLU(GatedFFN):
    """σ(xW) ⊗ xV (Dauphin et al. 2017; Shazeer 2020, eqs. 4 and 6, FFN_GLU)."""

    gate = staticmethod(torch.sigmoid)


class ReGLU(GatedFFN):
    """max(0, xW) ⊗ xV (Shazeer 2020, eqs. 5-6, FFN_ReGLU)."""

    gate = staticmethod(F.relu)


class GEGLU(GatedFFN):
    """GELU(xW) ⊗ xV (Shazeer 2020, eqs. 5-6, FFN_GEGLU)."""

    gate = staticmethod(F.gelu)


class SwiGLU(GatedFFN):
    """Swish_1(xW) ⊗ xV (Shazeer 2020, eqs. 5-6, FFN_SwiGLU)."""

    gate = staticmethod(F.silu)


class Bilinear(GatedFFN):
    """xW ⊗ xV, no non-linearity (Shazeer 2020, eqs. 4 and 6, FFN_Bilinear)."""

    gate = staticmethod(_identity)


def check(target: Any, settings: Mapping[str, Any], context: Context) -> list[str]:
    """Every way ``target`` breaks the FFN contract for this model (empty when it keeps it)."""
    B, T, d = 2, 4, context.d_model

    def probe(ffn: nn.Module) -> list[str]:
        return shape_problem("ffn", target, "forward(x)", ffn(torch.empty(B, T, d)), (B, T, d))

    return check_module("ffn", target, settings, {"d_model": d}, context, probe)
