"""Confounds in the built-in comparisons, each removed and pinned here: additive positions that
swamp the tokens, half of DeepNet, xPos in an encoder, KERPLE's dead clamp, and the parameter
mismatch of gated FFNs at matched size."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from conftest import builtin_options, builtin_target, compose_cfg, records, run_cli

from ablate.config import ConfigError, config_problems, validate
from ablate.model import build_model
from ablate.model.ffn import GatedFFN, matched_hidden, plain_params
from ablate.model.positions import Kerple, Position, XPos

CONF = Path(__file__).resolve().parents[1] / "ablate" / "conf"

pytestmark = pytest.mark.usefixtures("one_thread")



# ------------------------------------------------------------------ a) tokens vs additive positions

ADDITIVE = [n for n in builtin_options("pos_enc") if builtin_target("pos_enc", n).embed is not Position.embed]


def first_layer_inputs(overrides: list[str], tokens: torch.Tensor) -> torch.Tensor:
    """What the first layer's attention sees (the normalised block input), for the default
    model, init and task with ``overrides``."""
    cfg = compose_cfg(overrides)
    torch.manual_seed(0)
    model = build_model(cfg, 256, 256, int(cfg.task.seq_len)).eval()
    seen = {}
    model.blocks[0].attn_norm.register_forward_hook(lambda m, args, out: seen.update(x=out))
    with torch.no_grad():
        model(tokens)
    return seen["x"]


def token_cosines(overrides: list[str], T: int = 64) -> torch.Tensor:
    """Cosine similarity of the first layer's inputs for two different tokens at each position."""
    gen = torch.Generator().manual_seed(1)
    a = torch.randint(0, 256, (1, T), generator=gen)
    b = (a + torch.randint(1, 256, (1, T), generator=gen)) % 256  # a different token everywhere
    return torch.cosine_similarity(first_layer_inputs(overrides, a), first_layer_inputs(overrides, b), dim=-1)


def test_the_additive_encodings_are_found():
    assert {"sinusoidal", "learned"} <= set(ADDITIVE) and "rope" not in ADDITIVE


@pytest.mark.parametrize("pos", ADDITIVE)
def test_default_scale_keeps_different_tokens_apart_under_every_additive_encoding(pos):
    cos = token_cosines([f"pos_enc={pos}"])
    assert cos.max() < 0.9, cos.max()


@pytest.mark.parametrize("pos", ADDITIVE)
def test_the_positions_are_not_swamped_either(pos):
    """The other way round: at the default scale the position signal is of the tokens' order."""
    cfg = compose_cfg([f"pos_enc={pos}"])
    torch.manual_seed(0)
    model = build_model(cfg, 256, 256, int(cfg.task.seq_len))
    T = int(cfg.task.seq_len)
    with torch.no_grad():
        positions = model.pos.embed(torch.zeros(1, T, model.d_model))
    ratio = positions.pow(2).mean().sqrt().item() / model.token_rms()
    assert 0.3 < ratio < 3, ratio


def test_an_amplitude_one_table_swamps_the_tokens():
    """The confound itself: the paper's table as printed, on GPT-2-scale tokens (std 0.02)."""
    assert token_cosines(["pos_enc=sinusoidal", "pos_enc.amplitude=1.0"]).min() > 0.99
    # and Vaswani's sqrt(d) alone is not enough at d=64 with std 0.02 (it was meant for std d^-1/2)
    assert token_cosines(["pos_enc=sinusoidal", "pos_enc.amplitude=1.0", "model.embed_scale=sqrt_d"]).mean() > 0.9


@pytest.mark.slow  # seconds
def test_sinusoidal_amplitude_is_the_token_rms_after_init():
    for overrides in ([], ["init=default"], ["model.embed_scale=sqrt_d"], ["init=xavier", "model.embed_scale=sqrt_d"]):
        cfg = compose_cfg(["pos_enc=sinusoidal", *overrides])
        model = build_model(cfg, 256, 256, 64)
        assert model.pos.scale.item() == pytest.approx(model.token_rms(), rel=1e-6)
    assert model.token_rms() == pytest.approx(1.0, rel=0.02)  # xavier's std d^-1/2, times sqrt(d): Vaswani's RMS 1


