"""Property tests of the model zoo (ablate.model). Tiny models; the file runs in seconds."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from conftest import builtin_node, builtin_options, builtin_target

from ablate.model import MODEL_GROUPS, build_model
from ablate.model.norms import PLACEMENTS
from ablate.model.attention import attention_mask
from ablate.model.positions import RoPE, XPos, alibi_slopes, t5_bucket

CONF = Path(__file__).resolve().parents[1] / "conf"
GROUPS = {g: builtin_options(g) for g in MODEL_GROUPS}
VOCAB = 11


pytestmark = pytest.mark.usefixtures("one_thread")


def make_cfg(d_model: int = 32, n_heads: int = 4, n_layers: int = 2, causal: bool = True,
             dropout: float = 0.0, bias: bool = True, share_layers="none", **groups) -> dict:
    """A root config as a plain dict; a group given as a string is that built-in option's YAML,
    one given as a dict with a built-in ``name`` that YAML with the dict's keys on top."""
    cfg = {
        "model": dict(d_model=d_model, n_heads=n_heads, n_layers=n_layers, causal=causal,
                      dropout=dropout, bias=bias, share_layers=share_layers),
        "qkv_sharing": "independent", "attention": "softmax", "pos_enc": "rope", "norm": {"name": "layernorm", "placement": "pre"},
        "ffn": "gelu", "init": "normal", **groups,
    }
    for group in GROUPS:
        value = cfg[group]
        if isinstance(value, str):
            value = {"name": value}
        if "_target_" not in value and value.get("name") in GROUPS[group]:
            value = builtin_node(group, **value)
        cfg[group] = value
    return cfg


#: built-in options that are one half of a method and run only with the other (DeepNet's α and β)
PARTNERS = {("norm", "deepnorm"): {"init": "deepnet"},
            ("init", "deepnet"): {"norm": {"name": "deepnorm", "placement": "post"}}}


def with_partner(group: str, name: str, option=None) -> dict:
    """``{group: option}`` and the other half of the method, when the option has one."""
    return {group: option if option is not None else name, **PARTNERS.get((group, name), {})}


def build(max_len: int = 16, pad_id: int | None = None, n_outputs: int = 7, **kw):
    torch.manual_seed(0)
    return build_model(make_cfg(**kw), VOCAB, n_outputs, max_len, pad_id).eval()


# ----------------------------------------------------------------------------- configs

YAMLS = sorted((g, p) for g in GROUPS for p in (CONF / g).glob("*.yaml"))


@pytest.mark.parametrize("group,path", YAMLS, ids=[f"{g}/{p.stem}" for g, p in YAMLS])
def test_yaml_names_its_class_and_builds(group, path):
    node = OmegaConf.load(path)
    assert node.name == path.stem and node._target_.startswith("ablate.model.")
    partner = {g: v for g, v in with_partner(group, path.stem).items() if g != group}
    root = OmegaConf.create({**make_cfg(**partner), "task": {"seq_len": 12}})
    root[group] = node
    model = build_model(root, VOCAB, 5, 12, None)
    out = model(torch.randint(0, VOCAB, (2, 12)))
    assert out.shape == (2, 12, 5) and torch.isfinite(out).all()


def test_unknown_target_names_the_import_path():
    with pytest.raises(ValueError, match="qkv_sharing._target_='ablate.model.attention.Nope' cannot be imported"):
        build(qkv_sharing={"_target_": "ablate.model.attention.Nope"})


# ------------------------------------------------------------- every entry runs, both ways

ENTRIES = [(g, n) for g, reg in GROUPS.items() for n in reg]


