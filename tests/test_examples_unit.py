"""The worked example's own components (examples/my_lab), without a subprocess.

Sigmoid attention (Ramapuram et al. 2024, "Theory, Analysis, and Best Practices for Sigmoid
Self-Attention", ICLR 2025) against a direct computation of its formula, and the running-count
task against its definition. ``my_lab`` is not installed in the main venv: it is imported from
``examples/my_lab`` on ``sys.path``.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

from ablate.components import Context
from ablate.model import attention as ablate_attention
from ablate.model.attention import attention_mask
from ablate.model.positions import ALiBi, Position

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "my_lab"
sys.path.insert(0, str(EXAMPLE))

from my_lab.attention import SigmoidAttention  # noqa: E402
from my_lab.tasks import RunningCount  # noqa: E402

B, T, D, H = 2, 6, 8, 2


def reference(attn: SigmoidAttention, x: torch.Tensor, allowed: torch.Tensor,
              bias: torch.Tensor | None = None) -> torch.Tensor:
    """out_proj( sum_j sigmoid(q_i . k_j / sqrt(d_h) - log T + bias_ij) v_j over allowed j ),
    one query, key and head at a time."""
    d_h = D // H
    q, k, v = (x @ w.T for w in attn.qkv.weight.split(D, dim=0))  # (B, T, D) each, no bias
    out = torch.zeros(B, T, D)
    for b in range(B):
        for h in range(H):
            cols = slice(h * d_h, (h + 1) * d_h)
            for i in range(T):
                for j in range(T):
                    if not allowed[b, h, i, j]:
                        continue
                    score = q[b, i, cols] @ k[b, j, cols] / math.sqrt(d_h) - math.log(T)
                    if bias is not None:
                        score = score + bias[b, h, i, j]
                    out[b, i, cols] += torch.sigmoid(score) * v[b, j, cols]
    return attn.out_proj(out)


def make_attention() -> SigmoidAttention:
    torch.manual_seed(0)
    return SigmoidAttention(D, H, dropout=0.0, bias=False).eval()


def full(mask: torch.Tensor) -> torch.Tensor:
    return mask.expand(B, H, T, T)


@pytest.mark.parametrize("causal", [False, True])
def test_sigmoid_attention_is_the_formula_without_a_bias(causal: bool) -> None:
    attn, x = make_attention(), torch.randn(B, T, D)
    allowed = torch.ones(T, T, dtype=torch.bool)
    if causal:
        allowed = allowed.tril()
    got = attn(x, Position(D, H, causal, T), None, causal)  # causal: is_causal=True, attn_mask=None
    torch.testing.assert_close(got, reference(attn, x, full(allowed)))


@pytest.mark.parametrize("causal", [False, True])
def test_sigmoid_attention_adds_a_float_position_bias(causal: bool) -> None:
    attn, x = make_attention(), torch.randn(B, T, D)
    pos = ALiBi(D, H, causal, T)
    mask, is_causal = attention_mask(T, x.device, causal=causal, bias=pos.bias(T, T))
    assert mask is not None and mask.dtype == torch.float32 and not is_causal
    allowed = torch.ones(T, T, dtype=torch.bool)
    if causal:  # the causal bias holds -inf above the diagonal
        allowed = allowed.tril()
        assert torch.isneginf(mask).any()
    bias = full(pos.bias(T, T))
    got = attn(x, pos, mask, is_causal)
    torch.testing.assert_close(got, reference(attn, x, full(allowed), bias))


def test_sigmoid_attention_gives_weight_zero_where_a_bool_mask_is_false() -> None:
    attn, x = make_attention(), torch.randn(B, T, D)
    padding = torch.zeros(B, T, dtype=torch.bool)
    padding[0, -2:] = True  # the last two keys of the first sequence are padding
    mask, is_causal = attention_mask(T, x.device, causal=False, key_padding=padding)
    assert mask is not None and mask.dtype == torch.bool
    got = attn(x, Position(D, H, False, T), mask, is_causal)
    torch.testing.assert_close(got, reference(attn, x, full(mask)))


def test_sigmoid_attention_never_looks_ahead_when_causal() -> None:
    attn, pos = make_attention(), Position(D, H, True, T)
    x = torch.randn(B, T, D)
    later = x.clone()
    later[:, 3:] = torch.randn(B, T - 3, D)  # change only positions 3 ..
    y, y_later = attn(x, pos, None, True), attn(later, pos, None, True)
    torch.testing.assert_close(y[:, :3], y_later[:, :3])
    assert not torch.allclose(y[:, 3:], y_later[:, 3:])


def test_sigmoid_attention_weights_are_not_normalised() -> None:
    """Identical keys: softmax would give each 1/T; sigmoid gives each sigmoid(-log T) = 1/(T+1),
    and twice the keys give almost twice the output (it can count)."""
    attn = make_attention()
    with torch.no_grad():
        attn.qkv.weight.zero_()
        attn.qkv.weight[2 * D:] = torch.eye(D)  # q = k = 0, v = x
        attn.out_proj.weight.copy_(torch.eye(D))
    x = torch.ones(1, T, D)
    y = attn(x, Position(D, H, False, T), None, False)
    torch.testing.assert_close(y, torch.full((1, T, D), T / (T + 1)))


def test_ablate_accepts_the_example_classes() -> None:
    context = Context(d_model=D, n_heads=H, n_layers=1, causal=True, max_len=T)
    assert ablate_attention.check(SigmoidAttention, {}, context, 0.0, False) == []
    from ablate.data import check

    assert check(RunningCount, {"seq_len": 16, "n_symbols": 4}) == []
    assert check(RunningCount, {"n_symbols": 1}) != []


# ---------------------------------------------------------------------------- the running count

def test_running_count_targets_follow_the_definition() -> None:
    task = RunningCount(seq_len=12, n_symbols=3, batch_size=5)
    x, y = task.make_batch(torch.Generator().manual_seed(1), 5, 12)
    assert x.shape == y.shape == (5, 12) and x.dtype == y.dtype == torch.long
    assert int(x.min()) >= 0 and int(x.max()) < task.vocab_size == 3
    for row_x, row_y in zip(x.tolist(), y.tolist()):
        seen: dict[int, int] = {}
        for symbol, count in zip(row_x, row_y):
            seen[symbol] = seen.get(symbol, 0) + 1
            assert count == seen[symbol]
    assert int(y.max()) < task.n_classes


def test_running_count_small_example() -> None:
    x = torch.tensor([[2, 0, 2, 2, 1, 0]])
    assert RunningCount.target(x).tolist() == [[1, 1, 2, 3, 1, 2]]


def test_running_count_is_deterministic_and_sized_for_its_longest_length() -> None:
    task = RunningCount(seq_len=8, eval_lengths=[32], n_symbols=2, batch_size=4, n_test=8)
    assert task.n_classes == 33  # counts 1 .. 32
    a = task.make_batch(torch.Generator().manual_seed(7), 4, 8)
    b = task.make_batch(torch.Generator().manual_seed(7), 4, 8)
    assert all(torch.equal(p, q) for p, q in zip(a, b))
    first, second = next(task.train_batches(seed=0)), next(task.train_batches(seed=0))
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])
    (long_x, long_y), _ = task.eval_batches(32)
    assert long_x.shape == (4, 32) and int(long_y.max()) <= 32
