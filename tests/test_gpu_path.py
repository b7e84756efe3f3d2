"""The GPU path, tested on CPU wherever it can be: ``model.compile`` (torch.compile), bias-type
positions through FlexAttention (its CPU forward; the score functions against the materialised
bias, values and gradients), the ``model.size`` presets, and ``scripts/gpu_check.sh --dry-run``.
What only a GPU shows (FlexAttention's kernels and their gradients, bf16, speed, MFU, DDP) is
``scripts/gpu_check.sh`` on a GPU machine (docs/scaling.md, "GPU")."""

from __future__ import annotations

import json
import subprocess
import time
import warnings
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from conftest import REPO, cli_env, compose_cfg, records, run_cli, script_module
from test_model import VOCAB, make_cfg

from ablate.compose import TINY
from ablate.config import ConfigError, validate
from ablate.data import build_task
from ablate.model import SIZES, assemble, build_model
from ablate.model.patterns import FlexScores, Softmax, flex_available
from ablate.model.positions import ALiBi, Kerple, T5Bias, score_mod_bias
from ablate.paths import CONF_DIR

BIAS = {"alibi": ALiBi, "t5_bias": T5Bias, "kerple": Kerple}
NOMINAL = {"3xs": 45e3, "2xs": 190e3, "xs": 1e6, "s": 10e6, "m": 40e6, "l": 125e6}
needs_flex = pytest.mark.skipif(not flex_available(), reason=f"torch {torch.__version__} has no FlexAttention")


@pytest.fixture(autouse=True)
def _quiet_flex():
    with warnings.catch_warnings():  # eager FlexAttention on CPU warns that it is not compiled: meant here
        warnings.filterwarnings("ignore", message=".*flex_attention called without torch.compile.*")
        yield



def result(run_dir: Path) -> dict:
    return json.loads((run_dir / "result.json").read_text())


# ------------------------------------------------------------------------------- model.compile

@pytest.mark.slow
def test_compiled_run_through_the_cli_trains_like_the_eager_one(tmp_path: Path, tiny: list[str]) -> None:
    # both runs in one process (a two-job sweep): one interpreter start, not two. Its compiled kernels stay
    # in inductor's on-disk cache, where the dry run below finds them (the test after this one)
    out = run_cli(["-m", *tiny, "logger=none", "model.compile=false,true", f"hydra.sweep.dir={tmp_path / 'sweep'}"],
                  tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    eager, compiled = sorted(records(tmp_path / "sweep"), key=lambda r: r["config"]["model"]["compile"])
    assert eager["status"] == "ok" and eager["config"]["model"]["compile"] is False
    assert compiled["status"] == "ok" and compiled["config"]["model"]["compile"] is True
    e, c = eager["metrics"], compiled["metrics"]
    assert c["params"] == e["params"] and c["flops_per_token"] == e["flops_per_token"]
    assert c["steps"] == e["steps"] == 6
    for key in ("final_loss", "loss"):  # same seed, same batches: the same training up to rounding
        assert c[key] == pytest.approx(e[key], rel=1e-3), key


def test_every_evaluation_runs_under_no_grad_unless_the_trainer_node_says_otherwise(tmp_path: Path) -> None:
    """The test split's evaluation at a run's end under torch.no_grad, as the learning curve's points
    (lit.evaluate) and Lightning's validation while fitting: one inference graph for a compiled model,
    not a second one under inference mode. A trainer node that sets inference_mode keeps its value."""
    from ablate.train import make_trainer

    for overrides, expected in (([], False), (["+trainer.inference_mode=true"], True)):
        trainer = make_trainer(compose_cfg([*TINY, *overrides]), root_dir=tmp_path)
        assert trainer.test_loop.inference_mode is expected and trainer.validate_loop.inference_mode is expected


def test_compile_is_applied_in_place_and_keeps_the_models_methods_and_checkpoint_keys() -> None:
    cfg = make_cfg()
    eager = build_model(cfg, VOCAB, 7, 16)
    cfg["model"]["compile"] = True
    compiled = build_model(cfg, VOCAB, 7, 16)  # compilation itself happens at the first call
    assert compiled._compiled_call_impl is not None and eager._compiled_call_impl is None
    assert type(compiled) is type(eager)
    assert compiled.num_params() == eager.num_params()
    assert compiled.flops_per_token(16, 4) == eager.flops_per_token(16, 4)
    assert list(compiled.state_dict()) == list(eager.state_dict())


@pytest.mark.parametrize("key,bad,named", [("compile", "abc", "model.compile='abc'"),
                                           ("flex", "on", "model.flex='on' must be one of 'auto', 'off'"),
                                           ("size", "xxl", "must be one of '3xs', '2xs', 'xs', 's', 'm', 'l'")])
def test_the_gpu_path_keys_are_validated_naming_the_choices(key: str, bad: str, named: str) -> None:
    with pytest.raises(ConfigError, match=named.replace("(", r"\(").replace(")", r"\)")):
        validate(compose_cfg([f"model.{key}={bad}"]))


# ------------------------------------------------------------------------------- FlexAttention

@pytest.mark.parametrize("causal", [True, False], ids=["causal", "encoder"])
@pytest.mark.parametrize("name", list(BIAS))
def test_score_function_is_the_materialised_bias_values_and_gradients(name: str, causal: bool) -> None:
    """What FlexAttention computes per score (the score function, evaluated under vmap as its
    reference does) against the (heads, T, T) bias of the mask path; T beyond T5's max_distance
    reaches its log buckets and the last one."""
    torch.manual_seed(0)
    H, T = 4, 150
    pos = BIAS[name](32, H, causal, T)
    weight, params = torch.randn(H, T, T), list(pos.parameters())
    results = []
    for bias in (pos.bias(T, T), score_mod_bias(pos.score_mod(), H, T)):
        assert bias.shape == (H, T, T)
        grads = torch.autograd.grad((bias * weight).sum(), params) if params else ()
        results.append((bias.detach(), grads))
    (ref, ref_g), (got, got_g) = results
    torch.testing.assert_close(got, ref, rtol=1e-6, atol=1e-6)
    assert len(ref_g) == len(got_g) == {"alibi": 0, "t5_bias": 1, "kerple": 2}[name]
    for a, b in zip(ref_g, got_g):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)


