"""μP, the maximal update parametrization (Yang et al. 2022, "Tensor Programs V: Tuning Large Neural
Networks via Zero-Shot Hyperparameter Transfer", Table 3 and §J for Adam), for
``model.parametrization=mup``.

Under the standard parametrization the best Adam learning rate shrinks as the model widens; under μP it
stays put, so a rate tuned on a narrow model transfers to a wide one. μP is defined against a *base
model*: this model with ``d_model = model.mup_base_width`` (the other settings unchanged), at whose
width μP equals the standard parametrization. Every parameter is classified by comparing its shape
with the base model's (the dimensions that differ grow with width; microsoft/mup's ``set_base_shapes``
does the same):

==============  ======================================  =========================================
kind            which parameters                        μP, with m = fan_in / base fan_in
==============  ======================================  =========================================
matrix-like     two dimensions grow (attention q/k/v    Adam lr × 1/m, weight decay × m (lr·wd, the
                and output projections, FFN layers,     decay per step, unchanged); init std as at
                DeBERTa's position projections)         the base width, × 1/√m (see ``INIT``)
readout         the head: width in, outputs out         its input × 1/m (the output multiplier);
                                                        init std constant in width; lr unchanged
vector-like     one dimension grows (token and          lr unchanged; a Linear's bias under a
                position embeddings, norm gains,        ``"fan_in"`` init × √(its fan-in
                biases)                                 multiplier), to a width-independent std
scalar-like     nothing grows (T5 buckets, KERPLE,      unchanged
                ALiBi has none)
attention       the scores q·k                          × √(base head dim) / head dim instead of
                                                        1/√(head dim) (1/d_head scaling)
==============  ======================================  =========================================

The fan-in of a weight is its dimension 1 (PyTorch's ``nn.Linear`` layout, out × in). The base head
dimension is ``model.mup_base_head_dim``, by default ``mup_base_width / n_heads``: when a wider model
keeps its heads and widens each, the attention scale follows; when it adds heads of the same width,
set the base head dimension to that width (the scale then stays 1/√d_head).

How an init scheme composes (``INIT``, or a user scheme's ``mup_init`` attribute): a ``"fixed"`` scheme
draws absolute stds (``normal``, ``scaled``, ``zero_out``): they are read as the stds at the base width,
and every matrix-like weight is multiplied by 1/√m after the scheme ran (microsoft/mup's ``mup.init``
does the same). A ``"fan_in"`` scheme (``default``, PyTorch's own) already draws hidden weights with
variance ∝ 1/fan_in and keeps them; the readout is multiplied by √m, to a width-independent std
(microsoft/mup's ``MuReadout`` rescaling), and every other Linear's bias, drawn U(±1/√fan_in) too, by
√(its fan-in multiplier), to the base width's scale (a bias is vector-like, Θ(1) in width: microsoft/mup's
``rescale_linear_bias``, which its ``set_base_shapes`` applies to every Linear). A fixed scheme
zeroes the biases. Schemes that shrink the embeddings with width (``xavier``, ``small_init``,
``deepnet``: std ∝ d^-1/2) contradict μP's width-independent input layer and are refused, as is
``model.embed_scale=sqrt_d``. Attention patterns take the scale as their ``scale`` attribute (None:
1/√d_head); linear attention has no softmax scores, so only the other multipliers apply to it. Position
terms computed from q and k by the position module itself (DeBERTa's) keep their own scale.

An encoder–decoder (``model.arch=encoder_decoder``) is classified the same way, parameter by parameter
against its base model: both stacks' and the cross-attention's projections are matrix-like, the one
head is the readout, and the 1/d_head scale reaches self- and cross-attention in both stacks.

Depth is not covered: μP transfers across width; a ladder that also deepens the model (``model.size``)
transfers the width part only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn as nn

PARAMETRIZATIONS = ("standard", "mup")

#: init scheme -> how it composes with μP: "fixed" (absolute stds, read at the base width) or
#: "fan_in" (hidden variance ∝ 1/fan_in already). A scheme of the user's declares it as a
#: ``mup_init`` attribute; a scheme with neither is refused under μP.
INIT_KINDS = ("fixed", "fan_in")


@dataclass(frozen=True)
class ParamClass:
    """How μP treats one parameter: its kind and its fan-in width multiplier m (1 when no dimension
    grows with width)."""

    kind: Literal["matrix", "vector", "scalar"]
    width_mult: float


def classify(model: nn.Module, base: nn.Module) -> dict[str, ParamClass]:
    """Each parameter of ``model`` by name, classified against the same parameter of ``base`` (the
    model at the base width, built on the meta device): the dimensions whose sizes differ grow with
    width. Raises ValueError when the two models do not have the same parameters."""
    base_shapes = {name: tuple(p.shape) for name, p in base.named_parameters()}
    shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
    if base_shapes.keys() != shapes.keys() or any(len(shapes[n]) != len(base_shapes[n]) for n in shapes):
        differ = sorted(set(shapes) ^ set(base_shapes)) or [n for n in shapes if len(shapes[n]) != len(base_shapes[n])]
        raise ValueError(f"model.parametrization=mup: the model at the base width has other parameters than "
                         f"this one ({', '.join(differ[:3])}); μP needs the same parameters at every width")
    classes = {}
    for name, shape in shapes.items():
        grown = [i for i, (n, b) in enumerate(zip(shape, base_shapes[name])) if n != b]
        if len(grown) > 2:
            raise ValueError(f"model.parametrization=mup: parameter {name} {shape} has {len(grown)} dimensions that "
                             "grow with width; μP is defined for at most two")
        kind = ("scalar", "vector", "matrix")[len(grown)]
        fan_in = 1 if len(shape) > 1 and 1 in grown else (grown[-1] if grown else None)
        classes[name] = ParamClass(kind, shape[fan_in] / base_shapes[name][fan_in] if fan_in is not None else 1.0)
    return classes


def init_kind(scheme: Any) -> str | None:
    """How the init scheme ``scheme`` composes with μP (``INIT_KINDS``), or None (refused)."""
    kind = getattr(scheme, "mup_init", None)
    return kind if kind in INIT_KINDS else None


def attention_scale(head_dim: int, base_head_dim: int) -> float:
    """μP's attention score scale, √(base head dim) / head dim: 1/√head_dim at the base."""
    return base_head_dim ** 0.5 / head_dim