@pytest.mark.parametrize("causal", [True, False], ids=["decoder", "encoder"])
@pytest.mark.parametrize("group,name", ENTRIES, ids=[f"{g}={n}" for g, n in ENTRIES])
def test_every_registry_entry_forward_backward(group, name, causal):
    if (group, name) == ("pos_enc", "xpos") and not causal:
        pytest.skip("xpos is refused in an encoder (test_confounds.py)")
    model = build(causal=causal, dropout=0.1, **with_partner(group, name)).train()
    out = model(torch.randint(0, VOCAB, (2, 9)))
    assert out.shape == (2, 9, 7)
    out.square().mean().backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm", "scalenorm"])
def test_every_norm_placement_runs(norm, placement):
    model = build(norm={"name": norm, "placement": placement}).train()
    model(torch.randint(0, VOCAB, (2, 6))).sum().backward()


# ------------------------------------------------------------------------------ causality

CAUSAL_CASES = [(p, a, False) for p in GROUPS["pos_enc"] for a in GROUPS["qkv_sharing"]] + [
    (p, a, True) for p in ("rope", "alibi") for a in ("qk_shared", "qkv_shared")]


@pytest.mark.parametrize("pos,attn,mask_self", CAUSAL_CASES,
                         ids=[f"{p}-{a}{'-mask_self' if m else ''}" for p, a, m in CAUSAL_CASES])
def test_causal_model_never_looks_ahead(pos, attn, mask_self):
    model = build(pos_enc=pos, qkv_sharing={"name": attn, "mask_self": mask_self}, n_heads=4)
    torch.manual_seed(1)
    tokens = torch.randint(0, VOCAB, (2, 10))
    changed = tokens.clone()
    changed[:, 6:] = (changed[:, 6:] + 1) % VOCAB
    with torch.no_grad():
        a, b = model(tokens), model(changed)
    torch.testing.assert_close(a[:, :6], b[:, :6])
    assert not torch.allclose(a[:, 6:], b[:, 6:])


@pytest.mark.parametrize("pos", ["rope", "learned", "alibi", "t5_bias"])
def test_encoder_looks_ahead(pos):
    model = build(pos_enc=pos, causal=False)
    tokens = torch.randint(0, VOCAB, (1, 8))
    changed = tokens.clone()
    changed[0, -1] = (changed[0, -1] + 1) % VOCAB
    with torch.no_grad():
        assert not torch.allclose(model(tokens)[0, 0], model(changed)[0, 0])


def test_encoder_masks_right_padding():
    model = build(causal=False, pad_id=0, pos_enc="rope")
    real = torch.tensor([[3, 4, 5, 6]])
    padded = torch.tensor([[3, 4, 5, 6, 0, 0, 0]])
    with torch.no_grad():
        torch.testing.assert_close(model(real), model(padded)[:, :4])
        assert torch.isfinite(model(torch.zeros(1, 5, dtype=torch.long))).all()  # all padding


# ------------------------------------------------------------------------------ positions

def _scores(pos, T: int, hd: int = 8) -> torch.Tensor:
    """S[m, n] = rotate(q)_m · rotate(k)_n for the same q and k at every position."""
    torch.manual_seed(0)
    q = torch.randn(hd).expand(1, 1, T, hd)
    k = torch.randn(hd).expand(1, 1, T, hd)
    rq, rk = pos.rotate(q, k)
    return (rq @ rk.transpose(-1, -2))[0, 0]


@pytest.mark.parametrize("cls", [RoPE, XPos], ids=["rope", "xpos"])
def test_rotary_scores_depend_only_on_relative_offset(cls):
    pos = cls(d_model=16, n_heads=2, causal=True, max_len=8, **({"scale_base": 8} if cls is XPos else {}))
    T = 24
    S = _scores(pos, T)
    for shift in (1, 5, 11):
        torch.testing.assert_close(S[shift:, shift:], S[:-shift, :-shift], rtol=1e-4, atol=1e-5)
    assert not torch.allclose(S[0, 0], S[0, 3])  # but it does depend on the offset
    if cls is XPos:  # decay: the same rotation angle at a larger distance scores smaller
        assert S.diagonal(-20).abs().mean() < S.diagonal(-1).abs().mean()


