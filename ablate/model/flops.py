"""FLOPs per token, counted per component (the definitions are in docs/measurements.md).

What is counted: the matmuls, 2·m·n·k FLOPs each: every ``nn.Linear`` (2·in·out per token,
bias adds not counted), the output head, and the attention scores (q·kᵀ and the weighted sum of
v, at the run's length T: full softmax attention computes all T×T scores per head, causal or
not, as ``torch.utils.flop_counter.FlopCounterMode`` counts SDPA). Not counted: elementwise
ops, norms, softmax, embedding lookups, the optimizer. A training step costs 3× the forward
(backward: 2× the forward's matmuls, one for the gradient of each operand), plus what a module
recomputes in its backward (``attention=linear`` checkpoints its sums: one more forward of it).

Each component reports its own forward FLOPs per token through a method of its base class:
``flops(seq_len, batch_size)`` for attention (its projections and its pattern), patterns, FFNs,
norms and a position module's once-per-forward hooks (``embed``, ``bias``), ``layer_flops`` for a
position module's per-layer hooks (``rotate``, ``score_bias``). ``batch_size`` matters only for
work done once per batch (DeBERTa's relative projections). A component without such a method,
or whose class (outside ``ablate.model``) overrides a hook that the inherited method describes
(a ``forward`` of its own), is *measured* instead: its hooks run once on the meta device (no
memory, no compute) under ``FlopCounterMode``, and the count is divided by the tokens.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any, Callable, Iterable

import torch
import torch.nn as nn
from torch.utils.flop_counter import FlopCounterMode

BUILT_IN = "ablate.model."  # classes defined here are checked against FlopCounterMode by tests/test_flops.py


def linear_flops(module: nn.Module, skip: Iterable[nn.Module] = ()) -> float:
    """Forward FLOPs per token of every ``nn.Linear`` inside ``module`` (each applied once per token),
    leaving out the subtrees of ``skip``."""
    skipped = {id(m) for s in skip for m in s.modules()}
    return float(sum(2 * m.in_features * m.out_features for m in module.modules()
                     if isinstance(m, nn.Linear) and id(m) not in skipped))


def _owner(cls: type, name: str) -> type | None:
    return next((c for c in cls.__mro__ if name in vars(c)), None)


def counts_itself(module: Any, method: str, hooks: Iterable[str]) -> bool:
    """Whether ``module.<method>`` describes what its ``hooks`` compute (``module``: an instance or
    a class): it has the method, and no class outside ``ablate.model`` overrides one of the hooks
    after (below) the class that defines the method (a user subclass of ``Attention`` with its own
    ``forward`` but no ``flops``)."""
    cls = module if isinstance(module, type) else type(module)
    owner = _owner(cls, method)
    if owner is None or not callable(getattr(module, method, None)):
        return False
    mro = cls.__mro__
    for hook in hooks:
        by = _owner(cls, hook)
        if by is not None and mro.index(by) < mro.index(owner) and not by.__module__.startswith(BUILT_IN):
            return False
    return True


def meta_copy(module: nn.Module) -> nn.Module:
    """A copy of ``module`` whose parameters and buffers live on the meta device (nothing copied),
    frozen: a forward of it records no graph."""
    memo: dict[int, Any] = {}
    for t in itertools.chain(module.parameters(), module.buffers()):
        meta = torch.empty_like(t, device="meta")
        memo[id(t)] = nn.Parameter(meta, requires_grad=False) if isinstance(t, nn.Parameter) else meta
    return copy.deepcopy(module, memo)


def measured(module: nn.Module, call: Callable[[nn.Module], Any]) -> float:
    """The FLOPs ``FlopCounterMode`` counts while ``call`` runs a frozen meta copy of ``module`` on
    the meta device (there SDPA takes its math path, so attention scores count)."""
    clone = meta_copy(module)
    with torch.device("meta"), FlopCounterMode(display=False) as counter:
        call(clone)
    return float(counter.get_total_flops())


def per_token(module: nn.Module, method: str, hooks: tuple[str, ...], call: Callable[[nn.Module], Any],
              seq_len: int, batch_size: int) -> float:
    """``module.<method>(seq_len, batch_size)`` when it counts itself, else ``call`` measured and
    divided by the batch's tokens."""
    if counts_itself(module, method, hooks):
        return float(getattr(module, method)(seq_len, batch_size))
    return measured(module, call) / (seq_len * batch_size)


# ---------------------------------------------------------------------------------------------
# each kind of component: its own count, else its hooks measured on the meta device