def test_kerples_score_function_keeps_its_bound_like_the_mask_path() -> None:
    pos = Kerple(32, 4, True, 16)
    with torch.no_grad():
        pos.r1[0], pos.r2[1] = -1.0, 0.0
    pos.score_mod()
    assert pos.r1.min().item() == pytest.approx(Kerple.MIN) and pos.r2.min().item() == pytest.approx(Kerple.MIN)


def flex_pair(**kw) -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = build_model(make_cfg(d_model=32, n_heads=4, n_layers=2, **kw), VOCAB, 7, 24).eval()
    return model, torch.randint(0, VOCAB, (3, 24))


@needs_flex
@pytest.mark.parametrize("sharing", ["independent", "gqa"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "encoder"])
@pytest.mark.parametrize("name", list(BIAS))
def test_flex_path_equals_the_mask_path(name: str, causal: bool, sharing: str) -> None:
    """The whole model, FlexAttention (its eager CPU forward; torch has no CPU backward for it)
    against SDPA with the materialised bias. GQA: FlexAttention's own K/V head groups."""
    model, tokens = flex_pair(pos_enc=name, causal=causal, qkv_sharing=sharing)
    with torch.no_grad():
        model.flex = "off"
        assert isinstance(model.mask(tokens)[0], torch.Tensor)
        ref = model(tokens)
        model.flex = "on"
        scores, is_causal = model.mask(tokens)
        assert isinstance(scores, FlexScores) and not is_causal
        assert (scores.block_mask is not None) == causal
        got = model(tokens)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)


@needs_flex
def test_a_wrong_score_function_is_caught_by_the_comparison() -> None:
    """The equivalence above can fail: alibi's bias with the wrong sign differs."""
    model, tokens = flex_pair(pos_enc="alibi")
    with torch.no_grad():
        model.flex = "off"
        ref = model(tokens)
        model.flex = "on"
        model.pos._score = lambda score, b, h, q, kv: score + model.pos.slopes[h] * (q - kv).abs()
        got = model(tokens)
    assert (got - ref).abs().max() > 1e-3


@needs_flex
def test_flex_is_used_only_where_it_computes_the_same_thing() -> None:
    def uses_flex(model, tokens) -> bool:
        return isinstance(model.mask(tokens)[0], FlexScores)

    model, tokens = flex_pair(pos_enc="alibi")
    assert not uses_flex(model, tokens)            # auto: CUDA only
    model.flex = "on"
    assert uses_flex(model, tokens)
    for kw in ({"pos_enc": "rope"}, {"pos_enc": "deberta"},                   # no bias / a q,k-dependent one
               {"pos_enc": "alibi", "attention": "local"},                    # a pattern without flex
               {"pos_enc": "alibi", "qkv_sharing": {"name": "qk_shared", "mask_self": True}}):
        other, _ = flex_pair(**kw)
        other.flex = "on"
        assert not uses_flex(other, tokens), kw
    padded, _ = flex_pair(pos_enc="t5_bias", causal=False)
    padded.pad_id, padded.flex = 0, "on"
    assert not uses_flex(padded, tokens)            # key padding: the materialised mask
    dropout, _ = flex_pair(pos_enc="kerple", dropout=0.1)
    dropout.flex = "on"
    assert uses_flex(dropout, tokens) and not uses_flex(dropout.train(), tokens)  # no dropout in FlexAttention
    with pytest.raises(ValueError, match="auto, on, off"):
        build_model(make_cfg(pos_enc="alibi") | {"model": {**make_cfg()["model"], "flex": "always"}}, VOCAB, 7, 8)