def test_rope_keeps_shared_qk_one_tensor():
    pos = RoPE(d_model=16, n_heads=2, causal=True, max_len=8)
    q = torch.randn(1, 2, 5, 8)
    rq, rk = pos.rotate(q, q)
    assert rq is rk


@pytest.mark.parametrize("name", ["rope", "xpos"])
def test_rotary_rejects_odd_head_dim(name):
    with pytest.raises(ValueError, match="head dimension d_model/n_heads=3 must be even"):
        builtin_target("pos_enc", name)(d_model=12, n_heads=4, causal=True, max_len=8)


def test_alibi_slopes_follow_the_paper():
    assert alibi_slopes(8) == [2.0 ** -i for i in range(1, 9)]
    assert alibi_slopes(6) == [2.0 ** -i for i in (2, 4, 6, 8, 1, 3)]  # 4 heads' + every other of 8
    expected12 = [2.0 ** -i for i in range(1, 9)] + [2.0 ** -(i + 0.5) for i in range(4)]
    assert alibi_slopes(12) == pytest.approx(expected12)


def test_alibi_bias_is_minus_slope_times_distance():
    model = build(pos_enc="alibi", n_heads=8, d_model=32)
    bias = model.pos.bias(5, 5)
    i, j = torch.arange(5)[:, None], torch.arange(5)[None]
    expected = -torch.tensor(alibi_slopes(8))[:, None, None] * (i - j).abs()
    torch.testing.assert_close(bias, expected)


@pytest.mark.parametrize("pos", ["none", "sinusoidal", "rope", "alibi", "t5_bias", "xpos", "kerple"])
def test_relative_and_fixed_encodings_run_beyond_max_len(pos):
    model = build(pos_enc=pos, max_len=8)
    with torch.no_grad():
        out = model(torch.randint(0, VOCAB, (1, 16)))
    assert torch.isfinite(out).all()


def test_learned_positions_refuse_lengths_beyond_their_table():
    model = build(pos_enc="learned", max_len=8)
    model(torch.randint(0, VOCAB, (1, 8)))
    with pytest.raises(ValueError, match=r"length 16 .*max_len=8"):
        model(torch.randint(0, VOCAB, (1, 16)))


def test_t5_buckets_causal():
    rel = torch.arange(-300, 301)
    b = dict(zip(rel.tolist(), t5_bucket(rel, bidirectional=False, num_buckets=32, max_distance=128).tolist()))
    assert all(b[-d] == d for d in range(16))            # exact near zero
    assert all(b[d] == 0 for d in range(1, 300))         # the future is one bucket (masked anyway)
    far = [b[-d] for d in range(16, 128)]
    assert far == sorted(far) and set(far) == set(range(16, 32))  # log-spaced, all used
    widths = [far.count(k) for k in range(16, 32)]
    assert widths[-1] > 4 * widths[0]                    # wider buckets further away
    assert b[-20] == 17 and b[-128] == 31 and b[-300] == 31


def test_t5_buckets_bidirectional_are_direction_aware():
    rel = torch.arange(-200, 201)
    b = dict(zip(rel.tolist(), t5_bucket(rel, bidirectional=True, num_buckets=32, max_distance=128).tolist()))
    assert b[0] == 0 and all(b[-d] == d and b[d] == 16 + d for d in range(1, 8))
    assert all(b[d] == b[-d] + 16 for d in range(1, 200))  # same distance bucket, other half
    assert b[-200] == 15 and b[200] == 31


def test_t5_bias_is_shared_and_learned():
    model = build(pos_enc="t5_bias", n_layers=3)
    assert sum(p.numel() for p in model.pos.parameters()) == 32 * 4


def test_position_cache_built_under_inference_mode_is_usable_for_training():
    for pos in ("rope", "xpos", "alibi", "sinusoidal", "t5_bias"):
        model = build(pos_enc=pos)
        tokens = torch.randint(0, VOCAB, (2, 8))
        with torch.inference_mode():
            model(tokens)
        model.train()(tokens).sum().backward()


