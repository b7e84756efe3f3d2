"""μP (``model.parametrization=mup``, ``ablate.model.mup``): which parameter gets which multiplier,
how init schemes compose or are refused, that μP at its base width *is* the standard
parametrization, and the coordinate check (activations flat in width under μP, growing under
standard)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from ablate.config import config_problems
from ablate.coord_check import coord_check, slopes
from ablate.model import build_model
from ablate.model.flops import training_flops
from ablate.optim import make_optimizer
from conftest import compose_cfg

VOCAB, T = 64, 16


def model_of(overrides: list[str], seed: int = 0):
    cfg = compose_cfg(["task=lm", "task.seq_len=16", *overrides])
    assert config_problems(cfg) == []
    torch.manual_seed(seed)
    return build_model(cfg, VOCAB, VOCAB, T), cfg


def mup(width: int, base: int = 32, *extra: str) -> list[str]:
    return [f"model.d_model={width}", "model.parametrization=mup", f"model.mup_base_width={base}", *extra]


def groups(optimizer) -> list[tuple[float, float, int]]:
    return [(g["lr"], g["weight_decay"], len(g["params"])) for g in optimizer.param_groups]


def test_standard_keeps_two_groups_of_adamw_as_before():
    model, cfg = model_of(["model.d_model=64"])
    optimizer = make_optimizer(model.parameters(), cfg.optim)
    params = [p for p in model.parameters() if p.requires_grad]
    assert [g["params"] for g in optimizer.param_groups] == [[p for p in params if p.dim() >= 2],
                                                            [p for p in params if p.dim() < 2]]
    assert [(g["lr"], g["weight_decay"]) for g in optimizer.param_groups] == [(cfg.optim.lr, cfg.optim.weight_decay),
                                                                              (cfg.optim.lr, 0.0)]
    assert model.output_mult == 1.0 and model.blocks[0].attn.pattern.scale is None


@pytest.mark.parametrize("extra", [[], ["pos_enc=rope", "ffn=swiglu", "norm=rmsnorm"], ["init=default", "qkv_sharing=gqa"],
                                   ["pos_enc=deberta"], ["attention=local", "pos_enc=alibi", "model.bias=true"],
                                   ["init=default", "model.bias=true"]])
def test_mup_at_its_base_width_is_the_standard_parametrization(extra):
    """Same parameters, same logits, and the same losses over a few AdamW steps: μP only departs from
    standard as the width departs from the base."""
    (sp, cfg), (mp, mcfg) = model_of(["model.d_model=64", *extra]), model_of(mup(64, 64, *extra))
    assert all(torch.equal(a, b) for a, b in zip(sp.state_dict().values(), mp.state_dict().values()))
    tokens = torch.randint(0, VOCAB, (4, T), generator=torch.Generator().manual_seed(1))
    assert adamw_losses(sp, cfg, tokens[:, :-1], tokens[:, 1:]) == adamw_losses(mp, mcfg, tokens[:, :-1], tokens[:, 1:])


def adamw_losses(model, cfg, inputs, targets, steps: int = 3) -> list[float]:
    """The losses of ``steps`` AdamW steps on one batch (the config's optimizer: μP's groups included)."""
    optimizer, losses = make_optimizer(model.parameters(), cfg.optim), []
    for _ in range(steps):
        loss = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten(), ignore_index=-100)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_each_parameter_gets_the_multiplier_tensor_programs_v_gives_it():
    model, cfg = model_of(mup(128, 32, "model.bias=true"))
    m = 128 / 32
    matrix = {n for n, p in model.named_parameters() if getattr(p, "lr_scale", 1.0) != 1.0}
    assert matrix == {n for n, p in model.named_parameters() if p.dim() == 2 and n.startswith("blocks.")}
    assert all(math.isclose(p.lr_scale, 1 / m) for n, p in model.named_parameters() if n in matrix)
    lr, wd = cfg.optim.lr, cfg.optim.weight_decay
    by_lr = {(round(g["lr"], 12), round(g["weight_decay"], 12)) for g in make_optimizer(model.parameters(), cfg.optim).param_groups}
    # hidden matrices: lr/m with wd*m (lr*wd kept); embeddings and the readout: lr, wd; vectors: no decay
    assert by_lr == {(round(lr / m, 12), round(wd * m, 12)), (lr, wd), (lr, 0.0)}
    assert model.output_mult == 1 / m
    head_dim, base_head_dim = 128 // 4, 32 // 4
    assert math.isclose(model.blocks[0].attn.pattern.scale, base_head_dim ** 0.5 / head_dim)


def test_scalar_like_and_vector_like_parameters_keep_their_learning_rate():
    """T5's bucket table (buckets x heads) does not grow with width; KERPLE's scalars neither."""
    for pos in ("t5_bias", "kerple"):
        model, _ = model_of(mup(128, 32, f"pos_enc={pos}"))
        for name, p in model.named_parameters():
            if name.startswith("pos."):
                assert getattr(p, "lr_scale", 1.0) == 1.0, name


def test_the_attention_scale_reaches_the_scores():
    model, _ = model_of(mup(128, 32))
    pattern = model.blocks[0].attn.pattern
    q, k, v = (torch.randn(2, 4, T, 32, generator=torch.Generator().manual_seed(i)) for i in range(3))
    expected = torch.softmax((q @ k.transpose(-1, -2) * pattern.scale).masked_fill(
        ~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf")), -1) @ v
    assert torch.allclose(pattern(q, k, v, None, True), expected, atol=1e-5)


def test_readout_multiplier_divides_the_heads_input_by_the_width_multiplier():
    model, _ = model_of(mup(128, 32))
    x = torch.randn(2, T, 128)
    assert torch.allclose(model.head(x * model.output_mult), model.head(x / 4))


def linear_biases(model) -> dict[str, torch.Tensor]:
    """The bias of every Linear but the head (the hidden layers'), by parameter name."""
    return {f"{name}.bias": m.bias for name, m in model.named_modules()
            if isinstance(m, torch.nn.Linear) and m is not model.head and m.bias is not None}


@pytest.mark.parametrize("init,hidden,readout,bias", [("normal", 0.5, 1.0, 1.0), ("scaled", 0.5, 1.0, 1.0),
                                                      ("default", 1.0, 2.0, 2.0)])
def test_init_schemes_compose_as_documented(init, hidden, readout, bias):
    """A fixed-std scheme's stds are the base width's (hidden matrices x 1/sqrt(m); its biases are
    zero); PyTorch's own 1/sqrt(fan_in) init keeps its hidden weights and gets a width-independent
    readout (x sqrt(m)) and hidden biases (x sqrt(fan-in multiplier): m for every Linear here)."""
    (sp, _), (mp, _) = (model_of([f"init={init}", "model.d_model=128", "model.bias=true"]),
                        model_of(mup(128, 32, f"init={init}", "model.bias=true")))
    biases = linear_biases(sp)
    assert len(biases) == 8  # per block: qkv, out_proj, ffn.fc, ffn.out_proj
    for (name, a), b in zip(sp.named_parameters(), mp.parameters()):
        if a.dim() == 2 and name.startswith("blocks."):
            factor = hidden
        elif name.startswith("head."):
            factor = readout
        elif name in biases:
            factor = bias
        else:
            factor = 1.0  # embeddings, norm gains and biases
        assert torch.allclose(b, a * factor), name


@pytest.mark.parametrize("parametrization", ["mup", "standard"])
def test_under_mup_a_default_init_bias_has_the_same_std_at_every_width(parametrization):
    """Tensor Programs V (Table 3): biases are vector-like, Θ(1) at init. PyTorch draws a Linear's
    bias U(±1/√fan_in), std 1/√(3·fan_in), which shrinks with width; μP (microsoft/mup's
    ``rescale_linear_bias``) multiplies it by √(fan_in / base fan_in), to std 1/√(3·base fan_in) at
    every width. Each bias is divided by that base std here: μP's are ~1 at every width,
    standard's fall as 1/√m (0.35 at m = 8)."""
    widths, stds = (32, 64, 128, 256), []
    for width in widths:
        overrides = ["init=default", "model.bias=true"]
        model, _ = model_of(mup(width, 32, *overrides) if parametrization == "mup" else
                            [f"model.d_model={width}", *overrides])
        base_fan_in = {name: m.in_features * 32 // width for name, m in model.named_modules()
                       if isinstance(m, torch.nn.Linear)}
        normalised = [b * math.sqrt(3 * base_fan_in[name.removesuffix(".bias")])
                      for name, b in linear_biases(model).items()]
        stds.append(torch.cat(normalised).std().item())
    if parametrization == "mup":
        assert all(abs(s - 1) < 0.15 for s in stds), stds
    else:
        assert all(abs(s * math.sqrt(w / 32) - 1) < 0.15 for s, w in zip(stds, widths)), stds


@pytest.mark.parametrize("overrides,named", [
    (["model.parametrization=mup"], ["model.mup_base_width"]),
    (mup(64, 30), ["model.mup_base_width=30", "model.n_heads=4"]),
    (mup(64, 32, "init=xavier"), ["init=xavier", "model.parametrization=mup", "init=normal"]),
    (mup(64, 32, "init=deepnet", "norm=deepnorm", "norm.placement=post"), ["init=deepnet", "model.parametrization=mup"]),
    (mup(64, 32, "model.embed_scale=sqrt_d"), ["model.embed_scale=sqrt_d", "model.parametrization=mup"]),
])
def test_what_contradicts_mup_is_refused_naming_both(overrides, named):
    problems = config_problems(compose_cfg(["task=lm", *overrides]))
    assert problems and all(any(n in p for p in problems) for n in named), problems


def test_flops_and_parameters_do_not_depend_on_the_parametrization():
    (sp, _), (mp, _) = model_of(["model.d_model=128", "pos_enc=deberta"]), model_of(mup(128, 32, "pos_enc=deberta"))
    assert sp.num_params() == mp.num_params()
    assert training_flops(sp, T, 4) == training_flops(mp, T, 4)


def test_a_checkpoint_of_a_mup_model_resumes_into_the_same_groups():
    model, cfg = model_of(mup(128, 32))
    optimizer = make_optimizer(model.parameters(), cfg.optim)
    tokens = torch.randint(0, VOCAB, (2, T))
    F.cross_entropy(model(tokens).flatten(0, 1), tokens.flatten()).backward()
    optimizer.step()
    state = {"model": model.state_dict(), "optim": optimizer.state_dict()}
    again, _ = model_of(mup(128, 32), seed=1)
    again.load_state_dict(state["model"])
    resumed = make_optimizer(again.parameters(), cfg.optim)
    resumed.load_state_dict(state["optim"])
    assert groups(resumed) == groups(optimizer)
    assert all(getattr(p, "lr_scale", 1.0) == getattr(q, "lr_scale", 1.0) for p, q in zip(model.parameters(), again.parameters()))


def test_coordinate_check_is_flat_under_mup_and_grows_under_standard():
    """Tensor Programs V's coordinate check: after a few AdamW steps the logits' RMS grows with width
    under the standard parametrization and stays flat under μP (slopes of log RMS on log width)."""
    rows = coord_check(["task.seq_len=32", "task.batch_size=8"], widths=(32, 64, 128, 256), steps=4, seeds=(0,))
    after, at_init = slopes(rows), slopes(rows, step=1)
    for kind in ("attention", "ffn", "block", "logits"):
        assert abs(after["mup"][kind]) < 0.3, (kind, after)  # here: 0.08 to 0.24
        assert after["standard"][kind] > after["mup"][kind] + 0.6, (kind, after)  # here: 0.9 to 2.1
    for kind in ("attention", "ffn", "block"):  # a fixed-std init read at the base width: flat from the start
        assert abs(at_init["mup"][kind]) < 0.1, (kind, at_init)


def test_the_coord_check_command_prints_slopes_and_draws_its_plot(tmp_path, capsys):
    from ablate.coord_check import main

    out = tmp_path / "coord_check.png"
    main(["task.seq_len=16", "task.batch_size=4", "--widths", "32,64", "--steps", "2", "--seeds", "1", "--out", str(out)])
    printed = capsys.readouterr().out
    assert out.stat().st_size > 10_000 and out.read_bytes()[:4] == b"\x89PNG"
    assert "standard" in printed and "mup" in printed and "logits" in printed


@pytest.mark.parametrize("args,named", [(["init=xavier"], "init=xavier"), (["--widths", "32"], "--widths")])
def test_the_coord_check_command_refuses_bad_input_with_exit_2(args, named, capsys):
    from ablate.coord_check import main

    with pytest.raises(SystemExit) as stop:
        main([*args, "--out", "/nonexistent/never.png"])
    assert stop.value.code == 2 and named in capsys.readouterr().err


def test_the_size_presets_are_listed_in_order_where_the_report_reads_them():
    from ablate.model import SIZES
    from ablate.sweep import SIZE_PRESETS

    assert SIZE_PRESETS == tuple(SIZES)
    assert [SIZES[s]["d_model"] for s in SIZE_PRESETS] == sorted(SIZES[s]["d_model"] for s in SIZE_PRESETS)


def test_an_encoder_decoder_under_mup_scales_both_stacks_and_the_cross_attention():
    """μP for the encoder–decoder: at its base width it is the standard model (same weights, same
    losses over AdamW steps); wider, every projection of both stacks and of the cross-attention is
    matrix-like (lr/m), the 1/d_head scale reaches self- and cross-attention, the head's input is /m."""
    from ablate.data import build_task
    from ablate.data.seq2seq import Add

    def enc_dec(overrides: list[str]):
        cfg = compose_cfg(["task=add", "task.seq_len=16", "model.arch=encoder_decoder", "model.n_layers=1",
                           "init=default", *overrides])
        assert config_problems(cfg) == []
        task = build_task(cfg.task)
        assert isinstance(task, Add)
        torch.manual_seed(0)
        return build_model(cfg, task.vocab_size, task.n_classes, 16, task.pad_id, task.layout), cfg, task

    (sp, cfg, task), (mp, mcfg, _) = enc_dec(["model.d_model=64"]), enc_dec(mup(64, 64))
    assert all(torch.equal(a, b) for a, b in zip(sp.state_dict().values(), mp.state_dict().values()))
    tokens, targets = task.eval_batches(16)[0]
    assert adamw_losses(sp, cfg, tokens[:8], targets[:8]) == adamw_losses(mp, mcfg, tokens[:8], targets[:8])

    wide, _, _ = enc_dec(mup(128, 32))
    m = 128 / 32
    matrix = {n for n, p in wide.named_parameters() if getattr(p, "lr_scale", 1.0) != 1.0}
    assert matrix == {n for n, p in wide.named_parameters() if p.dim() == 2 and n.startswith(("blocks.", "encoder."))}
    assert any(".cross." in n for n in matrix) and any(n.startswith("encoder.") for n in matrix)
    assert all(math.isclose(p.lr_scale, 1 / m) for n, p in wide.named_parameters() if n in matrix)
    scale = (32 // 4) ** 0.5 / (128 // 4)
    patterns = [wide.encoder[0].attn.pattern, wide.blocks[0].attn.pattern, wide.blocks[0].cross.pattern]
    assert all(math.isclose(p.scale, scale) for p in patterns) and wide.output_mult == 1 / m