def test_embed_scale_sqrt_d_scales_the_tokens():
    cfg = compose_cfg(["model.embed_scale=sqrt_d", "pos_enc=none"])
    model = build_model(cfg, 256, 256, 64)
    tokens = torch.randint(0, 256, (2, 5))
    torch.testing.assert_close(model.embed(tokens), model.tok_emb(tokens) * math.sqrt(model.d_model))
    assert compose_cfg([]).model.embed_scale == "none"


def test_embed_scale_is_validated_naming_the_choices():
    with pytest.raises(ConfigError, match=r"model.embed_scale='vaswani' must be one of 'none', 'sqrt_d'"):
        validate(compose_cfg(["model.embed_scale=vaswani"]))


# ---------------------------------------------------------------------------- b) DeepNet, whole

def deepnet_problems(overrides: list[str]) -> list[str]:
    return [p for p in config_problems(compose_cfg(overrides)) if "DeepNet" in p]


def test_deepnorm_without_deepnet_init_is_refused_naming_the_choices():
    (problem,) = deepnet_problems(["norm=deepnorm"])
    assert "init=normal" in problem and "init=deepnet" in problem and "norm.allow_without_deepnet_init=true" in problem
    for init in ("default", "xavier", "scaled"):
        assert deepnet_problems(["norm=deepnorm", f"init={init}"]), init


def test_deepnet_init_without_deepnorm_is_refused_naming_the_choices():
    (problem,) = deepnet_problems(["init=deepnet"])
    assert "norm=layernorm" in problem and "norm=deepnorm" in problem and "init.allow_without_deepnorm=true" in problem
    assert deepnet_problems(["init=deepnet", "norm.placement=post"])  # post-LN is not DeepNorm: no α


def test_deepnet_whole_and_halves_asked_for_validate():
    for overrides in (["norm=deepnorm", "init=deepnet"],
                      ["norm=deepnorm", "norm.allow_without_deepnet_init=true"],
                      ["init=deepnet", "init.allow_without_deepnorm=true"]):
        validate(compose_cfg(overrides))


@pytest.mark.slow  # seconds: every job of an experiment
@pytest.mark.parametrize("experiment", ["norm", "init"])
def test_the_norm_and_init_experiments_run_deepnet_whole_or_label_its_half(experiment):
    from ablate.sweep import design_rows

    cfg = compose_cfg([f"experiment={experiment}"])
    rows = design_rows(OmegaConf.to_container(cfg.experiment.design))
    deepnet = [(label, row) for label, row in rows if "deepnet" in row.values() or "deepnorm" in row.values()]
    assert len(deepnet) == 1
    label, row = deepnet[0]
    if experiment == "norm":
        assert row["norm"] == "deepnorm" and row["init"] == "deepnet"      # whole
    else:
        assert row["init.allow_without_deepnorm"] == "true" and "alone" in label  # its half, asked for and labelled
    for _, row in rows:  # every row of the experiment validates
        validate(compose_cfg([f"experiment={experiment}", *(f"{k}={v}" for k, v in row.items())]))


def test_build_model_refuses_half_of_deepnet_too():
    cfg = compose_cfg(["norm=deepnorm"])
    with pytest.raises(ValueError, match="needs DeepNet's β initialisation"):
        build_model(cfg, 256, 256, 64)
    model = build_model(compose_cfg(["norm=deepnorm", "init=deepnet"]), 256, 256, 64)
    assert model.blocks[0].alpha == pytest.approx((2 * model.n_layers) ** 0.25)


@pytest.mark.slow
def test_norm_deepnorm_never_trains_without_deepnet_init(tmp_path, tiny):
    out = run_cli([*tiny, "norm=deepnorm", "logger=none", "hydra.run.dir=run"], tmp_path)
    assert out.returncode == 2 and "init=deepnet" in out.stderr, out.stderr[-2000:]
    assert not records(tmp_path / "run")


# ------------------------------------------------------------------------ c) xPos in an encoder

def test_xpos_in_an_encoder_is_refused_naming_the_choices():
    problems = config_problems(compose_cfg(["pos_enc=xpos", "task=reverse"]))
    assert any("pos_enc=xpos needs a decoder" in p and "model.causal=false" in p and "model.causal=true" in p
               for p in problems), problems
    validate(compose_cfg(["pos_enc=xpos", "task=lm"]))  # a decoder: fine
    with pytest.raises(ValueError, match="pos_enc=xpos needs a decoder"):
        XPos(16, 2, causal=False, max_len=8)