# ------------------------------------------------------------------------------ attention

D, H = 64, 8
HD = D // H
QKV_PARAMS = {  # weights only; biases: + qkv rows + d
    "independent": 3 * D * D + D * D,
    "qk_shared": 2 * D * D + D * D,
    "qkv_shared": D * D + D * D,
    "kv_shared": 2 * D * D + D * D,
    "mqa": D * D + 2 * D * HD + D * D,
    "gqa": D * D + 2 * D * 2 * HD + D * D,
}


@pytest.mark.parametrize("name", list(GROUPS["qkv_sharing"]))
@pytest.mark.parametrize("bias", [False, True])
def test_attention_parameter_counts(name, bias):
    attn = builtin_target("qkv_sharing", name)(D, H, bias=bias)
    n = sum(p.numel() for p in attn.parameters())
    expected = QKV_PARAMS[name] + (attn.qkv.out_features + D if bias else 0)
    assert n == expected
    assert len([m for m in attn.modules() if isinstance(m, torch.nn.Linear)]) == 2  # two matmuls


def test_attention_parameter_ordering():
    n = {k: sum(p.numel() for p in builtin_target("qkv_sharing", k)(D, H).parameters()) for k in GROUPS["qkv_sharing"]}
    assert n["qkv_shared"] < n["qk_shared"] < n["independent"]
    assert n["mqa"] < n["gqa"] < n["independent"]


def test_shared_projections_are_the_same_tensor():
    x = torch.randn(2, 5, D)
    q, k, v = builtin_target("qkv_sharing", "qk_shared")(D, H).project(x)
    assert q is k and v is not q
    q, k, v = builtin_target("qkv_sharing", "qkv_shared")(D, H).project(x)
    assert q is k is v
    q, k, v = builtin_target("qkv_sharing", "kv_shared")(D, H).project(x)
    assert k is v and q is not k
    q, k, v = builtin_target("qkv_sharing", "gqa")(D, H, kv_heads=2).project(x)
    assert q.shape[1] == H and k.shape[1] == v.shape[1] == 2


def test_gqa_rejects_non_dividing_groups():
    with pytest.raises(ValueError, match="kv_heads=3.*n_heads=8"):
        builtin_target("qkv_sharing", "gqa")(D, H, kv_heads=3)


def test_mask_self_mask_structure():
    mask, is_causal = attention_mask(5, torch.device("cpu"), causal=True, mask_self=True)
    assert not is_causal
    expected = torch.ones(5, 5, dtype=torch.bool).tril(-1)
    expected[0, 0] = True  # position 0 has no other key: it may see itself
    assert torch.equal(mask, expected)
    mask, _ = attention_mask(5, torch.device("cpu"), causal=False, mask_self=True)
    assert torch.equal(mask, ~torch.eye(5, dtype=torch.bool))


@pytest.mark.parametrize("causal", [False, True])
def test_mask_self_excludes_the_diagonal(causal):
    torch.manual_seed(0)
    attn = builtin_target("qkv_sharing", "qk_shared")(D, H, mask_self=True)
    pos = builtin_target("pos_enc", "none")(D, H, causal, 16)
    x = torch.randn(2, 6, D)
    mask, is_causal = attention_mask(6, x.device, causal=causal, mask_self=True)
    out = attn(x, pos, mask, is_causal)
    # reference: explicit softmax with each token's own key excluded
    q, k, v = attn.project(x)
    scores = q @ k.transpose(-1, -2) / math.sqrt(HD)
    allowed = ~torch.eye(6, dtype=torch.bool)
    if causal:
        allowed = allowed & torch.ones(6, 6, dtype=torch.bool).tril()
        allowed[0, 0] = True
    y = scores.masked_fill(~allowed, float("-inf")).softmax(-1) @ v
    torch.testing.assert_close(out, attn.out_proj(y.transpose(1, 2).reshape(2, 6, D)), rtol=1e-4, atol=1e-5)
    plain, plain_causal = attention_mask(6, x.device, causal=causal)
    assert not torch.allclose(out, attn(x, pos, plain, plain_causal))


