"""Attention patterns: how queries, keys and values are mixed, once ``qkv_sharing`` produced them.

The contract of an ``attention`` option (built-in or your own class, named by ``_target_``):

* built once per model as ``cls(d_model, n_heads, causal, **settings)`` and shared by every
  layer (the assembler sets it as each attention module's ``pattern`` attribute, so it must
  hold no per-layer state; the built-in ones have no parameters at all);
* ``forward(q, k, v, attn_mask, is_causal, dropout) -> (B, H, T, hd)`` for q (B, H, T, hd) and
  k, v (B, H_kv, T, hd) (MQA/GQA: H_kv divides H), already rotated by the position module;
  ``attn_mask``/``is_causal`` are what ``attention.attention_mask`` built for the batch (None
  and a flag, a boolean mask True = may attend, or an additive float bias with -inf where
  attending is not allowed), ``dropout`` the attention-weight dropout probability (0 in eval);
* optional capability flags (class attributes, default True): ``additive_bias`` (it can add a
  position bias such as alibi's to its scores) and ``mask_self`` (it can hide a token's own key);
  validation refuses a combination the pattern cannot express, naming both options;
* optional ``scale`` attribute (float or None): the factor on the scores q·k, None meaning 1/√d_h;
  ``model.parametrization=mup`` sets it (``mup.py``) and refuses a pattern that has none;
* optional ``flex = True`` (default False): it also takes a :class:`FlexScores` as ``attn_mask``
  (the position bias as a FlexAttention score function instead of a materialised tensor; the
  model passes one only to a pattern that declares this, see ``Transformer.mask``);
* optional ``problems(settings, context)`` classmethod, as for every component;
* optional ``flops(seq_len, batch_size)``: its forward FLOPs per token (the score matmuls; see
  ``flops.py``), else its forward is measured on the meta device; ``checkpointed = True`` when its
  backward recomputes its forward (then a training step costs 4× its forward, not 3×).

Subclass :class:`Pattern`. ``check`` verifies the contract on the meta device before training.
Every pattern combines with every ``qkv_sharing`` option: sharing decides q, k, v; the pattern
decides which keys each query sees and how.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Literal, Mapping

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from ablate.components import Context, PositiveInt, check_module, shape_problem


def expand_kv(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """MQA/GQA: repeat each K/V head for the group of query heads it serves."""
    if k.shape[1] == q.shape[1]:
        return k, v
    g = q.shape[1] // k.shape[1]
    return k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)


try:  # FlexAttention (Dong et al. 2024, "Flex Attention: A Programming Model for Generating
    # Optimized Attention Kernels"): torch >= 2.5
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
except ImportError:  # pragma: no cover - older torch: the materialised mask everywhere
    create_block_mask = flex_attention = None


def flex_available() -> bool:
    """Whether this torch has FlexAttention."""
    return flex_attention is not None


@dataclass(frozen=True)
class FlexScores:
    """What a ``flex`` pattern gets as ``attn_mask`` instead of a (heads, T, T) tensor: the additive
    position bias as a score function ``score_mod(score, b, h, q_idx, kv_idx) -> score + bias``
    (``Position.score_mod``), and the causal mask as a ``BlockMask`` (None: every key allowed).
    The kernel evaluates the bias per score, inside the fused softmax, and skips blocks that
    the causal mask removes."""

    score_mod: Callable[..., Tensor]
    block_mask: Any = None


def _causal(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
    return q_idx >= kv_idx


_block_masks: dict[tuple, Any] = {}


@torch.compiler.disable  # built eagerly, once per (length, device), also inside a compiled model
def causal_block_mask(T: int, device: torch.device) -> Any:
    """The causal ``BlockMask`` of a length-T self-attention (cached)."""
    key = (T, str(device))
    if key not in _block_masks:
        with torch.inference_mode(False):  # usable for training when first built in validation
            _block_masks[key] = create_block_mask(_causal, None, None, T, T, device=device)
    return _block_masks[key]


@functools.cache
def _compiled_flex() -> Callable[..., Tensor]:
    return torch.compile(flex_attention, dynamic=False)


def flex_attend(q: Tensor, k: Tensor, v: Tensor, scores: FlexScores, scale: float | None = None) -> Tensor:
    """softmax(q·kᵀ/√d_h + bias)·v through ``flex_attention`` (GQA: K/V heads shared by groups).
    FlexAttention's fused kernel exists only compiled: inside a compiled model (``model.compile``)
    the call is traced with the rest; in an eager model on CUDA it goes through its own
    ``torch.compile``; elsewhere it runs eagerly, which materialises the scores (CPU: forward
    only, torch has no CPU backward for it)."""
    eager = torch.compiler.is_compiling() or q.device.type != "cuda"
    fn = flex_attention if eager else _compiled_flex()
    return fn(q, k, v, score_mod=scores.score_mod, block_mask=scores.block_mask, scale=scale,
              enable_gqa=k.shape[1] != q.shape[1])


class Pattern(nn.Module):
    """Base class of attention patterns (see the module docstring for the contract)."""

    additive_bias: bool = True   # can add an additive position bias (alibi, t5_bias, kerple)
    mask_self: bool = True       # can exclude each token's own key (qkv_sharing.mask_self)
    flex: bool = False           # also takes a FlexScores as attn_mask (FlexAttention)
    # the factor on the scores q·k: None is 1/√d_h; μP sets √(base d_h)/d_h (model.parametrization, mup.py)
    scale: float | None = None

    def __init__(self, d_model: int, n_heads: int, causal: bool) -> None:
        super().__init__()
        self.d_model, self.n_heads, self.causal = d_model, n_heads, causal

    @classmethod
    def problems(cls, settings: Mapping[str, Any], context: Context) -> list[str]:
        """What is wrong with ``settings`` for a model of ``context`` (empty when fine)."""
        return []

    def forward(self, q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None, is_causal: bool,
                dropout: float = 0.0) -> Tensor:
        raise NotImplementedError


class Softmax(Pattern):
    """Full softmax attention, softmax(q·kᵀ/√d_h + bias)·v (Vaswani et al. 2017, §3.2.1): every
    query sees every allowed key. PyTorch's fused ``scaled_dot_product_attention``, exactly the
    path every model took before patterns existed (the default); given a :class:`FlexScores`
    (a bias-type position on CUDA, ``Transformer.mask``), the same softmax through FlexAttention,
    with the bias computed inside the kernel (FlexAttention has no dropout: the model passes one
    only when attention dropout is off)."""

    flex = True

    def forward(self, q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | FlexScores | None, is_causal: bool,
                dropout: float = 0.0) -> Tensor:
        if isinstance(attn_mask, FlexScores):
            if dropout:
                raise ValueError("attention=softmax: FlexAttention has no attention dropout; "
                                 "the model uses the materialised mask when model.dropout > 0")
            return flex_attend(q, k, v, attn_mask, self.scale)
        extra = {}
        if k.shape[1] != q.shape[1]:  # MQA/GQA: each K/V head serves a group of query heads
            if attn_mask is None:
                extra["enable_gqa"] = True
            else:  # the fused masked kernels do not take groups: expand K/V instead
                k, v = expand_kv(q, k, v)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal and attn_mask is None,
                                              dropout_p=dropout, scale=self.scale, **extra)

    def flops(self, seq_len: int, batch_size: int) -> float:
        """q·kᵀ and weights·v over all T keys, per query head: 2 · 2·T·d_h · H = 4·T·d_model per
        token, causal or not (the count FlopCounterMode gives SDPA; a causal kernel may skip the
        masked half, which this does not credit)."""
        return 4.0 * seq_len * self.d_model


class Local(Pattern):
    """Sliding-window attention. ``window`` = w is the number of positions besides its own that a
    query sees, so each query attends to w + 1 keys (itself included), decoder or encoder:

        decoder: the w positions before it, i - w <= j <= i (Jiang et al. 2023, Mistral 7B §2:
                 "positions between i - W and i");
        encoder: w/2 positions on each side, |i - j| <= w/2 (Beltagy et al. 2020, Longformer §3.1:
                 "½w tokens on each side"), so w must be even in an encoder (validation refuses an
                 odd one).

    Near the ends of the sequence fewer keys exist: min(i, w) + 1 in a decoder, min(i, w/2) + 1 +
    min(T-1-i, w/2) in an encoder (0-based i); w >= T-1 (decoder) or w/2 >= T-1 (encoder) is full
    attention. This is FlashAttention's ``window_size=(w, 0)`` or ``(w/2, w/2)``; where a "window of
    W" counts the query itself (W keys), set window = W - 1. Softmax attention under a band mask,
    combined with the model's own mask (position bias, padding, ``mask_self``); a query whose window
    holds no allowed key attends to its whole window rather than to nothing. The band is
    materialised (T×T), so it saves receptive field, not memory, on this implementation."""

    def __init__(self, d_model: int, n_heads: int, causal: bool, window: PositiveInt = 16) -> None:
        super().__init__(d_model, n_heads, causal)
        problem = self.window_problem(window, causal)
        if problem:
            raise ValueError(problem)
        self.window = window
        self._bands: dict[tuple, Tensor] = {}

    @staticmethod
    def window_problem(window: Any, causal: bool) -> str | None:
        """Why ``window`` cannot be used for this model, or None: an encoder splits it evenly."""
        if causal or not isinstance(window, int) or window % 2 == 0:
            return None
        even = " or ".join(str(w) for w in (window - 1, window + 1) if w > 0)
        return (f"attention.window={window} cannot be split evenly around a query of an encoder "
                f"(model.causal=false): the window is the number of positions a query sees besides its own, "
                f"window/2 on each side (Longformer's w); use an even window, e.g. {even}")

    @classmethod
    def problems(cls, settings: Mapping[str, Any], context: Context) -> list[str]:
        problem = cls.window_problem(settings.get("window"), context.causal)
        return [problem] if problem else []

    def band(self, T: int, device: torch.device, causal: bool) -> Tensor:
        """(T, T) bool: True where key j is inside query i's window."""
        key = (T, device, causal)
        if key not in self._bands:  # built outside inference mode (validation's), usable for training
            with torch.inference_mode(False):
                self._bands[key] = self._band(T, device, causal)
        return self._bands[key]

    def _band(self, T: int, device: torch.device, causal: bool) -> Tensor:
        i, j = torch.arange(T, device=device)[:, None], torch.arange(T, device=device)[None, :]
        if causal:  # the w positions before i, and i
            return (j <= i) & (i - j <= self.window)
        return (i - j).abs() <= self.window // 2  # w/2 on each side, and i

    def forward(self, q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None, is_causal: bool,
                dropout: float = 0.0) -> Tensor:
        band = self.band(q.shape[-2], q.device, is_causal or self.causal)
        if attn_mask is None:
            mask = band
        else:
            allowed = band & (attn_mask if attn_mask.dtype == torch.bool else attn_mask > float("-inf"))
            allowed = allowed | (band & ~allowed.any(-1, keepdim=True))  # an empty window: all of it
            if attn_mask.dtype == torch.bool:
                mask = allowed
            else:
                finite = attn_mask.masked_fill(attn_mask == float("-inf"), 0.0)
                mask = finite.masked_fill(~allowed, float("-inf"))
        k, v = expand_kv(q, k, v)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, scale=self.scale)

    def flops(self, seq_len: int, batch_size: int) -> float:
        """As softmax's, 4·T·d_model per token: the band is a mask on the full T×T scores, so this
        implementation computes every score whatever the window (it saves receptive field only)."""
        return 4.0 * seq_len * self.d_model


