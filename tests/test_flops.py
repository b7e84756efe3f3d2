"""FLOPs per token (ablate.model.flops): every built-in option's own count against FlopCounterMode
counting a real forward and backward of a tiny model; user components without a count are
measured. The reference count forces SDPA's math path: PyTorch's fused CPU attention kernel is
not in FlopCounterMode's table (torch 2.13), so the default path would count no attention scores."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from conftest import builtin_options, builtin_target
from test_model import VOCAB, make_cfg, with_partner

from ablate.model import build_model
from ablate.model.attention import Independent
from ablate.model.flops import counts_itself
from ablate.model.norms import PLACEMENTS
from ablate.model.patterns import Pattern
from ablate.model.positions import Position

pytestmark = pytest.mark.usefixtures("one_thread")

B, T, D, H, L = 2, 20, 16, 4, 2  # T > the linear pattern's chunk (16), so its decoder pads a chunk


def model_of(causal: bool = True, **groups) -> nn.Module:
    torch.manual_seed(0)
    cfg = make_cfg(d_model=D, n_heads=H, n_layers=L, causal=causal, **groups)
    return build_model(cfg, VOCAB, 7, T).train()


def counted(model: nn.Module, batch: int = B, length: int = T) -> float:
    """Training FLOPs per token as FlopCounterMode counts one real forward and backward."""
    tokens = torch.randint(0, VOCAB, (batch, length))
    model(tokens)  # position caches are built outside the count
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(tokens).square().mean().backward()
    return counter.get_total_flops() / (batch * length)


def assert_within(analytic: float, reference: float, rel: float = 0.02) -> None:
    assert reference > 0 and abs(analytic - reference) <= rel * reference, (analytic, reference)


# ------------------------------------------------------------ every built-in option, both ways

CASES = [(g, o, None) for g in ("qkv_sharing", "attention", "pos_enc", "norm", "ffn") for o in builtin_options(g)]
CASES += [("norm", n, {"name": n, "placement": p}) for n in builtin_options("norm") if n != "deepnorm"
          for p in PLACEMENTS]                                           # placements: no matmul changes
CASES += [("ffn", f, {"name": f, "match_params": False}) for f in ("swiglu", "glu")]  # the wide gated FFN
CASES += [("qkv_sharing", "gqa", {"name": "gqa", "kv_heads": 2}), ("qkv_sharing", "qk_shared",
          {"name": "qk_shared", "mask_self": True})]


def case_id(case) -> str:
    group, name, option = case
    extra = ",".join(f"{k}={v}" for k, v in (option or {}).items() if k != "name")
    return f"{group}={name}" + (f"[{extra}]" if extra else "")


@pytest.mark.parametrize("causal", [True, False], ids=["decoder", "encoder"])
@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_every_builtin_option_counts_what_flop_counter_counts(case, causal):
    group, name, option = case
    if (group, name) == ("pos_enc", "xpos") and not causal:
        pytest.skip("xpos is refused in an encoder")
    model = model_of(causal, **with_partner(group, name, option))
    analytic = model.flops_per_token(T, B)
    assert_within(analytic, counted(model))
    assert counts_itself(model.blocks[0].attn, "flops", ("forward", "project"))  # analytic, not measured


def test_every_builtin_component_counts_itself():
    """Each built-in class has its own count (nothing built-in falls back to measuring)."""
    for group in ("qkv_sharing", "attention", "ffn", "norm"):
        for name in builtin_options(group):
            assert counts_itself(builtin_target(group, name), "flops", ("forward", "project")), (group, name)
    for name in builtin_options("pos_enc"):
        cls = builtin_target("pos_enc", name)
        assert counts_itself(cls, "flops", ("embed", "bias")) and counts_itself(cls, "layer_flops", ("rotate", "score_bias"))


def test_deberta_per_batch_projections_follow_the_batch_size():
    model = model_of(pos_enc="deberta")
    for batch in (1, 3):
        assert_within(model.flops_per_token(T, batch), counted(model, batch=batch), rel=1e-6)
    assert model.flops_per_token(T, 1) > model.flops_per_token(T, 3)


# ------------------------------------------------------------------------- what the counts say

def test_qkv_shared_saves_exactly_two_projections_per_layer():
    shared, independent = model_of(qkv_sharing="qkv_shared"), model_of(qkv_sharing="independent")
    saved = L * 2 * (2 * D * D)  # two d x d projections per layer, 2·d·d FLOPs each per token
    assert independent.flops_per_token(T, B) - shared.flops_per_token(T, B) == 3 * saved
    assert independent.flops_by_component(T, B)["attention"] - shared.flops_by_component(T, B)["attention"] == saved
    assert_within(counted(independent) - counted(shared), 3 * saved, rel=1e-6)


def test_shared_layers_cost_what_unshared_ones_do():
    plain, shared = model_of(share_layers="none"), model_of(share_layers="all")
    assert shared.num_params() < plain.num_params()
    assert shared.flops_per_token(T, B) == plain.flops_per_token(T, B)
    assert_within(shared.flops_per_token(T, B), counted(shared), rel=1e-6)


def test_softmax_scores_grow_with_the_length_and_linear_does_not():
    soft, lin = model_of(), model_of(attention="linear", causal=False)
    s64, s128 = (soft.flops_by_component(n, B)["attention"] for n in (64, 128))
    l64, l128 = (lin.flops_by_component(n, B)["attention"] for n in (64, 128))
    assert s128 - s64 == L * 4 * 64 * D  # 4·T·d per layer: the T×T scores, full even when causal
    assert l128 == l64


def test_linear_attention_counts_its_recomputed_forward():
    """attention=linear checkpoints its sums: a training step runs its forward twice."""
    model = model_of(attention="linear")
    forward = model.flops_by_component(T, B)
    pattern = model.blocks[0].attn.pattern.flops(T, B)
    assert model.flops_per_token(T, B) == 3 * sum(forward.values()) + L * pattern
    assert_within(model.flops_per_token(T, B), counted(model), rel=1e-6)


# ------------------------------------------------------------- user components: measured instead

class PlainFFN(nn.Module):
    """No ``flops`` method, and a matmul that is not an nn.Linear."""

    def __init__(self, d_model: int, hidden: int = 24) -> None:
        super().__init__()
        self.up = nn.Linear(d_model, hidden)
        self.down = nn.Parameter(torch.randn(hidden, d_model) / hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.einsum("bth,hd->btd", torch.relu(self.up(x)), self.down)


class GatedAttention(Independent):
    """Inherits ``Attention.flops`` but computes more in its own ``forward``: an output gate."""

    def __init__(self, d_model: int, n_heads: int, **kw) -> None:
        super().__init__(d_model, n_heads, **kw)
        self.gate = nn.Linear(d_model, d_model)

    def forward(self, x, pos, attn_mask=None, is_causal=False):
        return super().forward(x, pos, attn_mask, is_causal) * torch.sigmoid(self.gate(x))


class TwoPassPattern(Pattern):
    """A pattern without a count: softmax attention, then its output attends once more."""

    def forward(self, q, k, v, attn_mask, is_causal, dropout=0.0):
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
        return torch.nn.functional.scaled_dot_product_attention(y, k, v, is_causal=is_causal)


class ProjectedPositions(Position):
    """An additive table passed through a d×d projection: matmuls in ``embed``, no count of its own."""

    def __init__(self, d_model: int, n_heads: int, causal: bool, max_len: int) -> None:
        super().__init__(d_model, n_heads, causal, max_len)
        self.table = nn.Parameter(torch.randn(max_len, d_model) * 0.02)
        self.proj = nn.Linear(d_model, d_model, bias=False)

    def embed(self, x):
        return x + self.proj(self.table[: x.shape[1]])


class ExtraNorm(nn.Module):
    """A norm that is not a ``Norm``: measured (a matmul in it, to show it is seen)."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.mix = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x):
        return self.mix(torch.nn.functional.layer_norm(x, x.shape[-1:]))


USER = {"ffn": {"_target_": "test_flops.PlainFFN"},
        "qkv_sharing": {"_target_": "test_flops.GatedAttention"},
        "attention": {"_target_": "test_flops.TwoPassPattern"},
        "pos_enc": {"_target_": "test_flops.ProjectedPositions"},
        "norm": {"_target_": "test_flops.ExtraNorm"}}


@pytest.mark.parametrize("group", list(USER))
def test_a_user_component_without_its_own_count_is_measured(group):
    model = model_of(**{group: USER[group]})
    component = {"ffn": model.blocks[0].ffn, "qkv_sharing": model.blocks[0].attn, "norm": model.blocks[0].attn_norm,
                 "attention": model.blocks[0].attn.pattern, "pos_enc": model.pos}[group]
    hooks = {"pos_enc": ("embed", "bias")}.get(group, ("forward", "project"))
    assert not counts_itself(component, "flops", hooks)
    assert_within(model.flops_per_token(T, B), counted(model), rel=1e-6)


def test_all_user_components_together():
    model = model_of(**USER)
    assert_within(model.flops_per_token(T, B), counted(model), rel=1e-6)
