"""Sigmoid attention as an ``ablate`` ``qkv_sharing`` option (``conf/qkv_sharing/sigmoid.yaml``).

Ramapuram et al. 2024, "Theory, Analysis, and Best Practices for Sigmoid Self-Attention"
(ICLR 2025, arXiv:2409.04431): replace the row-wise softmax by an element-wise sigmoid,

    SigmoidAttn(X) = sigmoid(Q K^T / sqrt(d_h) + b) V,    b = -log(n)

with ``n`` the sequence length (§2 defines it; the bias b = -log(n) is their recommended
setting: it keeps a row's weights summing to about one early in training, which they identify
as what stabilises sigmoid attention; they add Hybrid-Norm or LayerScale at scale, not needed
for the small models here). Nothing normalises a row, so the weights of the keys a query
matches add up: the output can *count* (compare the ``count`` task in ``my_lab.tasks``),
where softmax can only average.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from ablate.model.attention import Independent


class SigmoidAttention(Independent):
    """Sigmoid attention with bias b = -log(n) (Ramapuram et al. 2024, ICLR 2025, §2).

    Independent Q, K, V projections, inherited from ``independent`` (one fused d×3d matmul, so
    every ``init`` scheme treats it alike); only the normalisation of the scores differs. A position
    bias in ``attn_mask`` is added to the scores before the sigmoid; a key that may not be
    attended (causal future, padding, ``-inf`` in the bias, ``False`` in a boolean mask) gets
    weight exactly 0.
    """

    def forward(self, x: Tensor, pos: nn.Module, attn_mask: Tensor | None = None,
                is_causal: bool = False) -> Tensor:
        B, T, _ = x.shape
        q, k, v = self.project(x)                                    # (B, H, T, d_h) each
        q, k = pos.rotate(q, k)                                      # RoPE / xPos, else as is
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)  # (B, H, T, T)
        scores = scores - math.log(T)                                # b = -log(n)
        allowed = torch.ones(T, T, dtype=torch.bool, device=x.device)
        if is_causal:
            allowed = allowed.tril()                                 # no key after the query
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            allowed = allowed & attn_mask                            # True = may attend
        elif attn_mask is not None:
            scores = scores + attn_mask.to(scores.dtype)             # additive position bias
            allowed = allowed & ~torch.isneginf(attn_mask)           # -inf = may not attend
        weights = torch.sigmoid(scores).masked_fill(~allowed, 0.0)   # element-wise, no row sum
        weights = F.dropout(weights, self.dropout, self.training)
        y = weights @ v                                              # (B, H, T, d_h)
        return self.out_proj(y.transpose(1, 2).reshape(B, T, self.d_model))