def linear_quadratic(q: Tensor, k: Tensor, v: Tensor, causal: bool) -> Tensor:
    """The reference form of linear attention, O(T²): (φ(q)φ(k)ᵀ ⊙ M) v, row-normalised
    (Katharopoulos et al. 2020, eq. 4-5); q, k already mapped by φ. For tests."""
    a = q @ k.transpose(-1, -2)
    if causal:
        a = a.tril()
    return (a @ v) / a.sum(-1, keepdim=True)


class Linear(Pattern):
    """Kernelised linear attention (Katharopoulos et al. 2020, "Transformers are RNNs", §3.2):
    sim(q, k) = φ(q)·φ(k) with φ(x) = elu(x) + 1 (eq. 7), so

        encoder:  y_i = φ(q_i)ᵀ S / φ(q_i)ᵀ z,       S = Σ_j φ(k_j) v_jᵀ,  z = Σ_j φ(k_j)
        decoder:  y_i = φ(q_i)ᵀ S_i / φ(q_i)ᵀ z_i,   S_i, z_i the same sums over j <= i (eq. 8-9)

    O(T) memory and time in the length. The decoder's prefix sums run over chunks of ``chunk``
    tokens: each chunk adds the state of all earlier chunks to a masked C×C product inside
    it (O(T·C + T/C·d_h²) memory). In training only q, k, v are kept for backward and the sums
    are recomputed there (activation checkpointing), as the paper's own constant-memory
    gradient (§3.3.1) avoids storing them; this costs one extra forward of the pattern. No attention weights exist, so there is no attention dropout
    (the residual dropout still applies), no additive position bias and no ``mask_self``
    (validation refuses them); an encoder's boolean mask is read as key padding (a key is
    dropped from S and z when no query may attend to it). No softmax scores either, so ``scale``
    (μP's) does not apply."""

    additive_bias = False
    mask_self = False
    checkpointed = True  # training recomputes the forward in backward (see forward)

    def __init__(self, d_model: int, n_heads: int, causal: bool, feature_map: Literal["elu"] = "elu",
                 chunk: PositiveInt = 16) -> None:
        super().__init__(d_model, n_heads, causal)
        self.feature_map, self.chunk = feature_map, chunk

    @staticmethod
    def phi(x: Tensor) -> Tensor:
        return F.elu(x) + 1

    def forward(self, q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None, is_causal: bool,
                dropout: float = 0.0) -> Tensor:
        if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
            # keep only q, k, v for backward and recompute the sums there: the constant-memory
            # gradient of Katharopoulos et al. 2020 §3.3.1, by recomputation instead of a custom kernel
            return checkpoint(self.mix, q, k, v, attn_mask, is_causal, use_reentrant=False)
        return self.mix(q, k, v, attn_mask, is_causal)

    def flops(self, seq_len: int, batch_size: int) -> float:
        """Forward FLOPs per token, O(T·d_h²) in all (per head, D = d_h):

        encoder: S = φ(K)ᵀV and φ(q)·S (2·D² each), φ(q)·z (2·D): 4·D² + 2·D;
        decoder: per chunk of C = min(chunk, T) tokens (the last one padded), the chunk's state
        φ(K)ᵀV and φ(Q)·S (2·C·D² each), the C×C scores and their product with V (2·C²·D each)
        and φ(Q)·z (2·C·D), divided by the T real tokens."""
        D, T = self.d_model // self.n_heads, seq_len
        if not self.causal:
            return self.n_heads * (4.0 * D * D + 2.0 * D)
        C = min(self.chunk, T)
        padded = -(-T // C) * C
        return self.n_heads * padded * (4.0 * D * D + 4.0 * C * D + 2.0 * D) / T

    def mix(self, q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None, is_causal: bool) -> Tensor:
        k, v = expand_kv(q, k, v)
        q, k = self.phi(q), self.phi(k)
        if attn_mask is not None and attn_mask.dtype != torch.bool:
            raise ValueError("attention=linear cannot add an additive position bias to its scores")
        if is_causal or self.causal:
            if attn_mask is not None:
                raise ValueError("attention=linear cannot take a mask in a decoder (mask_self)")
            return self.causal_form(q, k, v)
        if attn_mask is not None:  # key padding: (B|1, 1|H, T, T) -> (B|1, 1|H, T, 1)
            k = k * attn_mask.any(-2).unsqueeze(-1).to(k.dtype)
        s, z = k.transpose(-1, -2) @ v, k.sum(-2)  # (B, H, d, d_v), (B, H, d)
        return (q @ s) / (q @ z.unsqueeze(-1))

    def causal_form(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        B, H, T, D = q.shape
        C = min(self.chunk, T)
        n = -(-T // C)
        pad = n * C - T  # padded keys (zero features) add nothing; padded queries (ones, so
        q = F.pad(q, (0, 0, 0, pad), value=1.0).view(B, H, n, C, D)  # no 0/0) are dropped
        k, v = (F.pad(t, (0, 0, 0, pad)).view(B, H, n, C, t.shape[-1]) for t in (k, v))
        kv = k.transpose(-1, -2) @ v                     # (B, H, n, D, Dv) per chunk
        s = kv.cumsum(2) - kv                            # the state before each chunk
        z = k.sum(-2)
        z = z.cumsum(2) - z                              # (B, H, n, D)
        a = (q @ k.transpose(-1, -2)).tril()             # inside the chunk, causal
        num = q @ s + a @ v
        den = (q @ z.unsqueeze(-1)).squeeze(-1) + a.sum(-1)
        y = num / den.unsqueeze(-1)
        return y.reshape(B, H, n * C, -1)[:, :, :T]


def check(target: Any, settings: Mapping[str, Any], context: Context, *, pos_enc: str = "?",
          pos_bias: bool = False, qkv_sharing: str = "?", mask_self: bool = False,
          name: str | None = None) -> list[str]:
    """Every way ``target`` breaks the pattern contract for this model, and every other choice of
    the model it cannot express (``pos_bias``: the position module adds a score bias;
    ``mask_self``: the attention hides each token's own key)."""
    name = name or getattr(target, "__name__", "?").lower()
    problems = []
    if pos_bias and not getattr(target, "additive_bias", True):
        problems.append(f"attention={name} cannot be combined with pos_enc={pos_enc}: it has no score matrix "
                        f"to add pos_enc={pos_enc}'s position bias to; pick attention=softmax|local or a "
                        "pos_enc without a bias (none, sinusoidal, learned, rope, xpos)")
    if mask_self and not getattr(target, "mask_self", True):
        problems.append(f"attention={name} cannot be combined with qkv_sharing={qkv_sharing} "
                        f"qkv_sharing.mask_self=true: it cannot hide a token's own key; set mask_self=false "
                        "or pick attention=softmax|local")
    B, T, H, hd = 2, min(context.max_len, 8), context.n_heads, context.head_dim

    def probe(pattern: nn.Module) -> list[str]:
        q = torch.empty(B, H, T, hd)
        y = pattern(q, q, q, None, context.causal, 0.0)
        return shape_problem("attention", target, "forward(q, k, v, attn_mask, is_causal, dropout)", y, (B, H, T, hd))

    passed = {"d_model": context.d_model, "n_heads": H, "causal": context.causal}
    return problems + check_module("attention", target, settings, passed, context, probe)