@needs_flex
def test_flops_per_token_are_what_torch_counts_for_flex_attention() -> None:
    """FlexAttention computes every score SDPA does: torch's FLOP formula for its kernel (the one
    FlopCounterMode applies) equals the softmax pattern's own count, which the model's FLOPs use
    on either path."""
    from torch._higher_order_ops.flex_attention import flex_attention as flex_hop
    from torch.utils.flop_counter import flop_registry

    B, H, T, hd = 2, 4, 24, 8
    q = torch.empty(B, H, T, hd, device="meta")
    counted = flop_registry[flex_hop](q, q, q)
    assert counted == Softmax(H * hd, H, True).flops(T, B) * B * T
    model, _ = flex_pair(pos_enc="alibi")
    off = model.flops_per_token(24, 3)
    model.flex = "on"
    assert model.flops_per_token(24, 3) == off


# ------------------------------------------------------------------------------- model.size

def test_size_presets_are_near_their_nominal_parameter_counts() -> None:
    assert set(SIZES) == set(NOMINAL)
    for size, nominal in NOMINAL.items():
        cfg = compose_cfg([f"model.size={size}", "task=lm", "task.tokenizer=bytes"])
        task = build_task(cfg.task)
        assert task.vocab_size == 256
        with torch.device("meta"):
            model = assemble(cfg, task.vocab_size, task.n_classes, task.max_len, task.pad_id)
        assert (model.d_model, model.n_heads, model.n_layers) == tuple(SIZES[size].values())
        assert abs(model.num_params() - nominal) <= 0.25 * nominal, (size, model.num_params())


def test_size_is_resolved_in_the_config_and_an_explicit_value_wins() -> None:
    resolved = OmegaConf.to_container(compose_cfg(["model.size=m", "model.n_layers=3"]).model, resolve=True)
    assert (resolved["d_model"], resolved["n_heads"], resolved["n_layers"]) == (512, 8, 3)
    default = OmegaConf.to_container(compose_cfg([]).model, resolve=True)
    assert (default["size"], default["d_model"], default["n_heads"], default["n_layers"]) == (None, 64, 4, 2)


@pytest.mark.slow
def test_size_xs_trains_through_the_cli(tmp_path: Path) -> None:
    out = run_cli(["model.size=xs", "trainer=debug", "logger=none", "task.batch_size=8", "task.n_val=16",
                   "task.n_test=16", "measure.memory=false", f"hydra.run.dir={tmp_path / 'run'}"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    record = result(tmp_path / "run")
    assert record["status"] == "ok"
    assert {k: record["config"]["model"][k] for k in SIZES["xs"]} == SIZES["xs"]
    assert abs(record["metrics"]["params"] - NOMINAL["xs"]) <= 0.25 * NOMINAL["xs"]


# ------------------------------------------------------------------------------- gpu_check.sh

def test_the_dry_runs_compiled_model_and_batches_are_the_tiny_configs() -> None:
    """So that the dry run's compile finds the kernels of the compile test's (inductor's cache): the
    same model node, sequence length and batch size as the tiny config (ablate.compose.TINY)."""
    script = script_module("gpu_check")
    plan = script.make_plan(dry=True)
    dry = compose_cfg(script.lm_overrides(plan, plan.compile_shape, ["model.compile=true"]))
    tiny = compose_cfg([*TINY, "logger=none", "model.compile=true"])
    assert dry.model == tiny.model and dry.task.name == tiny.task.name
    assert (dry.task.seq_len, dry.task.batch_size) == (tiny.task.seq_len, tiny.task.batch_size)


@pytest.mark.slow
def test_gpu_check_dry_run_prints_the_table_with_every_section_and_option(tmp_path: Path) -> None:
    started = time.perf_counter()
    out = subprocess.run([str(REPO / "scripts" / "gpu_check.sh"), "--dry-run", "--out", str(tmp_path)],
                         cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=240)
    seconds = time.perf_counter() - started
    assert out.returncode == 0, (out.stdout[-3000:], out.stderr[-3000:])
    table = (tmp_path / "gpu_check.txt").read_text()
    assert table in out.stdout
    rows = json.loads((tmp_path / "gpu_check.json").read_text())
    assert {r["section"] for r in rows} == {"options", "memory", "flex", "compile", "ddp", "throughput"}
    assert not [r for r in rows if r["status"] == "failed"]
    checks = {r["check"]: r for r in rows}
    for group in ("qkv_sharing", "attention", "pos_enc", "norm", "ffn", "init", "task", "optim", "logger"):
        for option in sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml")):
            assert checks[f"{group}={option}"]["status"] == "ok", (group, option)
    for r in rows:  # what a CPU cannot run says so; the rest ran
        assert r["status"] == "ok" or "CUDA" in r["figures"], r
    flex = [r for r in rows if r["section"] == "flex" and r["status"] == "ok"]
    assert len(flex) == 6 and all(r["data"]["logits"] < 1e-4 for r in flex)
    assert table.splitlines()[-1].startswith(f"{len(rows) - 7} ok, 0 failed, 7 skipped")
    print(f"gpu_check.sh --dry-run: {seconds:.0f} s")
