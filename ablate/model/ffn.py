"""Position-wise feed-forward networks (Shazeer 2020, "GLU Variants Improve Transformer").

The contract of an ``ffn`` option (built-in or your own class, named by ``_target_``): an
``nn.Module`` built as ``cls(d_model, **settings)``, one per layer, whose ``forward(x)`` maps
(B, T, d_model) to (B, T, d_model). Optional: the output projection named ``out_proj`` (the init
schemes treat it as a residual-branch output), a fused input Linear whose ``roles`` tag its rows,
and a ``problems(settings, context)`` classmethod. ``check`` verifies the contract before training.

The built-in classes are built as ``cls(d_model, mult=4, bias=True, match_params=True)``:

* plain:  FFN(x) = act(x W1 + b1) W2 + b2, hidden width h = mult·d      (eqs. 1-3)
* gated:  FFN(x) = (act(x W + b) ⊗ (x V + c)) W2 + b2                   (eqs. 5-6)
  with h = round(2/3 · mult·d) when ``match_params`` (same parameter count as the plain
  FFN, §2 of the paper), else h = mult·d. ``match_params`` has no effect on plain FFNs.

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


class FFN(nn.Module):
    """Plain two-layer FFN; subclasses set ``act``."""

    act: Callable[[Tensor], Tensor]

    def __init__(self, d_model: int, mult: PositiveFloat = 4, bias: bool = True, match_params: bool = True) -> None:
        super().__init__()
        self.hidden = int(round(mult * d_model))
        self.fc = nn.Linear(d_model, self.hidden, bias=bias)
        self.out_proj = nn.Linear(self.hidden, d_model, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.out_proj(self.act(self.fc(x)))


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
        self.hidden = int(round(mult * d_model * (2 / 3 if match_params else 1)))
        self.fc = nn.Linear(d_model, 2 * self.hidden, bias=bias)  # [W | V]
        self.fc.roles = (("gate", self.hidden), ("value", self.hidden))
        self.out_proj = nn.Linear(self.hidden, d_model, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        a, b = self.fc(x).chunk(2, dim=-1)
        return self.out_proj(self.gate(a) * b)


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