@pytest.mark.parametrize("name", ["mqa", "gqa"])
def test_grouped_attention_masked_and_fast_paths_agree(name):
    torch.manual_seed(0)
    attn = builtin_target("qkv_sharing", name)(D, H)
    pos = builtin_target("pos_enc", "none")(D, H, True, 16)
    x = torch.randn(2, 6, D)
    fast = attn(x, pos, None, True)
    mask, _ = attention_mask(6, x.device, causal=True, bias=torch.zeros(H, 6, 6))
    torch.testing.assert_close(fast, attn(x, pos, mask, False), rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------------- norms

def _normalised(t: torch.Tensor) -> bool:
    return (t.mean(-1).abs().max() < 1e-4) and ((t.var(-1, unbiased=False) - 1).abs().max() < 1e-3)


def _block(placement: str, norm: str = "layernorm", n_layers: int = 1, init: str = "default"):
    """A model and its first Block (PyTorch's init: sublayer outputs of order 1; deepnorm: DeepNet's)."""
    init = "deepnet" if norm == "deepnorm" else init
    model = build(norm={"name": norm, "placement": placement}, n_layers=n_layers, d_model=D,
                  n_heads=H, init=init)
    return model, model.blocks[0]


def test_post_ln_normalises_after_the_residual_add():
    model, block = _block("post")
    x = 3 + 5 * torch.randn(2, 7, D)
    with torch.no_grad():
        out = block(x, model.pos, None, True)
        assert _normalised(out)
        model, pre = _block("pre")
        assert not _normalised(pre(x, model.pos, None, True))
    assert isinstance(model.final_norm, torch.nn.Module)


def test_post_ln_has_no_final_norm_and_pre_has_one():
    assert isinstance(_block("post")[0].final_norm, torch.nn.Identity)
    assert not isinstance(_block("pre")[0].final_norm, torch.nn.Identity)


def test_sandwich_norms_before_and_after_the_sublayer():
    model, block = _block("sandwich")
    seen = {}
    block.attn.register_forward_hook(lambda m, args, out: seen.update(attn_in=args[0], attn_out=out))
    block.attn_out_norm.register_forward_hook(lambda m, args, out: seen.update(norm_in=args[0], norm_out=out))
    x = 3 + 5 * torch.randn(2, 7, D)
    with torch.no_grad():
        block(x, model.pos, None, True)
    assert _normalised(seen["attn_in"])                  # normalised before ...
    assert seen["norm_in"] is seen["attn_out"]           # ... and its output normalised after
    assert _normalised(seen["norm_out"])


def test_deepnorm_scales_the_residual():
    model, block = _block("post", norm="deepnorm", n_layers=3)
    alpha = 6 ** 0.25
    assert block.alpha == pytest.approx(alpha)
    x, c = torch.randn(2, 5, D), torch.randn(D)
    out = block.sublayer(x, lambda h: c.expand_as(h), block.attn_norm)
    torch.testing.assert_close(out, F.layer_norm(alpha * x + c, (D,)))
    with pytest.raises(ValueError, match="placement=post"):
        build(norm={"name": "deepnorm", "placement": "pre"})


def test_rmsnorm_and_scalenorm_formulas():
    x = torch.randn(3, D)
    rms = builtin_target("norm", "rmsnorm")(D, eps=0.0)(x)
    torch.testing.assert_close(rms, x / x.pow(2).mean(-1, keepdim=True).sqrt())
    sn = builtin_target("norm", "scalenorm")(D)(x)
    torch.testing.assert_close(sn, math.sqrt(D) * x / x.norm(dim=-1, keepdim=True))


# ------------------------------------------------------------------------------------ FFN

def _n(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("name", ["glu", "reglu", "geglu", "swiglu", "bilinear"])
@pytest.mark.parametrize("d", [32, 48, 100])
def test_gated_ffn_matches_plain_parameter_count(name, d):
    plain = _n(builtin_target("ffn", "relu")(d, mult=4, bias=True))
    gated = _n(builtin_target("ffn", name)(d, mult=4, bias=True, match_params=True))
    assert abs(gated - plain) / plain < 0.01
    wide = builtin_target("ffn", name)(d, mult=4, match_params=False)
    assert wide.hidden == 4 * d


def test_swiglu_formula():
    torch.manual_seed(0)
    ffn = builtin_target("ffn", "swiglu")(16, mult=3, bias=False)
    x = torch.randn(4, 16)
    w, v = ffn.fc.weight.chunk(2, dim=0)
    torch.testing.assert_close(ffn(x), (F.silu(x @ w.T) * (x @ v.T)) @ ffn.out_proj.weight.T)


# ----------------------------------------------------------------------------------- init

WIDE = dict(d_model=256, n_heads=4, n_layers=3, ffn="gelu", qkv_sharing="independent")


def _wide(init: str, **kw):
    torch.manual_seed(0)
    model = build_model(make_cfg(init=init, **{**WIDE, **kw}), 32, 32, 16, None)
    attn, ffn = model.blocks[0].attn, model.blocks[0].ffn
    q, k, v = attn.qkv.weight.split(256)
    return model, attn, ffn, q, v


def _close(t: torch.Tensor, std: float) -> bool:
    return abs(t.std().item() / std - 1) < 0.1


def test_init_default_is_pytorchs():
    model, attn, ffn, q, v = _wide("default")
    assert _close(ffn.fc.weight, 1 / math.sqrt(3 * 256))   # U(±1/sqrt(fan_in))
    assert _close(model.tok_emb.weight, 1.0)


def test_init_xavier():
    model, attn, ffn, q, v = _wide("xavier")
    assert _close(q, math.sqrt(2 / 512)) and _close(v, math.sqrt(2 / 512))  # per d×d block
    assert _close(ffn.fc.weight, math.sqrt(2 / (256 + 1024)))
    assert _close(ffn.out_proj.weight, math.sqrt(2 / (256 + 1024)))
    assert ffn.fc.bias.abs().max() == 0


def test_init_normal():
    model, attn, ffn, q, v = _wide("normal")
    for t in (q, v, ffn.fc.weight, ffn.out_proj.weight, attn.out_proj.weight, model.head.weight):
        assert _close(t, 0.02)
    assert attn.qkv.bias.abs().max() == 0


def test_init_scaled():
    model, attn, ffn, q, v = _wide("scaled")
    assert _close(q, 0.02) and _close(ffn.fc.weight, 0.02)
    out_std = 0.02 / math.sqrt(2 * 3)
    assert _close(attn.out_proj.weight, out_std) and _close(ffn.out_proj.weight, out_std)


def test_init_small_init():
    model, attn, ffn, q, v = _wide("small_init")
    std = math.sqrt(2 / (5 * 256))
    assert _close(q, std) and _close(ffn.out_proj.weight, std) and _close(model.tok_emb.weight, std)


def test_init_deepnet_scales_only_v_out_and_ffn():
    model, attn, ffn, q, v = _wide("deepnet", norm={"name": "deepnorm", "placement": "post"})
    beta = (8 * 3) ** -0.25
    k = attn.qkv.weight[256:512]
    assert _close(q, math.sqrt(1 / 256)) and _close(k, math.sqrt(1 / 256))
    assert _close(v, beta * math.sqrt(1 / 256))
    assert _close(attn.out_proj.weight, beta * math.sqrt(1 / 256))
    assert _close(ffn.fc.weight, beta * math.sqrt(2 / 1280))
    assert _close(ffn.out_proj.weight, beta * math.sqrt(2 / 1280))


def test_init_zero_out():
    model, attn, ffn, q, v = _wide("zero_out")
    for block in model.blocks:
        assert block.attn.out_proj.weight.abs().max() == 0 and block.ffn.out_proj.weight.abs().max() == 0
    assert _close(q, 0.02) and _close(ffn.fc.weight, 0.02)


def test_init_fused_gated_ffn_blocks_get_their_own_xavier():
    model, attn, ffn, q, v = _wide("xavier", ffn={"name": "swiglu", "mult": 4, "match_params": False})
    gate, value = ffn.fc.weight.chunk(2, dim=0)
    assert _close(gate, math.sqrt(2 / 1280)) and _close(value, math.sqrt(2 / 1280))


# ------------------------------------------------------------- cross-layer sharing (ALBERT)

def _block_params(model) -> int:
    return sum(p.numel() for p in model.blocks[0].parameters())


def test_share_layers_all_uses_one_blocks_tensors():
    model = build(n_layers=4, share_layers="all")
    ptrs = {name: {p.data_ptr() for p in (getattr(b, "attn").qkv.weight, b.ffn_norm.weight)} for name, b in
            enumerate(model.blocks)}
    assert len({frozenset(v) for v in ptrs.values()}) == 1
    for a, b in zip(model.blocks[0].parameters(), model.blocks[3].parameters()):
        assert a.data_ptr() == b.data_ptr()


def test_share_layers_all_params_are_one_block_plus_the_rest():
    model = build(n_layers=4, share_layers="all", pos_enc="learned", max_len=16)
    rest = sum(p.numel() for m in (model.tok_emb, model.pos, model.head, model.final_norm) for p in m.parameters())
    assert model.num_params() == _block_params(model) + rest
    plain = build(n_layers=4, pos_enc="learned", max_len=16)
    assert plain.num_params() - model.num_params() == 3 * _block_params(model)


def test_share_layers_k_shares_consecutive_layers():
    model = build(n_layers=5, share_layers=2)
    b = model.blocks
    assert b[0] is b[1] and b[2] is b[3] and b[4] is not b[3] and b[1] is not b[2]
    assert len({id(x) for x in b}) == 3
    assert build(n_layers=5).num_params() - model.num_params() == 2 * _block_params(model)


def test_share_layers_none_shares_nothing_and_runs_every_layer():
    model = build(n_layers=3, share_layers="none")
    assert len({id(x) for x in model.blocks}) == 3
    shared = build(n_layers=3, share_layers="all").train()
    calls = []
    shared.blocks[0].register_forward_hook(lambda *a: calls.append(1))
    shared(torch.randint(0, VOCAB, (2, 6))).sum().backward()
    assert len(calls) == 3  # FLOPs unchanged: the shared block runs once per layer


# -------------------------------------------------------------- DeBERTa's disentangled attention

def _deberta(buckets=2, d=2, H=1, causal=False, max_distance=128):
    from ablate.model.positions import DeBERTa

    return DeBERTa(d, H, causal, 16, buckets=buckets, max_distance=max_distance)


def _full_score(pos, q, k):
    """What softmax sees: the content term (through rotate and SDPA's 1/sqrt(hd)) plus score_bias."""
    rq, rk = pos.rotate(q, k)
    return rq @ rk.transpose(-1, -2) / math.sqrt(q.shape[-1]) + pos.score_bias(q, k)


def test_deberta_score_by_hand():
    pos = _deberta()  # T=2, d=hd=2, buckets=2: δ(i, j) = 2 + clip(i - j, -2, 1)
    with torch.no_grad():
        pos.rel.weight.copy_(torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))
        pos.q_r.weight.copy_(torch.eye(2))
        pos.k_r.weight.copy_(torch.eye(2))
        q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])[None, None]
        k = torch.tensor([[1.0, 1.0], [2.0, 0.0]])[None, None]
        # A_ij = q_i·k_j + q_i·P[δ(i,j)] + k_j·P[δ(j,i)]:
        # A_00 = 1 + 0 + 1, A_01 = 2 + 1 + 2, A_10 = 1 + 1 + 1, A_11 = 0 + 1 + 0
        expected = torch.tensor([[2.0, 5.0], [3.0, 1.0]]) / math.sqrt(3 * 2)
        torch.testing.assert_close(_full_score(pos, q, k)[0, 0], expected)


