"""Multi-head self-attention, with the six ways of sharing the Q, K, V projections.

The contract of a ``qkv_sharing`` option (built-in or your own class, named by ``_target_``):

* built as ``cls(d_model, n_heads, dropout=..., bias=..., **settings)`` (``settings``: the other
  keys of its YAML), one instance per layer;
* ``forward(x, pos, attn_mask, is_causal) -> (B, T, d_model)`` for ``x`` of shape (B, T, d_model):
  ``pos`` is the model's position module (call ``q, k = pos.rotate(q, k)`` on (B, H, T, hd)
  queries and keys); ``attn_mask``/``is_causal`` are SDPA's arguments from ``attention_mask``,
  built once per forward (the position bias and causal/padding mask, or None and a flag), or on
  CUDA a ``patterns.FlexScores`` (a bias-type position through FlexAttention) to pass on as is;
* ``pattern`` (attribute): the assembler sets the model's ``attention`` option there; a class
  that does not subclass :class:`Attention` must call it as ``self.pattern(q, k, v, attn_mask,
  is_causal, dropout)`` to combine with ``attention=local|linear`` (the default is softmax);
* optional: ``mask_self`` (bool attribute: the model then masks each token's own key), an output
  projection named ``out_proj`` and a fused input projection whose ``roles`` tag its output rows
  (both read by the init schemes in ``init.py``), ``problems(settings, context)`` (a classmethod
  returning what is wrong with its settings for the model in ``context``), ``flops(seq_len,
  batch_size)`` (its forward FLOPs per token, pattern included; without it, or with a ``forward``
  or ``project`` of its own that it does not describe, its forward is measured, ``flops.py``).

Subclassing :class:`Attention` gives all of that but ``project``. ``check`` verifies the contract
for any class before training: its settings against its signature, a build and a forward on the
meta device (no memory, no compute), and the output shape.

The built-in classes own one fused input projection ``qkv`` and the output projection
``out_proj``. Sharing is real: a shared projection is computed once and the same tensor is used
in every role, so it saves parameters and matmuls.

=============  ==========================  =========================  ===================
name           projection                  params (no bias)           source
=============  ==========================  =========================  ===================
independent    [Q | K | V] = x W, W: d×3d  3d² + d²                   Vaswani et al. 2017
qk_shared      [QK | V],     W: d×2d       2d² + d²                   Kitaev et al. 2020
qkv_shared     QKV,          W: d×d        d² + d²                    Kayyam et al. 2026
kv_shared      [Q | KV],     W: d×2d       2d² + d²                   Kayyam et al. 2026
mqa            [Q | K | V], one K/V head   d² + 2·d·hd + d²           Shazeer 2019
gqa            [Q | K | V], kv_heads       d² + 2·d·kv_heads·hd + d²  Ainslie et al. 2023
=============  ==========================  =========================  ===================

They produce q, k, v only: the mixing is the ``pattern`` attribute of :class:`Attention`, the
model's ``attention`` option (``patterns.py``: softmax, local, linear), called as
``pattern(q, k, v, attn_mask, is_causal, dropout)``, so every pattern combines with every
sharing variant. ``attention_mask`` builds, once per forward for all layers, the
``attn_mask`` / ``is_causal`` pair it gets.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch
import torch.nn as nn
from torch import Tensor

from ablate.components import Context, PositiveInt, check_module, shape_problem

from .flops import linear_flops, pattern_flops
from .patterns import Softmax


def attention_mask(T: int, device: torch.device, *, causal: bool, mask_self: bool = False,
                   bias: Tensor | None = None, key_padding: Tensor | None = None, prefix: int = 0,
                   ) -> tuple[Tensor | None, bool]:
    """The (attn_mask, is_causal) arguments of SDPA for a length-T self-attention.

    ``bias``: additive (heads, T, T) position bias or None; ``key_padding``: (B, T) bool,
    True at padding keys, or None. Without padding or ``mask_self``, a bias-free model takes
    SDPA's fast path (None, causal) and an encoder's bias passes as is. Otherwise a boolean
    mask (True = may attend), or the bias with -inf where attending is not allowed. A query
    that would be left with no key at all attends to itself (``mask_self``) or, failing that
    (an all-padding row), to every key, so softmax never sees an empty row. ``prefix``: a causal
    mask's first ``prefix`` keys are seen by every query (a prefix LM, Raffel et al. 2020, §3.2.1).
    """
    if key_padding is None and not mask_self and not prefix and (bias is None or not causal):
        return bias, causal and bias is None
    allowed = torch.ones(T, T, dtype=torch.bool, device=device)
    if causal:
        allowed = allowed.tril()
        allowed[:, :prefix] = True
    if key_padding is not None:
        allowed = allowed & ~key_padding[:, None, None, :]  # (B, 1, T, T)
    if mask_self:  # Kitaev et al. 2020, §2: a token may not attend to itself unless alone
        eye = torch.eye(T, dtype=torch.bool, device=device)
        others = allowed & ~eye
        allowed = others | (eye & ~others.any(-1, keepdim=True))
    allowed = allowed | ~allowed.any(-1, keepdim=True)
    if bias is None:
        return allowed, False
    return bias.masked_fill(~allowed, float("-inf")), False


def add_scores(attn_mask: Tensor | None, is_causal: bool, scores: Tensor) -> Tensor:
    """An SDPA mask that adds ``scores`` (B, H, T, T) (a position term that depends on q and k,
    ``Position.score_bias``) to what ``attn_mask``/``is_causal`` already allow and add."""
    if attn_mask is None:
        if not is_causal:
            return scores
        T = scores.shape[-1]
        causal = torch.ones(T, T, dtype=torch.bool, device=scores.device).tril()
        return scores.masked_fill(~causal, float("-inf"))
    if attn_mask.dtype == torch.bool:
        return scores.masked_fill(~attn_mask, float("-inf"))
    return scores + attn_mask


class Attention(nn.Module):
    """Base class: subclasses create ``self.qkv`` (via ``_projection``) and ``project``.

    ``mask_self``: exclude each token's own key (the shared-QK trick of Kitaev et al. 2020,
    Reformer §2: with Q = K a token's score with itself dominates). Offered by the Q=K
    variants' YAMLs, default false: the ablation measures plain sharing.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True,
                 mask_self: bool = False) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"attention: d_model={d_model} is not divisible by n_heads={n_heads}")
        self.d_model, self.n_heads, self.head_dim = d_model, n_heads, d_model // n_heads
        self.dropout, self.mask_self, self.use_bias = dropout, mask_self, bias
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        # How q, k, v are mixed: softmax attention unless the assembler sets the model's
        # ``attention`` option (one module shared by every layer, see patterns.py).
        self.pattern: nn.Module = Softmax(d_model, n_heads, False)

    @classmethod
    def problems(cls, settings: Mapping[str, Any], context: Context) -> list[str]:
        """What is wrong with ``settings`` for a model of ``context`` (empty when fine)."""
        return []

    def _projection(self, *roles: tuple[str, int]) -> None:
        self.qkv = nn.Linear(self.d_model, sum(size for _, size in roles), bias=self.use_bias)
        self.qkv.roles = roles
        self._sizes = [size for _, size in roles]

    def heads(self, t: Tensor) -> Tensor:
        """(B, T, h·hd) -> (B, h, T, hd)."""
        B, T, _ = t.shape
        return t.view(B, T, -1, self.head_dim).transpose(1, 2)

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """q (B, H, T, hd), k and v (B, H_kv, T, hd); shared roles are the same tensor."""
        raise NotImplementedError

    def flops(self, seq_len: int, batch_size: int) -> float:
        """Forward FLOPs per token: every Linear of the module once per token (the fused input
        projection, whose width is what sharing saves, and ``out_proj``), plus the pattern's own
        count (``patterns.py``). A subclass whose own ``forward`` or ``project`` computes something
        else either overrides this or is measured (``flops.py``)."""
        return (linear_flops(self, skip=[self.pattern])
                + pattern_flops(self.pattern, seq_len, batch_size, self.n_heads, self.head_dim))

    def forward(self, x: Tensor, pos: nn.Module, attn_mask: Tensor | None = None,
                is_causal: bool = False) -> Tensor:
        B, T, _ = x.shape
        q, k, v = self.project(x)
        scores = pos.score_bias(q, k) if hasattr(pos, "score_bias") else None  # deberta
        q, k = pos.rotate(q, k)
        if scores is not None:
            attn_mask, is_causal = add_scores(attn_mask, is_causal, scores), False
        if isinstance(attn_mask, Tensor) and attn_mask.dtype != torch.bool and attn_mask.dtype != q.dtype:
            attn_mask = attn_mask.to(q.dtype)  # e.g. a float32 bias under bf16 autocast
        y = self.pattern(q, k, v, attn_mask, is_causal, self.dropout if self.training else 0.0)
        return self.out_proj(y.transpose(1, 2).reshape(B, T, self.d_model))