def pattern_flops(pattern: nn.Module, seq_len: int, batch_size: int, n_heads: int, head_dim: int) -> float:
    """Forward FLOPs per token of an attention pattern with ``n_heads`` query heads."""
    def call(p: nn.Module) -> None:
        q = torch.empty(batch_size, n_heads, seq_len, head_dim)
        p(q, q.clone(), q.clone(), None, bool(getattr(p, "causal", False)), 0.0)

    return per_token(pattern, "flops", ("forward",), call, seq_len, batch_size)


def attention_flops(attn: nn.Module, seq_len: int, batch_size: int, d_model: int, n_heads: int,
                    causal: bool) -> float:
    """Forward FLOPs per token of one attention layer: its projections and its pattern."""
    from .positions import Position

    def call(a: nn.Module) -> None:
        a(torch.empty(batch_size, seq_len, d_model), Position(d_model, n_heads, causal, seq_len), None, causal)

    return per_token(attn, "flops", ("forward", "project"), call, seq_len, batch_size)


def module_flops(module: nn.Module, seq_len: int, batch_size: int, d_model: int) -> float:
    """Forward FLOPs per token of a (B, T, d) -> (B, T, d) module: an FFN or a norm."""
    def call(m: nn.Module) -> None:
        m(torch.empty(batch_size, seq_len, d_model))

    return per_token(module, "flops", ("forward",), call, seq_len, batch_size)


def position_flops(pos: nn.Module, seq_len: int, batch_size: int, d_model: int, n_heads: int) -> tuple[float, float]:
    """(once per forward, per layer) FLOPs per token of a position module: ``embed`` and ``bias``
    run once per forward, ``rotate`` and ``score_bias`` in every layer."""
    def once(p: nn.Module) -> None:
        p.embed(torch.empty(batch_size, seq_len, d_model))
        p.bias(seq_len, seq_len)

    def layer(p: nn.Module) -> None:
        q = torch.empty(batch_size, n_heads, seq_len, d_model // n_heads)
        if hasattr(p, "score_bias"):
            p.score_bias(q, q.clone())
        p.rotate(q, q.clone())

    return (per_token(pos, "flops", ("embed", "bias"), once, seq_len, batch_size),
            per_token(pos, "layer_flops", ("rotate", "score_bias"), layer, seq_len, batch_size))


# ---------------------------------------------------------------------------------------------
# the model

def forward_flops(model: nn.Module, seq_len: int, batch_size: int) -> dict[str, float]:
    """Forward FLOPs per token of an assembled ``Transformer``, by component: ``attention``
    (projections and scores, every layer), ``ffn``, ``position``, ``norm``, ``head``. Shared
    layers (``model.share_layers``) count once per layer: each layer still computes."""
    d, H, causal = model.d_model, model.n_heads, model.causal
    once, per_layer = position_flops(model.pos, seq_len, batch_size, d, H)
    counted: dict[int, dict[str, float]] = {}  # a shared block: counted once, added per layer
    out = {"attention": 0.0, "ffn": 0.0, "position": once + len(model.blocks) * per_layer, "norm": 0.0}
    for block in model.blocks:
        if id(block) not in counted:
            norms = [m for m in (block.attn_norm, block.ffn_norm, getattr(block, "attn_out_norm", None),
                                 getattr(block, "ffn_out_norm", None)) if m is not None]
            counted[id(block)] = {
                "attention": attention_flops(block.attn, seq_len, batch_size, d, H, causal),
                "ffn": module_flops(block.ffn, seq_len, batch_size, d),
                "norm": sum(module_flops(n, seq_len, batch_size, d) for n in norms)}
        for key, value in counted[id(block)].items():
            out[key] += value
    out["norm"] += module_flops(model.final_norm, seq_len, batch_size, d)
    out["head"] = linear_flops(model.head)
    return out


def recomputed_flops(model: nn.Module, seq_len: int, batch_size: int) -> float:
    """FLOPs per token a training step's backward recomputes: the forward of every layer's pattern
    that checkpoints itself (``checkpointed = True``: ``attention=linear``), when the attention
    module calls it (it counts itself, so it is the ``Attention`` forward that does)."""
    total = 0.0
    for block in model.blocks:
        pattern = getattr(block.attn, "pattern", None)
        if getattr(pattern, "checkpointed", False) and counts_itself(block.attn, "flops", ("forward", "project")):
            total += pattern_flops(pattern, seq_len, batch_size, block.attn.n_heads, block.attn.head_dim)
    return total


def training_flops(model: nn.Module, seq_len: int, batch_size: int) -> float:
    """Training FLOPs per input token: 3 × the forward (backward = 2 × the forward's matmuls) plus
    what the backward recomputes."""
    return 3 * sum(forward_flops(model, seq_len, batch_size).values()) + recomputed_flops(model, seq_len, batch_size)
