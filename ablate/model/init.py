"""Weight initialisation schemes, applied once to a built ``Transformer``.

The contract of an ``init`` option (built-in or your own, named by ``_target_``): a function
(or any callable, see :class:`InitScheme`) called once as ``fn(model, **settings)`` after the
model is assembled, changing its parameters in place (under ``torch.no_grad``); it returns
nothing. ``check`` runs it on the model built on the meta device before training. The model
exposes ``d_model`` and ``n_layers``; conventions the built-in schemes rely on:

* every ``nn.Linear`` is a weight matrix to initialise; a fused one (attention ``qkv``,
  gated FFN ``fc``) tags its output rows with ``roles`` = ((role, size), ...), and each role
  block is initialised as if it were its own Linear (so a fused [Q | K | V] gets the same
  Xavier std as three separate d×d layers);
* residual-branch output projections (attention and FFN) are named ``out_proj``;
* FFN layers live under a module named ``ffn``.

Optional: a ``mup_init`` attribute, ``"fixed"`` or ``"fan_in"``, says how the scheme composes with
``model.parametrization=mup`` (``mup.py``); without it μP refuses the scheme.

Except ``default``, every scheme zeroes Linear biases and re-draws ``nn.Embedding`` tables
(tokens, learned positions, T5 buckets); norms keep their own initial values.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterator, Mapping, Protocol

import torch
import torch.nn as nn
from torch import Tensor

from ablate.components import PositiveFloat, call_problems, settings_problems
from .norms import deepnet_betas


class InitScheme(Protocol):
    """What the assembler calls: ``scheme(model, **settings)``, in place, once."""

    def __call__(self, model: nn.Module, **settings: Any) -> None: ...


def weight_blocks(model: nn.Module) -> Iterator[tuple[str, str, Tensor]]:
    """(module name, role, weight rows) for every Linear, one block per role (views)."""
    for name, m in model.named_modules():
        if isinstance(m, nn.Linear):
            roles = getattr(m, "roles", (("", m.out_features),))
            for (role, _), rows in zip(roles, m.weight.split([n for _, n in roles], dim=0)):
                yield name, role, rows


def is_residual_out(name: str) -> bool:
    return name.split(".")[-1] == "out_proj"


@torch.no_grad()
def _reset(model: nn.Module, weight: Callable[[str, str, Tensor], None], embedding_std: float) -> None:
    for name, role, w in weight_blocks(model):
        weight(name, role, w)
    for m in model.modules():
        if isinstance(m, nn.Linear) and m.bias is not None:
            m.bias.zero_()
        elif isinstance(m, nn.Embedding):
            m.weight.normal_(0.0, embedding_std)


def default(model: nn.Module) -> None:
    """PyTorch's own initialisation (Linear: Kaiming-uniform with a = sqrt(5), i.e.
    U(±1/sqrt(fan_in)) (He et al. 2015); Embedding: N(0, 1)); nothing is changed."""


def xavier(model: nn.Module) -> None:
    """Glorot & Bengio 2010, eq. 16: W ~ U(±sqrt(6 / (fan_in + fan_out))), std
    sqrt(2 / (fan_in + fan_out)). Embeddings N(0, d^-1/2) (Vaswani et al. 2017's scale)."""
    _reset(model, lambda name, role, w: nn.init.xavier_uniform_(w), model.d_model ** -0.5)


def normal(model: nn.Module, std: PositiveFloat = 0.02) -> None:
    """Every weight and embedding N(0, 0.02²) (GPT-2: Radford et al. 2019; the value is
    from GPT, Radford et al. 2018, §4.1)."""
    _reset(model, lambda name, role, w: w.normal_(0.0, std), std)


def scaled(model: nn.Module, std: PositiveFloat = 0.02) -> None:
    """GPT-2 (Radford et al. 2019, §2.3): ``normal``, with the residual-branch output
    projections scaled by 1/sqrt(N) for N residual layers, N = 2·n_layers (two residual
    branches per block): std 0.02/sqrt(2·n_layers)."""
    out_std = std / math.sqrt(2 * model.n_layers)
    _reset(model, lambda name, role, w: w.normal_(0.0, out_std if is_residual_out(name) else std), std)


def small_init(model: nn.Module) -> None:
    """SmallInit (Nguyen & Salazar 2019, "Transformers without Tears", §2; as named in
    GPT-NeoX): every weight and embedding N(0, 2/(5d)), i.e. Xavier's std for a d×4d layer."""
    std = math.sqrt(2 / (5 * model.d_model))
    _reset(model, lambda name, role, w: w.normal_(0.0, std), std)


def deepnet(model: nn.Module, allow_without_deepnorm: bool = False) -> None:
    """DeepNet (Wang et al. 2022, Fig. 2): Xavier (gain 1) for Q and K; Xavier with gain
    β = (8N)^(-1/4) for V, the attention output and both FFN layers (N = n_layers, the
    encoder-only / decoder-only value; an encoder–decoder takes its own β per stack,
    ``norms.deepnet_betas``). Only the V rows of a fused QKV weight get β (for
    ``qkv_shared``, ``kv_shared`` the shared projection carries V and gets β). β is derived for
    DeepNorm's residual α: validation refuses it without ``norm=deepnorm`` unless
    ``allow_without_deepnorm`` asks for the initialisation alone (:func:`pairing_problems`)."""
    betas = deepnet_betas(model.n_layers, getattr(model, "encoder_layers", 0))  # an encoder–decoder: per stack

    def weight(name: str, role: str, w: Tensor) -> None:
        scaled_up = "v" in role or is_residual_out(name) or "ffn" in name.split(".")
        beta = betas["encoder" if name.startswith("encoder.") else "decoder"]
        nn.init.xavier_uniform_(w, gain=beta if scaled_up else 1.0)

    _reset(model, weight, model.d_model ** -0.5)


def zero_out(model: nn.Module, std: PositiveFloat = 0.02) -> None:
    """``normal``, but every residual-branch output projection starts at exactly zero, so
    each block is the identity at initialisation (as in ReZero, Bachlechner et al. 2020,
    and Fixup's zero-initialised last layers, Zhang et al. 2019, §3)."""
    _reset(model, lambda name, role, w: w.zero_() if is_residual_out(name) else w.normal_(0.0, std), std)


# How each scheme composes with μP (model.parametrization=mup; mup.py): "fixed" stds are read as the
# stds at the base width, "fan_in" schemes already scale hidden weights with 1/fan_in. xavier,
# small_init and deepnet shrink the embeddings with width and declare nothing: μP refuses them.
default.mup_init = "fan_in"
normal.mup_init = scaled.mup_init = zero_out.mup_init = "fixed"


def pairing_problems(target: Any, settings: Mapping[str, Any], model: nn.Module) -> list[str]:
    """Methods that come in two halves, run as one: DeepNet (Wang et al. 2022, §3) is DeepNorm's
    residual α (``norm=deepnorm``) *and* its β initialisation (``init=deepnet``); β is derived for
    α and α assumes β, so either half alone is another method. Refused unless the half is asked
    for explicitly: ``norm.allow_without_deepnet_init=true`` or ``init.allow_without_deepnorm=true``.
    ``model``: the assembled model (its blocks' α and norms), ``target``: the init scheme."""
    blocks = list(getattr(model, "blocks", []))
    alpha = next((float(b.alpha) for b in blocks if getattr(b, "alpha", 1.0) != 1.0), None)
    is_deepnet = target is deepnet
    name = getattr(target, "__name__", type(target).__name__)
    if alpha is not None and not is_deepnet:
        norm = blocks[0].attn_norm
        if not getattr(norm, "allow_without_deepnet_init", False):
            return [f"norm={type(norm).__name__.lower()} scales the residual by α = {alpha:.3g} (DeepNet, Wang et "
                    f"al. 2022), which needs DeepNet's β initialisation; got init={name}. Valid: init=deepnet, or "
                    "norm.allow_without_deepnet_init=true to run the residual scaling alone (half of DeepNet)"]
    if is_deepnet and alpha is None and not settings.get("allow_without_deepnorm", False):
        norm = type(blocks[0].attn_norm).__name__.lower() if blocks else "?"
        return [f"init=deepnet scales V, the output and FFN weights by β = (8N)^(-1/4) for DeepNorm's residual α "
                f"(Wang et al. 2022), but norm={norm} has no residual scaling. Valid: norm=deepnorm, or "
                "init.allow_without_deepnorm=true to run the β initialisation alone (half of DeepNet)"]
    return []


def check(target: Any, settings: Mapping[str, Any], model: nn.Module) -> list[str]:
    """Every way ``target`` breaks the init contract: its settings, then a call on ``model``
    (the model built on the meta device, so nothing is computed), then a method whose other half
    the model lacks (:func:`pairing_problems`)."""
    problems = settings_problems("init", target, settings, {"model": model})
    if problems:
        return problems
    with torch.device("meta"):
        _, problems = call_problems("init", target, lambda: target(model, **settings))
    return problems or pairing_problems(target, settings, model)