class Independent(Attention):
    """Separate W_Q, W_K, W_V (Vaswani et al. 2017, §3.2.2), fused into one d×3d matmul."""

    def __init__(self, d_model: int, n_heads: int, **kw) -> None:
        super().__init__(d_model, n_heads, **kw)
        self._projection(("q", d_model), ("k", d_model), ("v", d_model))

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        q, k, v = self.qkv(x).split(self._sizes, dim=-1)
        return self.heads(q), self.heads(k), self.heads(v)


class QKShared(Attention):
    """Q = K = x W_QK, V = x W_V: the shared-QK attention of Kitaev et al. 2020 (Reformer,
    §2 "Shared-QK Transformer"; they also set ``mask_self``), as ablated by Kayyam et al.
    2026 ("Do Transformers Need Three Projections?")."""

    def __init__(self, d_model: int, n_heads: int, **kw) -> None:
        super().__init__(d_model, n_heads, **kw)
        self._projection(("qk", d_model), ("v", d_model))

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        qk, v = self.qkv(x).split(self._sizes, dim=-1)
        qk = self.heads(qk)
        return qk, qk, self.heads(v)


class QKVShared(Attention):
    """Q = K = V = x W (Kayyam et al. 2026, "Do Transformers Need Three Projections?",
    the single-projection variant): one d×d input projection."""

    def __init__(self, d_model: int, n_heads: int, **kw) -> None:
        super().__init__(d_model, n_heads, **kw)
        self._projection(("qkv", d_model))

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        t = self.heads(self.qkv(x))
        return t, t, t


