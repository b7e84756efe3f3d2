"""Normalisation layers and where they sit in a block.

The contract of a ``norm`` option (built-in or your own class, named by ``_target_``): built as
``cls(d_model, **settings)`` for every norm of the model (the YAML's keys but ``placement``,
which belongs to the block); ``forward(x)`` keeps the shape of ``x``; an optional static
``residual_alpha(n_layers)`` gives the α of post-LN (default 1). Subclass :class:`Norm` for
those defaults. ``norm.placement`` (one of ``PLACEMENTS``) says how ``transformer.Block`` wires a
sublayer f:

* ``pre``      x + f(N(x))          Xiong et al. 2020, "On Layer Normalization in the
                                     Transformer Architecture", Fig. 1(b) (GPT-2's layout)
* ``post``     N(α·x + f(x))        Vaswani et al. 2017, §3.1 (α = 1); DeepNet's α > 1
* ``sandwich`` x + N'(f(N(x)))      Ding et al. 2021, CogView, §2.4 "Sandwich-LN"

``check`` verifies the contract before training, on the meta device.
"""

from __future__ import annotations

from typing import Any, Literal, Mapping

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from ablate.components import Context, PositiveFloat, check_module, shape_problem, value_problem

Placement = Literal["pre", "post", "sandwich"]
PLACEMENTS: tuple[str, ...] = Placement.__args__


class Norm(nn.Module):
    """Base class: residual scaling α = 1, no matmul FLOPs."""

    @staticmethod
    def residual_alpha(n_layers: int) -> float:
        return 1.0

    def flops(self, seq_len: int, batch_size: int) -> float:
        """Norms are elementwise: 0 matmul FLOPs (``flops.py``). A subclass (outside ablate) with
        its own ``forward`` and no ``flops`` of its own is measured instead."""
        return 0.0


class LayerNorm(Norm):
    """Layer normalisation (Ba et al. 2016, eq. 4): γ ⊙ (x - μ) / sqrt(σ² + eps) + β."""

    def __init__(self, d_model: int, eps: PositiveFloat = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)


class RMSNorm(Norm):
    """Root-mean-square normalisation (Zhang & Sennrich 2019, eq. 4): γ ⊙ x / RMS(x),
    RMS(x) = sqrt(mean(x²) + eps). No centring, no bias."""

    def __init__(self, d_model: int, eps: PositiveFloat = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, self.weight.shape, self.weight, self.eps)


class ScaleNorm(Norm):
    """ScaleNorm (Nguyen & Salazar 2019, "Transformers without Tears", §2.3):
    g · x / ||x|| with one learned scalar g, initialised to sqrt(d)."""

    def __init__(self, d_model: int, eps: PositiveFloat = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.g = nn.Parameter(torch.tensor(d_model ** 0.5))

    def forward(self, x: Tensor) -> Tensor:
        return self.g * x / x.norm(dim=-1, keepdim=True).clamp(min=self.eps)


class DeepNorm(LayerNorm):
    """DeepNorm (Wang et al. 2022, "DeepNet: Scaling Transformers to 1,000 Layers", eq. in
    §3 and Fig. 2): post-LN with an up-weighted residual, x_{l+1} = LN(α·x_l + G(x_l)),
    α = (2N)^(1/4) for an N-layer encoder-only or decoder-only model (the paper's table in
    Fig. 2). Use with ``placement: post``. DeepNet is α *and* the β initialisation
    (``init=deepnet``): validation refuses this norm under another init scheme unless
    ``allow_without_deepnet_init`` asks for the residual scaling alone (``init.pairing_problems``)."""

    def __init__(self, d_model: int, eps: PositiveFloat = 1e-5, allow_without_deepnet_init: bool = False) -> None:
        super().__init__(d_model, eps)
        self.allow_without_deepnet_init = allow_without_deepnet_init

    @staticmethod
    def residual_alpha(n_layers: int) -> float:
        return (2 * n_layers) ** 0.25


def residual_alpha(norm: type, n_layers: int) -> float:
    """The α of post-LN for a norm class (1 unless it says otherwise, as DeepNorm does)."""
    alpha = getattr(norm, "residual_alpha", None)
    return float(alpha(n_layers)) if callable(alpha) else 1.0


def stack_alphas(norm: type, n_layers: int, encoder_layers: int = 0) -> dict[str, float]:
    """``{"encoder": α, "decoder": α}`` of each stack's post-LN residual: the norm class's own α of
    ``n_layers`` for one stack (``encoder_layers`` 0); for an encoder–decoder of N encoder and M
    decoder layers under DeepNorm, DeepNet's own constants (Wang et al. 2022, Table 1):
    encoder 0.81·(N⁴M)^(1/16), decoder (3M)^(1/4)."""
    alpha = residual_alpha(norm, n_layers)
    if not encoder_layers or alpha == 1.0:
        return {"encoder": residual_alpha(norm, encoder_layers or n_layers), "decoder": alpha}
    N, M = encoder_layers, n_layers
    return {"encoder": 0.81 * (N ** 4 * M) ** (1 / 16), "decoder": (3 * M) ** 0.25}


def deepnet_betas(n_layers: int, encoder_layers: int = 0) -> dict[str, float]:
    """DeepNet's init gain β per stack (Wang et al. 2022, Table 1): (8N)^(-1/4) for one stack of N
    layers; for an encoder–decoder, encoder 0.87·(N⁴M)^(-1/16), decoder (12M)^(-1/4)."""
    if not encoder_layers:
        return {"encoder": (8 * n_layers) ** -0.25, "decoder": (8 * n_layers) ** -0.25}
    N, M = encoder_layers, n_layers
    return {"encoder": 0.87 * (N ** 4 * M) ** (-1 / 16), "decoder": (12 * M) ** -0.25}


def check(target: Any, settings: Mapping[str, Any], context: Context, placement: Any) -> list[str]:
    """Every way ``target`` (at ``placement``) breaks the norm contract (empty when it keeps it)."""
    problem = value_problem(placement, Placement)
    if problem:
        return [f"norm.placement={placement!r} {problem}"]
    B, T, d = 2, 4, context.d_model

    def probe(norm: nn.Module) -> list[str]:
        problems = shape_problem("norm", target, "forward(x)", norm(torch.empty(B, T, d)), (B, T, d))
        if residual_alpha(target, context.n_layers) != 1.0 and placement != "post":
            problems.append(f"norm={target.__name__.lower()} scales the residual of a post-LN block "
                            f"(Wang et al. 2022); it needs norm.placement=post, got {placement!r}")
        return problems

    return check_module("norm", target, settings, {"d_model": d}, context, probe)