@torch.no_grad()
def apply(model: nn.Module, base: nn.Module, scheme: Any, base_head_dim: int) -> dict[str, ParamClass]:
    """Turn the initialised standard ``model`` into its μP form, in place (see the module docstring):
    each parameter's ``lr_scale`` (read by ``ablate.optim.make_optimizer``), the init rescaled for
    ``scheme``'s kind, the readout multiplier and the attention scale. Returns the classification."""
    classes = classify(model, base)
    kind = init_kind(scheme)
    for name, p in model.named_parameters():
        c = classes[name]
        p.lr_scale = 1.0 / c.width_mult if c.kind == "matrix" else 1.0
        if kind == "fixed" and c.kind == "matrix":
            p.mul_(c.width_mult ** -0.5)
    m = model.d_model / base.d_model
    if kind == "fan_in":  # a 1/√fan_in readout, made width-independent
        for p in model.head.parameters():
            p.mul_(m ** 0.5)
        for name, module in model.named_modules():  # U(±1/√fan_in) biases, made width-independent
            if isinstance(module, nn.Linear) and module is not model.head and module.bias is not None:
                module.bias.mul_((module.in_features / base.get_submodule(name).in_features) ** 0.5)
    model.output_mult = 1.0 / m
    scale = attention_scale(model.d_model // model.n_heads, base_head_dim)
    for block in [*model.blocks, *getattr(model, "encoder", [])]:  # an encoder–decoder's two stacks
        block.attn.pattern.scale = scale
        if hasattr(block, "cross"):  # and its cross-attention: scores q·k of a decoder and an encoder state
            block.cross.pattern.scale = scale
    return classes


def base_head_dim(base_width: int, n_heads: int, setting: int | None) -> int:
    """``model.mup_base_head_dim``, or the base model's head dimension with this model's heads."""
    return setting if setting is not None else base_width // n_heads


def problems(model: nn.Module, scheme: Any, scheme_name: str, embed_scale: str) -> list[str]:
    """What cannot be combined with ``model.parametrization=mup`` (empty when it composes): the init
    scheme, the embedding scale, and attention patterns that take no ``scale``."""
    out = []
    if init_kind(scheme) is None:
        out.append(f"init={scheme_name} cannot be combined with model.parametrization=mup: it scales the "
                   "embeddings with 1/√d_model (or does not say how it scales with width: a `mup_init` "
                   "attribute, 'fixed' or 'fan_in'), where μP keeps the input layer's scale constant in width. "
                   "Valid with mup: init=normal|scaled|zero_out (stds read at the base width) or init=default")
    if embed_scale != "none":
        out.append(f"model.embed_scale={embed_scale} cannot be combined with model.parametrization=mup: it grows "
                   "the embeddings with √d_model, where μP keeps them constant in width; use model.embed_scale=none")
    for block in getattr(model, "blocks", [])[:1]:
        pattern = getattr(block.attn, "pattern", None)
        if pattern is not None and not hasattr(pattern, "scale"):
            out.append(f"attention={type(pattern).__name__.lower()} takes no `scale` attribute, so "
                       "model.parametrization=mup cannot set its score scale to 1/d_head; subclass "
                       "ablate.model.patterns.Pattern (docs/extending.md)")
    return out
