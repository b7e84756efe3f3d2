"""Position encodings.

The contract of a ``pos_enc`` option (built-in or your own class, named by ``_target_``): one
module per model, shared by every layer, built as ``cls(d_model, n_heads, causal, max_len,
**settings)`` (a ``max_len`` setting replaces the model's), acting through four hooks:

* ``embed(x)``        -- (B, T, d) token embeddings -> (B, T, d) (sinusoidal, learned add to them;
  ``match_tokens(rms)``, called once after the init scheme, tells a fixed table the tokens' scale);
* ``rotate(q, k)``    -- (B, H, T, hd) queries and keys of every layer -> the same shapes (rope, xpos);
* ``bias(q_len, k_len)`` -- an additive (heads, q_len, k_len) score bias, or None (alibi, t5_bias);
* ``score_bias(q, k)`` -- an additive (B, H, q_len, k_len) score term computed from each layer's
  queries and keys themselves (before ``rotate``), in the units of the scaled scores
  softmax(q·k/√hd + ...) sees, or None (deberta). Attention adds it to the mask the pattern gets,
  so every pattern that takes an additive bias (softmax, local) takes it; linear refuses it.

A scheme with a ``bias`` may also give it as a FlexAttention score function (Dong et al. 2024):
``score_mod()`` returns ``f(score, b, h, q_idx, kv_idx) -> score + bias[h, q_idx, kv_idx]`` for a
self-attention (q_len = k_len), or None (the default). On CUDA the model then never materialises
the (heads, T, T) bias: softmax attention computes it per score inside FlexAttention's kernel
(``Transformer.mask``); elsewhere ``bias`` is used. ``score_mod_bias`` evaluates a score function
on the whole grid, which must equal ``bias`` (alibi, t5_bias and kerple are tested so).

Subclass :class:`Position`, whose hooks do nothing, and override what your scheme needs; a
``problems(settings, context)`` classmethod reports settings that cannot work for the model
(rope's odd head dimension). FLOPs (``flops.py``): ``flops(seq_len, batch_size)`` counts the
once-per-forward hooks (``embed``, ``bias``) and ``layer_flops(seq_len, batch_size)`` the
per-layer ones (``rotate``, ``score_bias``), per token; a subclass that overrides a hook without
its count is measured on the meta device instead. ``check`` verifies the contract before training, on the meta device.
Tensors derived from the sequence length only are cached per (length, device, dtype).

Why one module over ~450 lines: it is one idea in nine short variants, each its paper's equation
under the one ``Position`` contract and ``check``, kept together so a reader compares their math side
by side (and every ``pos_enc`` option's ``_target_`` stays ``ablate.model.positions.<Class>``).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Literal, Mapping

import numpy as np
import torch
import torch.nn as nn
from torch import Tensor

from ablate.components import Context, PositiveFloat, PositiveInt, check_module, shape_problem


class Position(nn.Module):
    """Base class; every hook is the identity."""

    def __init__(self, d_model: int, n_heads: int, causal: bool, max_len: int) -> None:
        super().__init__()
        self.d_model, self.n_heads, self.causal, self.max_len = d_model, n_heads, causal, max_len
        self.head_dim = d_model // n_heads
        self._cache: dict[tuple, object] = {}

    def embed(self, x: Tensor) -> Tensor:
        return x

    def rotate(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        return q, k

    def bias(self, q_len: int, k_len: int) -> Tensor | None:
        return None

    def score_bias(self, q: Tensor, k: Tensor) -> Tensor | None:
        """An additive (B, H, q_len, k_len) score term that depends on q (B, H, T, hd) and k
        (B, H_kv, T, hd) themselves, or None (the default: existing schemes are unaffected)."""
        return None

    def score_mod(self) -> Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor] | None:
        """``bias`` as a FlexAttention score function ``(score, b, h, q_idx, kv_idx) -> score +
        bias``, for self-attention, or None (the default: ``bias`` is materialised)."""
        return None

    @classmethod
    def problems(cls, settings: Mapping[str, Any], context: Context) -> list[str]:
        """What is wrong with ``settings`` for a model of ``context`` (empty when fine)."""
        return []

    def match_tokens(self, token_rms: float) -> None:
        """Called once after the init scheme with the RMS of the token embeddings as the model adds
        them (``model.embed_scale`` applied): a fixed additive table may scale itself to them
        (sinusoidal does). Default: nothing."""

    def flops(self, seq_len: int, batch_size: int) -> float:
        """Matmul FLOPs per token of ``embed`` and ``bias`` (once per forward). The built-in
        tables, biases and rotations are elementwise or lookups: 0."""
        return 0.0

    def layer_flops(self, seq_len: int, batch_size: int) -> float:
        """Matmul FLOPs per token of ``rotate`` and ``score_bias`` in one layer."""
        return 0.0

    def _cached(self, key: tuple, make: Callable[[], object]):
        # Built outside inference mode: Lightning validates under torch.inference_mode, and
        # an inference tensor cached there could not be saved for backward in training.
        if key not in self._cache:
            with torch.inference_mode(False), torch.no_grad():
                self._cache[key] = make()
        return self._cache[key]


class NoPE(Position):
    """No position information at all; causal masking alone lets a decoder infer order.

    Kazemnejad et al. 2023, "The Impact of Positional Encoding on Length Generalization in
    Transformers" (NoPE, §2-3). In a bidirectional encoder the model is permutation-equivariant.
    """


class Sinusoidal(Position):
    """Fixed sinusoids added to the embeddings (Vaswani et al. 2017, §3.5):
    PE(pos, 2i) = sin(pos / 10000^(2i/d)),  PE(pos, 2i+1) = cos(pos / 10000^(2i/d)),
    times ``amplitude``. Defined for any length.

    ``amplitude: tokens`` (the default) sets it, once after the init scheme (``match_tokens``), to
    the RMS of the token embeddings as the model adds them, so tokens and positions start in the
    paper's proportion whatever the init: Vaswani et al. add the amplitude-1 table to √d-scaled
    embeddings drawn with std d^-1/2 (§3.4), i.e. to tokens of RMS 1. With GPT-2's std 0.02 and
    no scaling, an amplitude-1 table would be ~50× the tokens and swamp them (the first layer
    would see two different tokens at one position as nearly the same vector). A number fixes
    the amplitude (1: the paper's table as printed, whatever the tokens' scale)."""

    def __init__(self, d_model: int, n_heads: int, causal: bool, max_len: int, base: PositiveFloat = 10000.0,
                 amplitude: Literal["tokens"] | PositiveFloat = "tokens") -> None:
        super().__init__(d_model, n_heads, causal, max_len)
        self.base, self.amplitude = base, amplitude
        self.register_buffer("scale", torch.tensor(1.0 if amplitude == "tokens" else float(amplitude)))

    def match_tokens(self, token_rms: float) -> None:
        if self.amplitude == "tokens" and math.isfinite(token_rms) and token_rms > 0:
            self.scale.fill_(token_rms)

    def table(self, T: int, device: torch.device, dtype: torch.dtype) -> Tensor:
        def make() -> Tensor:
            pos = torch.arange(T, device=device, dtype=torch.float32)[:, None]
            inv_freq = self.base ** (-torch.arange(0, self.d_model, 2, device=device) / self.d_model)
            pe = torch.zeros(T, self.d_model, device=device)
            pe[:, 0::2] = torch.sin(pos * inv_freq)
            pe[:, 1::2] = torch.cos(pos * inv_freq)[:, : self.d_model // 2]
            return pe.to(dtype)

        return self._cached((T, device, dtype), make)

    def embed(self, x: Tensor) -> Tensor:
        return x + self.scale.to(x.dtype) * self.table(x.shape[1], x.device, x.dtype)


class Learned(Position):
    """A learned absolute position table added to the embeddings (Gehring et al. 2017;
    GPT, Radford et al. 2018; BERT, Devlin et al. 2019). It has no entry for positions
    ``>= max_len``, so it cannot run on longer sequences."""

    def __init__(self, d_model: int, n_heads: int, causal: bool, max_len: PositiveInt) -> None:
        super().__init__(d_model, n_heads, causal, max_len)
        self.table = nn.Embedding(max_len, d_model)

    @classmethod
    def problems(cls, settings: Mapping[str, Any], context: Context) -> list[str]:
        size = settings.get("max_len", context.max_len)
        if isinstance(size, int) and size < context.max_len:
            return [f"pos_enc=learned has a table of pos_enc.max_len={size} positions but the task runs at "
                    f"length {context.max_len} (task.seq_len/task.eval_lengths); learned positions cannot "
                    "extrapolate: raise pos_enc.max_len or pick another pos_enc"]
        return []

    def embed(self, x: Tensor) -> Tensor:
        T = x.shape[1]
        if T > self.max_len:
            raise ValueError(
                f"learned positions: sequence length {T} exceeds the table size max_len={self.max_len} "
                f"(pos_enc.max_len); learned positions cannot extrapolate")
        return x + self.table.weight[:T]


def rotate_half(x: Tensor) -> Tensor:
    """(x1, x2) -> (-x2, x1) on the two halves of the last dimension."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class RoPE(Position):
    """Rotary position embedding (Su et al. 2021, RoFormer, eq. 34 with θ_i = base^(-2i/d), eq. 15).

    Each pair of query/key coordinates at position m is rotated by the angle m·θ_i, so
    q_m·k_n depends on m - n only. Pairs are (i, i + d/2) rather than (2i, 2i+1): the same
    rotation up to a fixed permutation of the (learned) projection's output features.
    """

    def __init__(self, d_model: int, n_heads: int, causal: bool, max_len: int,
                 base: PositiveFloat = 10000.0) -> None:
        super().__init__(d_model, n_heads, causal, max_len)
        if self.head_dim % 2:
            raise ValueError(f"{type(self).__name__}: rotates coordinate pairs, so the head dimension "
                             f"d_model/n_heads={self.head_dim} must be even")
        self.base = base

    @classmethod
    def problems(cls, settings: Mapping[str, Any], context: Context) -> list[str]:
        if context.head_dim % 2:
            return [f"pos_enc={cls.__name__.lower()} needs an even head dimension; model.d_model/model.n_heads "
                    f"= {context.d_model}/{context.n_heads} = {context.head_dim}"]
        return []

    def angles(self, T: int, device: torch.device) -> Tensor:
        """(T, head_dim) angles m·θ_i, each frequency twice (once per half)."""
        inv_freq = self.base ** (-torch.arange(0, self.head_dim, 2, device=device) / self.head_dim)
        angles = torch.outer(torch.arange(T, device=device, dtype=torch.float32), inv_freq)
        return torch.cat((angles, angles), dim=-1)

    def cos_sin(self, T: int, device: torch.device, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        def make() -> tuple[Tensor, Tensor]:
            a = self.angles(T, device)
            return a.cos().to(dtype), a.sin().to(dtype)

        return self._cached((T, device, dtype), make)

    def rotate(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        cos, sin = self.cos_sin(q.shape[-2], q.device, q.dtype)
        rq = q * cos + rotate_half(q) * sin
        rk = rq if k is q else k * cos + rotate_half(k) * sin  # Q=K stays one tensor
        return rq, rk


def _xpos_encoder_problem() -> str:
    return ("pos_enc=xpos needs a decoder: with model.causal=false (an encoder, a prefix LM's source, an "
            "encoder–decoder's encoder) its decay becomes an up-weighting of keys ahead of the query (x1.87 at "
            "distance 255); valid: model.causal=true with model.arch=auto or decoder, or a "
            "bidirectional pos_enc (rope, alibi, t5_bias, kerple, deberta, sinusoidal, learned, none)")


class XPos(RoPE):
    """xPos (Sun et al. 2022, "A Length-Extrapolatable Transformer", §3.2): RoPE whose
    query at position n is also scaled by ζ^(n/γ) and key by ζ^(-n/γ), with
    ζ_i = (2i/d + 0.4) / 1.4 per rotation pair and γ = ``scale_base``. So q_m·k_n gets the
    factor ζ^((m-n)/γ): relative-offset-only, decaying with distance. Positions are centred
    on the middle of the sequence (as in the authors' torchscale code) to keep the scales
    near 1.

    Decoders only: the factor ζ^((m-n)/γ) < 1 decays with distance only for keys behind the
    query (m > n); in an encoder a key ahead of the query (m < n) is *up*-weighted by
    ζ^(-(n-m)/γ) (×1.87 at distance 255 for the lowest ζ, γ = 512), the opposite of the intended
    decay, so ``causal=false`` is refused (as x-transformers does; the paper's bidirectional
    variant uses a different, blockwise scheme).
    """

    def __init__(self, d_model: int, n_heads: int, causal: bool, max_len: int,
                 base: PositiveFloat = 10000.0, scale_base: PositiveFloat = 512.0) -> None:
        if not causal:
            raise ValueError(_xpos_encoder_problem())
        super().__init__(d_model, n_heads, causal, max_len, base)
        self.scale_base = scale_base

    @classmethod
    def problems(cls, settings: Mapping[str, Any], context: Context) -> list[str]:
        return super().problems(settings, context) + ([] if context.causal else [_xpos_encoder_problem()])

    def cos_sin_scale(self, T: int, device: torch.device, dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
        def make() -> tuple[Tensor, Tensor, Tensor]:
            a = self.angles(T, device)
            zeta = (torch.arange(0, self.head_dim, 2, device=device) / self.head_dim + 0.4) / 1.4
            n = torch.arange(T, device=device, dtype=torch.float32) - T // 2
            scale = zeta[None, :] ** (n[:, None] / self.scale_base)
            scale = torch.cat((scale, scale), dim=-1)
            return a.cos().to(dtype), a.sin().to(dtype), scale.to(dtype)

        return self._cached((T, device, dtype), make)

    def rotate(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        cos, sin, scale = self.cos_sin_scale(q.shape[-2], q.device, q.dtype)
        rq = (q * cos + rotate_half(q) * sin) * scale
        rk = (k * cos + rotate_half(k) * sin) / scale
        return rq, rk


def alibi_slopes(n_heads: int) -> list[float]:
    """Press et al. 2022, §3: for n heads a power of 2, the geometric sequence starting at
    2^(-8/n) with that ratio; otherwise the slopes of the closest smaller power of 2, then
    every other slope of twice that count (the authors' rule)."""
    def power_of_2(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    if math.log2(n_heads).is_integer():
        return power_of_2(n_heads)
    closest = 2 ** math.floor(math.log2(n_heads))
    return power_of_2(closest) + alibi_slopes(2 * closest)[0::2][: n_heads - closest]


class ALiBi(Position):
    """Attention with Linear Biases (Press et al. 2022, "Train Short, Test Long", §3):
    score(i, j) += -m_h · |i - j| with per-head slopes m_h (``alibi_slopes``). The paper is
    causal (j <= i, so |i - j| = i - j); encoders use the symmetric distance. No parameters,
    defined for any length."""

    def __init__(self, d_model: int, n_heads: int, causal: bool, max_len: int) -> None:
        super().__init__(d_model, n_heads, causal, max_len)
        self.register_buffer("slopes", torch.tensor(alibi_slopes(n_heads)), persistent=False)

    def bias(self, q_len: int, k_len: int) -> Tensor:
        def make() -> Tensor:
            i = torch.arange(k_len - q_len, k_len, device=self.slopes.device)[:, None]
            j = torch.arange(k_len, device=self.slopes.device)[None, :]
            return -self.slopes[:, None, None] * (i - j).abs()

        return self._cached((q_len, k_len, self.slopes.device), make)

    def score_mod(self) -> Callable[..., Tensor]:
        return self._score

    def _score(self, score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return score - self.slopes[h] * (q_idx - kv_idx).abs()


def t5_bucket(relative_position: Tensor, bidirectional: bool, num_buckets: int = 32,
              max_distance: int = 128) -> Tensor:
    """Raffel et al. 2020 (T5, §2.1 "position embeddings"); relative_position = key - query.

    Bidirectional: half the buckets per direction (keys after the query use the upper half).
    Causal: only keys at or before the query get distinct buckets. Within a direction,
    distances below num_buckets/2 have one bucket each; larger ones share log-spaced buckets
    up to ``max_distance``, and everything beyond lands in the last bucket. Elementwise and
    out of place, so it also runs per score inside a FlexAttention kernel (``T5Bias.score_mod``).
    """
    if bidirectional:
        num_buckets //= 2
        direction = (relative_position > 0).long() * num_buckets
        distance = relative_position.abs()
    else:
        direction = 0
        distance = (-relative_position).clamp(min=0)
    max_exact = num_buckets // 2
    log_ratio = torch.log(distance.float().clamp(min=1) / max_exact) / math.log(max_distance / max_exact)
    large = (max_exact + (log_ratio * (num_buckets - max_exact)).long()).clamp(max=num_buckets - 1)
    return direction + torch.where(distance < max_exact, distance.long(), large)


class T5Bias(Position):
    """T5's learned, bucketed relative position bias (Raffel et al. 2020, §2.1): one scalar
    per (bucket, head), shared by all layers, added to the attention scores. Bidirectional
    when the model is not causal (``t5_bucket``)."""

    def __init__(self, d_model: int, n_heads: int, causal: bool, max_len: int,
                 num_buckets: PositiveInt = 32, max_distance: PositiveInt = 128) -> None:
        super().__init__(d_model, n_heads, causal, max_len)
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.table = nn.Embedding(num_buckets, n_heads)

    def buckets(self, q_len: int, k_len: int, device: torch.device) -> Tensor:
        def make() -> Tensor:
            i = torch.arange(k_len - q_len, k_len, device=device)[:, None]
            j = torch.arange(k_len, device=device)[None, :]
            return t5_bucket(j - i, not self.causal, self.num_buckets, self.max_distance)

        return self._cached((q_len, k_len, device), make)

    def bias(self, q_len: int, k_len: int) -> Tensor:
        idx = self.buckets(q_len, k_len, self.table.weight.device)
        return self.table(idx).permute(2, 0, 1)  # (heads, q_len, k_len); learned, so not cached

    def score_mod(self) -> Callable[..., Tensor]:
        return self._score

    def _score(self, score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        bucket = t5_bucket(kv_idx - q_idx, not self.causal, self.num_buckets, self.max_distance)
        return score + self.table.weight[bucket, h]


class Kerple(Position):
    """KERPLE, logarithmic variant (Chi et al. 2022, "KERPLE: Kernelized Relative Positional
    Embedding for Length Extrapolation", §4, eq. for the log kernel):
    score(i, j) += -r1_h · log(1 + r2_h · |i - j|), with learned r1_h, r2_h > 0 per head
    (initialised as in the authors' code: r1 ~ U(0, 2), r2 ~ U(0, 1)).

    The constraint r >= ``MIN`` (0.01, the authors' value) is kept on the *stored* parameters, as
    the authors do: before each use the values are projected onto it (projected gradient descent:
    the effect of a clamp after every optimizer step, with no optimizer code in the model). A
    clamp inside the forward instead would give a parameter below the bound zero gradient for
    ever; projected, it sits on the bound and leaves it as soon as the gradient points up."""

    MIN = 0.01

    def __init__(self, d_model: int, n_heads: int, causal: bool, max_len: int) -> None:
        super().__init__(d_model, n_heads, causal, max_len)
        self.r1 = nn.Parameter(torch.rand(n_heads) * 2)
        self.r2 = nn.Parameter(torch.rand(n_heads))

    @torch.no_grad()
    def project_(self) -> None:
        """r1, r2 <- max(r, MIN) in place, only when one is below (so a value that is already
        feasible is never written, and a graph that saved it stays valid)."""
        for r in (self.r1, self.r2):
            if r.device.type != "meta" and bool((r < self.MIN).any()):
                r.clamp_(min=self.MIN)

    def bias(self, q_len: int, k_len: int) -> Tensor:
        device = self.r1.device

        def make() -> Tensor:
            i = torch.arange(k_len - q_len, k_len, device=device)[:, None]
            return (i - torch.arange(k_len, device=device)[None, :]).abs().float()

        distance = self._cached((q_len, k_len, device), make)
        self.project_()
        return -self.r1[:, None, None] * torch.log1p(self.r2[:, None, None] * distance)

    def score_mod(self) -> Callable[..., Tensor]:
        self.project_()
        return self._score

    def _score(self, score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return score - self.r1[h] * torch.log1p(self.r2[h] * (q_idx - kv_idx).abs())


def deberta_delta(q_len: int, k_len: int, buckets: int, max_distance: int, device: torch.device) -> Tensor:
    """δ(i, j) of DeBERTa (He et al. 2021, eq. 3) with DeBERTa-v2's log buckets
    (``make_log_bucket_position(relative_pos, bucket_size, max_position)`` of the released code, with
    bucket_size = ``buckets`` and max_position = ``max_distance``), as (q_len, k_len) indices into the
    2·``buckets`` relative embeddings. For r = i - j (query minus key, queries the last q_len of the
    k_len positions) and mid = buckets // 2, the bucket is r itself while |r| <= mid, and beyond

        sign(r) · (mid + ⌈ln(|r| / mid) / ln((max_distance - 1) / mid) · (mid - 1)⌉),

    which is ±(2·mid - 1) at |r| = max_distance - 1 and keeps growing past it. It is evaluated as the
    released NumPy code evaluates it, in float64 and in its order (the ratio of the logs first, then
    the product): at |r| = max_distance - 1 the ratio is exactly 1, where (mid - 1)·ln(...) first
    can land an ulp above an integer (31.000000000000004 for buckets=64, max_distance=256) and the
    ceil one bucket past DeBERTa's. As DeBERTa's
    gather does, the bucket is then clamped to [-buckets, buckets - 1] and shifted by ``buckets``.
    So for an even ``buckets`` >= 4 (32 by default) the buckets are odd up to |r| = max_distance - 1
    (b(-r) = -b(r), within ±(buckets - 1)); farther, keys before the query share +(buckets - 1)
    with r = max_distance - 1, and keys after it share -buckets (index 0), a row no nearer key
    uses. Computed on the CPU with NumPy's float64 log, as the released code is (torch's own float64
    log differs from it by an ulp on some arguments, which the ceil can turn into a bucket), then
    moved to ``device``."""
    mid, d = buckets // 2, np.arange(k_len, dtype=np.float64)  # every |i - j|
    far = np.maximum(d, mid)  # the log is only used where |r| > mid
    logged = mid + np.ceil(np.log(far / mid) / np.log((max_distance - 1) / mid) * (mid - 1))
    size = torch.from_numpy(np.where(d <= mid, d, logged)).long()  # |bucket| of each |r|
    r = torch.arange(-(k_len - 1), k_len, device="cpu")  # every i - j (on the CPU under any default device)
    bucket = (size[r.abs()] * r.sign()).clamp(-buckets, buckets - 1) + buckets
    i = torch.arange(k_len - q_len, k_len, device="cpu")[:, None]
    return bucket[i - torch.arange(k_len, device="cpu")[None, :] + k_len - 1].to(device)


class DeBERTa(Position):
    """DeBERTa's disentangled attention (He et al. 2021, "DeBERTa: Decoding-enhanced BERT with
    Disentangled Attention", §3.1, eq. 2-4): content and relative position are separate vectors,

        A_ij = (Q^c_i·K^c_j + Q^c_i·K^r_δ(i,j) + K^c_j·Q^r_δ(j,i)) / √(3·d_h)

    with K^r = P W_k,r and Q^r = P W_q,r from 2·``buckets`` relative embeddings P, and δ DeBERTa-v2's
    log buckets of i - j (``deberta_delta``: exact up to ``buckets``/2, ±(buckets - 1) at
    ``max_distance`` - 1 for an even ``buckets``). The position-to-content term uses δ(j, i), as
    eq. 4 writes it; the released code indexes it by the bucket of i - j instead (``-relative_pos``
    in its p2c gather).
    The position terms come through ``score_bias``; ``rotate`` scales the content queries by 1/√3
    so that SDPA's 1/√d_h gives the content term its 1/√(3·d_h). P, W_k,r and W_q,r are shared by
    all layers (the position module is one per model; DeBERTa v1 has one projection pair per
    layer, v2 shares P). Causal models use the same score, masked (keys j <= i only)."""

    def __init__(self, d_model: int, n_heads: int, causal: bool, max_len: int,
                 buckets: PositiveInt = 32, max_distance: PositiveInt = 128) -> None:
        if buckets < 2 or max_distance <= buckets // 2 + 1:
            raise ValueError(f"DeBERTa's log buckets need buckets >= 2 and max_distance > buckets // 2 + 1 "
                             f"(got buckets={buckets}, max_distance={max_distance})")
        super().__init__(d_model, n_heads, causal, max_len)
        self.buckets, self.max_distance = buckets, max_distance
        self.rel = nn.Embedding(2 * buckets, d_model)
        self.q_r = nn.Linear(d_model, d_model, bias=False)
        self.k_r = nn.Linear(d_model, d_model, bias=False)

    def delta(self, q_len: int, k_len: int, device: torch.device) -> Tensor:
        return self._cached(("delta", q_len, k_len, device),
                            lambda: deberta_delta(q_len, k_len, self.buckets, self.max_distance, device))

    def rotate(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        return q / math.sqrt(3.0), k

    def layer_flops(self, seq_len: int, batch_size: int) -> float:
        """Per layer: K^r and Q^r, the 2·buckets relative embeddings through two d×d projections
        (once per batch: 2 · 2·(2·buckets)·d² over B·T tokens), and the two extra score terms,
        q·K^rᵀ and k·Q^rᵀ against every relative embedding (2 · 2·d·2·buckets per token; the
        gather that picks δ(i, j) is not a matmul)."""
        b, d = self.buckets, self.d_model
        return 8.0 * b * d + 8.0 * b * d * d / (seq_len * batch_size)

    def score_bias(self, q: Tensor, k: Tensor) -> Tensor:
        B, H, T, hd = q.shape
        if k.shape[1] != H:  # MQA/GQA: each K head serves a group of query heads
            k = k.repeat_interleave(H // k.shape[1], dim=1)
        k_r = self.k_r(self.rel.weight).view(-1, H, hd).transpose(0, 1)  # (H, 2·buckets, hd)
        q_r = self.q_r(self.rel.weight).view(-1, H, hd).transpose(0, 1)
        delta = self.delta(T, k.shape[-2], q.device)                    # δ(i, j)
        c2p = (q @ k_r.transpose(-1, -2)).gather(-1, delta.expand(B, H, *delta.shape))
        # [j, i] = k_j·Q^r_δ(j,i), then transposed to [i, j] (self-attention: delta is square)
        p2c = (k @ q_r.transpose(-1, -2)).gather(-1, delta.expand(B, H, *delta.shape)).transpose(-1, -2)
        return (c2p + p2c) / math.sqrt(3 * hd)


def score_mod_bias(score_mod: Callable[..., Tensor], n_heads: int, T: int,
                   device: torch.device | str | None = None) -> Tensor:
    """The (heads, T, T) bias a score function adds to a zero score, evaluated per (head, query, key)
    with ``torch.vmap``, as FlexAttention's reference implementation evaluates it (int32 indices,
    as its kernels pass them). Differentiable: gradients reach the tensors ``score_mod`` reads."""
    idx = torch.arange(T, device=device, dtype=torch.int32)
    heads = torch.arange(n_heads, device=device, dtype=torch.int32)
    zero, b = torch.zeros((), device=device), torch.zeros((), device=device, dtype=torch.int32)
    f = torch.vmap(lambda h, q, kv: score_mod(zero, b, h, q, kv), in_dims=(None, None, 0))
    f = torch.vmap(f, in_dims=(None, 0, None))
    return torch.vmap(f, in_dims=(0, None, None))(heads, idx, idx)


def check(target: Any, settings: Mapping[str, Any], context: Context) -> list[str]:
    """Every way ``target`` breaks the position contract for this model (empty when it keeps it)."""
    B, T, d, H = 2, min(context.max_len, 8), context.d_model, context.n_heads

    def probe(pos: nn.Module) -> list[str]:
        q = torch.empty(B, H, T, context.head_dim)
        problems = shape_problem("pos_enc", target, "embed(x)", pos.embed(torch.empty(B, T, d)), (B, T, d))
        for name, out in zip("qk", pos.rotate(q, q.clone())):
            problems += shape_problem("pos_enc", target, f"rotate(q, k)'s {name}", out, tuple(q.shape))
        bias = pos.bias(T, T)
        if bias is not None:
            problems += shape_problem("pos_enc", target, "bias(q_len, k_len)", bias, (H, T, T))
        scores = pos.score_bias(q, q.clone()) if hasattr(pos, "score_bias") else None
        if scores is not None:
            problems += shape_problem("pos_enc", target, "score_bias(q, k)", scores, (B, H, T, T))
        return problems

    passed = {"d_model": d, "n_heads": H, "causal": context.causal}
    if "max_len" not in settings:
        passed["max_len"] = context.max_len
    return check_module("pos_enc", target, settings, passed, context, probe)