def _reference_three_terms(pos, q, k):
    """An independent, loop-by-loop DeBERTa score (He et al. 2021, eq. 4), δ clipped as in §3.1."""
    B, H, T, hd = q.shape
    P = pos.rel.weight
    Kr = (P @ pos.k_r.weight.T).view(-1, H, hd)
    Qr = (P @ pos.q_r.weight.T).view(-1, H, hd)
    kb = pos.buckets

    def delta(i, j):  # exact distances (the test keeps them within buckets/2)
        return min(max(i - j, -kb), kb - 1) + kb

    out = torch.empty(B, H, T, T, dtype=q.dtype)
    for b in range(B):
        for h in range(H):
            for i in range(T):
                for j in range(T):
                    out[b, h, i, j] = (q[b, h, i] @ k[b, h, j] + q[b, h, i] @ Kr[delta(i, j), h]
                                       + k[b, h, j] @ Qr[delta(j, i), h])
    return out / math.sqrt(3 * hd)


def test_deberta_matches_an_independent_three_term_score():
    torch.manual_seed(0)
    pos = _deberta(buckets=16, d=12, H=3).double()
    q, k = torch.randn(2, 2, 3, 7, 4, dtype=torch.float64).unbind(0)
    with torch.no_grad():
        torch.testing.assert_close(_full_score(pos, q, k), _reference_three_terms(pos, q, k))