class KVShared(Attention):
    """Q = x W_Q, K = V = x W_KV (Kayyam et al. 2026, "Do Transformers Need Three
    Projections?", the shared key-value variant)."""

    def __init__(self, d_model: int, n_heads: int, **kw) -> None:
        super().__init__(d_model, n_heads, **kw)
        self._projection(("q", d_model), ("kv", d_model))

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        q, kv = self.qkv(x).split(self._sizes, dim=-1)
        kv = self.heads(kv)
        return self.heads(q), kv, kv


class GQA(Attention):
    """Grouped-query attention (Ainslie et al. 2023, §2.2): ``kv_heads`` K/V heads, each
    shared by n_heads / kv_heads query heads."""

    def __init__(self, d_model: int, n_heads: int, kv_heads: PositiveInt = 2, **kw) -> None:
        super().__init__(d_model, n_heads, **kw)
        if kv_heads < 1 or n_heads % kv_heads:
            raise ValueError(f"gqa: kv_heads={kv_heads} must divide n_heads={n_heads}")
        self.kv_heads = kv_heads
        kv = kv_heads * self.head_dim
        self._projection(("q", d_model), ("k", kv), ("v", kv))

    @classmethod
    def problems(cls, settings: Mapping[str, Any], context: Context) -> list[str]:
        kv_heads, n = settings.get("kv_heads", 2), context.n_heads
        if isinstance(kv_heads, int) and kv_heads > 0 and n % kv_heads:
            valid = ", ".join(str(k) for k in range(1, n + 1) if n % k == 0)
            return [f"qkv_sharing.kv_heads={kv_heads} must divide model.n_heads={n} (valid: {valid})"]
        return []

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        q, k, v = self.qkv(x).split(self._sizes, dim=-1)
        return self.heads(q), self.heads(k), self.heads(v)


class MQA(GQA):
    """Multi-query attention (Shazeer 2019, "Fast Transformer Decoding: One Write-Head is
    All You Need", §3): a single K/V head shared by all query heads."""

    def __init__(self, d_model: int, n_heads: int, **kw) -> None:
        super().__init__(d_model, n_heads, kv_heads=1, **kw)


def check(target: Any, settings: Mapping[str, Any], context: Context, dropout: float, bias: bool) -> list[str]:
    """Every way ``target`` breaks the attention contract for this model (empty when it keeps it)."""
    from .positions import Position  # the do-nothing position module

    B, T, d = 2, min(context.max_len, 8), context.d_model

    def probe(attn: nn.Module) -> list[str]:
        pos = Position(d, context.n_heads, context.causal, T)
        y = attn(torch.empty(B, T, d), pos, None, context.causal)
        return shape_problem("qkv_sharing", target, "forward(x, pos, attn_mask, is_causal)", y, (B, T, d))

    passed = {"d_model": d, "n_heads": context.n_heads, "dropout": dropout, "bias": bias}
    return check_module("qkv_sharing", target, settings, passed, context, probe)