def test_xpos_would_up_weight_keys_ahead_of_the_query():
    """Why: the decay factor zeta^((m-n)/gamma) grows for keys ahead (n > m), x1.87 at 255."""
    zeta_min = (0 / 16 + 0.4) / 1.4
    assert zeta_min ** (-255 / 512) == pytest.approx(1.87, abs=0.01)


# ----------------------------------------------------------------------- d) KERPLE's constraint

def test_kerple_parameter_below_the_bound_still_gets_gradient_and_recovers():
    torch.manual_seed(0)
    pos = Kerple(16, 2, causal=True, max_len=8)
    with torch.no_grad():
        pos.r1[0] = -0.5   # pushed below the bound (by an optimizer step, say)
        pos.r2[1] = 0.001
    opt = torch.optim.SGD(pos.parameters(), lr=0.05)
    bias = pos.bias(8, 8)
    assert pos.r1[0] == Kerple.MIN and pos.r2[1] == Kerple.MIN  # the stored values projected
    bias.sum().backward()  # minimising the bias wants larger r1, r2
    assert pos.r1.grad[0] < 0 and pos.r2.grad[1] < 0  # a clamp in the forward would give exactly 0 here
    for _ in range(20):
        opt.zero_grad()
        pos.bias(8, 8).sum().backward()
        opt.step()
    assert pos.r1[0].item() > 0.5 and pos.r2[1].item() > 0.05  # left the bound


def test_kerple_keeps_the_bound_under_training():
    torch.manual_seed(0)
    pos = Kerple(16, 2, causal=True, max_len=8)
    opt = torch.optim.SGD(pos.parameters(), lr=1.0)
    for _ in range(5):  # the loss wants r1, r2 as small as possible
        opt.zero_grad()
        (-pos.bias(8, 8)).sum().backward()
        opt.step()
        pos.bias(8, 8)
        assert (pos.r1 >= Kerple.MIN).all() and (pos.r2 >= Kerple.MIN).all()


# ------------------------------------------------------------- e) gated FFNs at matched parameters

GATED = [n for n in builtin_options("ffn") if issubclass(builtin_target("ffn", n), GatedFFN)]


def n_params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("d", [16, 32, 48, 64, 100])
def test_matched_width_is_the_nearest_and_its_mismatch_is_reported(d, bias):
    plain = n_params(builtin_target("ffn", "relu")(d, mult=4, bias=bias))
    assert plain == plain_params(d, 4, bias)
    for name in GATED:
        ffn = builtin_target("ffn", name)(d, mult=4, bias=bias, match_params=True)
        assert ffn.param_mismatch() == n_params(ffn) - plain
        g = ffn.hidden

        def mismatch(width: int) -> int:  # a gated FFN of this width against the plain one
            return 3 * d * width + (2 * width + d) * bias - plain

        assert abs(mismatch(g)) <= min(abs(mismatch(g - 1)), abs(mismatch(g + 1)))  # the nearest width
        assert abs(ffn.param_mismatch()) <= (3 * d + 2 * bias) / 2
    assert builtin_target("ffn", "relu")(d, bias=bias).param_mismatch() == 0


def test_matched_width_is_exact_where_an_integer_width_allows():
    assert builtin_target("ffn", "swiglu")(48, bias=False).param_mismatch() == 0  # 2/3 * 192 = 128
    # with biases: g = h(2d+1)/(3d+2) is an integer for d = 2 (h = 8: 8*5/8 = 5)
    assert matched_hidden(2, 4, True) == 5 and builtin_target("ffn", "swiglu")(2, bias=True).param_mismatch() == 0
    # the case that was +0.45%: d=64 with biases is now the nearest width, within 0.15%
    ffn = builtin_target("ffn", "swiglu")(64, bias=True)
    assert abs(ffn.param_mismatch()) / plain_params(64, 4, True) < 0.0015


def test_the_models_ffn_mismatch_is_reported_for_the_table():
    from test_model import build

    model = build(ffn={"name": "swiglu", "bias": True}, d_model=64, n_heads=4, n_layers=3)
    assert model.ffn_param_mismatch() == 3 * model.blocks[0].ffn.param_mismatch() == 3 * -44
    assert build(ffn="relu", n_layers=3).ffn_param_mismatch() == 0
    assert build(ffn={"name": "swiglu", "bias": True}, d_model=64, n_heads=4, n_layers=3,
                 share_layers="all").ffn_param_mismatch() == -44