def test_deberta_buckets_are_exact_near_and_logarithmic_far():
    from ablate.model.positions import deberta_delta

    d = deberta_delta(1, 200, buckets=8, max_distance=128, device=torch.device("cpu"))[0]  # query 199
    rel = 199 - torch.arange(200)
    assert all(d[rel == r].item() == 8 + r for r in range(0, 5))  # exact up to buckets/2
    assert d.min() >= 8 and d.max() == 15  # keys at or before the query: the upper half
    assert (d[:-1] >= d[1:]).all()  # monotone in the distance


@pytest.mark.parametrize("causal", [True, False], ids=["decoder", "encoder"])
@pytest.mark.parametrize("attn", ["independent", "qk_shared", "gqa", "mqa"])
def test_deberta_model_trains_and_counts_its_parameters(causal, attn):
    model = build(pos_enc="deberta", causal=causal, qkv_sharing=attn).train()
    model(torch.randint(0, VOCAB, (2, 9))).square().mean().backward()
    assert model.pos.rel.weight.grad is not None and model.pos.q_r.weight.grad is not None
    d, buckets = 32, 32
    rope = build(pos_enc="rope", causal=causal, qkv_sharing=attn)
    assert model.num_params() - rope.num_params() == 2 * buckets * d + 2 * d * d


def test_deberta_in_a_model_is_the_three_term_score():
    """Through Attention.forward: the same output as softmax over the reference score."""
    torch.manual_seed(0)
    model = build(pos_enc="deberta", causal=True, n_layers=1)
    attn, pos = model.blocks[0].attn, model.pos
    x = torch.randn(2, 6, 32)
    with torch.no_grad():
        got = attn(x, pos, *model.mask(torch.ones(2, 6, dtype=torch.long)))
        q, k, v = attn.project(x)
        s = _reference_three_terms(pos, q, k).masked_fill(~torch.ones(6, 6, dtype=torch.bool).tril(), float("-inf"))
        y = s.softmax(-1) @ v
        expected = attn.out_proj(y.transpose(1, 2).reshape(2, 6, 32))
    torch.testing.assert_close(got, expected)
