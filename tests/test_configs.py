"""Every YAML in conf/ and experiments/ composes, and every composed default config validates."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import MISSING, fields
from pathlib import Path

import pytest
from conftest import cli_env, compose_cfg, records, run_cli
from omegaconf import OmegaConf

from ablate.compose import tiny_overrides
from ablate.config import CONFIG_GROUPS, ConfigError, config_problems, validate
from ablate.model import ModelSettings, build_model
from ablate.sweep import split_override_string

REPO = Path(__file__).resolve().parent.parent
CONF = REPO / "conf"
FIXTURES = REPO / "tests" / "fixtures"
GROUPS = [g for g in CONFIG_GROUPS if g != "experiment"]  # experiments: test_every_experiment_...



def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


#: options that only run together (DeepNet: the residual scaling and its init)
PARTNERS = {("norm", "deepnorm"): ["init=deepnet"], ("init", "deepnet"): ["norm=deepnorm"]}


@pytest.mark.slow  # 79 Hydra compositions, about 20 s in all (test_model and test_flops build every option in-process)
@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS for o in options(g)])
def test_every_group_option_composes_and_validates(group: str, option: str) -> None:
    overrides = [f"{group}={option}"]
    if group == "task" and (FIXTURES / option).is_dir():  # classify, tagging, each glue_<name>: the fixture of its name
        overrides.append(f"task.path={FIXTURES / option}")
    if group == "task" and option == "glue":
        overrides.append(f"task.path={FIXTURES / 'glue_sst2'}")
    overrides += PARTNERS.get((group, option), [])
    if group == "trainer" and option in ("gpu", "ddp"):
        cfg = compose_cfg(overrides)  # composes everywhere; validates only where CUDA exists
        OmegaConf.to_container(cfg, resolve=True)
        return
    validate(compose_cfg(overrides))


@pytest.mark.slow  # two Hydra compositions of a whole experiment: seconds each
@pytest.mark.parametrize("name", sorted(p.stem for p in (REPO / "experiments").glob("*.yaml")))
def test_every_experiment_composes_and_validates(name: str) -> None:
    cfg = compose_cfg([f"experiment={name}"])
    validate(cfg)
    assert cfg.experiment.name == name
    assert cfg.experiment.baseline or cfg.experiment.design, "an experiment names its baseline (a design's is its base)"
    cfg = compose_cfg([f"experiment={name}", "hydra.sweeper.params.seed=0"])  # sweep params are overridable


#: experiments that run fewer than 3 seeds by default, and why
FEWER_SEEDS = {"ladder": "3 rungs x 3 rows: 2 seeds keep its 18 runs within 15 minutes on 2 cores",
               "lr_transfer": "40 tuning runs come first: a second seed at each chosen lr keeps it within 15 minutes"}


def test_experiments_declare_sweeps_seeds_and_budget() -> None:
    for path in (REPO / "experiments").glob("*.yaml"):
        raw = OmegaConf.load(path)
        params = raw.hydra.sweeper.params
        if str(params.seed) == "auto":  # seeds in rounds: the experiment states its mde and cap; the rest it inherits
            assert raw.stats.mde > 0 and raw.stats.max_seeds >= raw.stats.min_seeds >= 3, path.name
            assert raw.get("defaults"), f"{path.name}: the rounds of an experiment its defaults name"
            continue
        expected = "0,1" if path.stem in FEWER_SEEDS else "0,1,2"
        assert str(params.seed) == expected, f"{path.name}: 3 seeds by default (fewer only in FEWER_SEEDS, with why)"
        if raw.experiment.get("design"):
            assert "baseline" not in raw.experiment, f"{path.name}: a design's baseline is its base row"
            continue
        for key, value in split_override_string(raw.experiment.baseline).items():
            assert value in str(params[key]).split(","), f"{path.name}: baseline is swept"


@pytest.mark.slow  # seconds: a Hydra composition per case
def test_invalid_combinations_are_named() -> None:
    cases = {
        "model.d_model=30": "not divisible",
        "pos_enc=rope model.d_model=12 model.n_heads=4": "even head dimension",
        "qkv_sharing=gqa qkv_sharing.kv_heads=3": "kv_heads=3 must divide",
        "pos_enc=learned task.eval_lengths=[256]": "cannot extrapolate",
        "optim.lr=0": "optim.lr=0",
        "model.n_layers=-1": "model.n_layers=-1",
        "qkv_sharing._target_=nonsense.Attention": "qkv_sharing._target_='nonsense.Attention' cannot be imported",
        "model.d_model=16.9": r"model.d_model=16.9 must be an integer > 0",
        "attention=linear pos_enc=alibi": "attention=linear cannot be combined with pos_enc=alibi",
        "attention=linear pos_enc=t5_bias": "attention=linear cannot be combined with pos_enc=t5_bias",
        "attention=linear pos_enc=kerple": "attention=linear cannot be combined with pos_enc=kerple",
        "attention=linear pos_enc=deberta": "attention=linear cannot be combined with pos_enc=deberta",
        "attention=linear qkv_sharing=qk_shared qkv_sharing.mask_self=true":
            "attention=linear cannot be combined with qkv_sharing=qk_shared qkv_sharing.mask_self=true",
        "attention=local attention.window=0": "attention.window=0 must be > 0",
        "attention=linear attention.feature_map=relu": "attention.feature_map='relu' must be one of 'elu'",
        "model.share_layers=3": "model.share_layers=3 is more than model.n_layers=2",
        "model.share_layers=some": "model.share_layers='some' must be",
    }
    for overrides, message in cases.items():
        with pytest.raises(ConfigError, match=message):
            validate(compose_cfg(overrides.split()))


def test_missing_task_path_is_named() -> None:
    problems = config_problems(compose_cfg(["task=classify"]))
    assert any("task.path" in p for p in problems), problems


@pytest.mark.skipif(__import__("importlib.util").util.find_spec("datasets") is not None,
                    reason="the datasets library is installed here")
def test_glue_without_path_or_datasets_is_named() -> None:
    problems = config_problems(compose_cfg(["task=glue"]))
    assert any("pip install -e '.[glue]'" in p for p in problems), problems


# ------------------------------------------------------------------ the trainer node, checked once

def test_lightnings_verdict_on_a_trainer_node_is_remembered_and_a_refusal_never_is(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A node Lightning accepted is not dry-built again (the cache says so, per node); a node it
    refuses is refused every time, and an unreadable cache only costs the check."""
    from ablate.config import ACCEPTED_TRAINERS, _trainer_key, _trainer_problems

    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path))
    cache = tmp_path / ACCEPTED_TRAINERS
    good = OmegaConf.to_container(compose_cfg(["trainer=debug"]).trainer)
    assert _trainer_problems(good) == [] and json.loads(cache.read_text()) == [_trainer_key(good)]
    assert _trainer_problems(good) == []  # remembered: the same list, not one more entry
    assert json.loads(cache.read_text()) == [_trainer_key(good)]

    bad = {**good, "accelerator": "abacus"}
    for _ in range(2):
        (problem,) = _trainer_problems(bad)
        assert "Lightning refuses these settings" in problem and "abacus" in problem
    assert json.loads(cache.read_text()) == [_trainer_key(good)]  # never remembered
    other = {**good, "max_steps": 7}
    assert _trainer_key(other) != _trainer_key(good) and _trainer_problems(other) == []
    assert len(json.loads(cache.read_text())) == 2

    cache.write_text("{not json")
    assert _trainer_problems(good) == [] and json.loads(cache.read_text()) == [_trainer_key(good)]


@pytest.mark.slow  # a process of its own: this one has imported Lightning long ago
def test_a_refused_config_never_imports_lightning(tmp_path: Path) -> None:
    """Lightning's import takes seconds: ``ablate`` refusing a model key does without it once the
    trainer node's verdict is known (here: from a run before it, which trains). The refusing process
    starts cold and ends through ablate.heap.quick_teardown (its objects frozen out of the interpreter's
    teardown); torch's and the model's imports ran untraced (ablate.heap.imports_untraced): two full
    collections in all, that one's and the exit's (six while torch's imports were traced)."""
    env = {**cli_env(), "ABLATE_CACHE_DIR": str(tmp_path / "cache")}
    tiny = tiny_overrides("trainer.max_steps=2", "logger=none")
    trained = run_cli([*tiny, "hydra.run.dir=run"], tmp_path, env=env)  # the verdict, from a warm process
    assert trained.returncode == 0 and records(tmp_path / "run")[0]["status"] == "ok", trained.stderr[-2000:]
    script = ("import atexit, gc, sys; atexit.register(lambda: print('LIGHTNING', 'pytorch_lightning' in sys.modules, "
              "'FROZEN', gc.get_freeze_count() > 0, 'FULL', gc.get_stats()[2]['collections'])); "
              "from ablate.cli import main; sys.argv = ['ablate', *sys.argv[1:]]; main()")
    out = subprocess.run([sys.executable, "-c", script, *tiny, "model.d_model=-1"], cwd=tmp_path, env=env, text=True,
                         capture_output=True, timeout=240)
    assert out.returncode == 2 and "model.d_model=-1" in out.stderr, out.stderr[-2000:]
    words = out.stdout.strip().splitlines()[-1].split()
    seen = dict(zip(words[::2], words[1::2]))
    assert seen["LIGHTNING"] == "False" and seen["FROZEN"] == "True" and int(seen["FULL"]) <= 3, out.stdout[-500:]


# ------------------------------------------------------------------ the model node, one default per key

def test_model_settings_defaults_are_what_config_yaml_gives() -> None:
    """Each model key has one default: ModelSettings' is config.yaml's, so a model node that leaves a
    key out (a plain dict, a user's own config tree) builds what the default config builds."""
    model = compose_cfg([]).model
    assert {f.name for f in fields(ModelSettings)} == set(model)
    defaults = {f.name: f.default for f in fields(ModelSettings) if f.default is not MISSING}
    assert defaults == {key: model[key] for key in defaults}


def test_a_model_key_that_is_not_a_setting_is_refused() -> None:
    cfg = OmegaConf.to_container(compose_cfg([]), resolve=True)
    cfg["model"]["biass"] = True
    assert any(p.startswith("model.biass") for p in config_problems(cfg)), config_problems(cfg)
    with pytest.raises(TypeError, match="biass"):
        ModelSettings.from_node(cfg["model"])


#: (overrides, trainable parameters, state_dict entries) of the model each config built before
#: ModelSettings built it (recorded from that code at vocabulary 256, max_len 64): unchanged for a user
BUILT = [
    ([], 136448, 25),
    (["model.size=xs"], 1062784, 55),
    (["model.bias=true"], 137216, 30),
    (["model.share_layers=all"], 86720, 25),
    (["model.share_layers=1", "model.n_layers=3"], 186176, 35),
    (["norm.placement=post"], 136320, 23),
    (["norm.placement=sandwich"], 136960, 33),
    (["qkv_sharing=gqa", "ffn=swiglu", "pos_enc=rope"], 124072, 24),
    (["model.embed_scale=sqrt_d", "pos_enc=sinusoidal"], 132352, 25),
]


@pytest.mark.parametrize("overrides,n_params,n_entries", BUILT, ids=[" ".join(o) or "default" for o, _, _ in BUILT])
def test_composed_config_builds_the_model_it_always_did(overrides: list[str], n_params: int, n_entries: int) -> None:
    model = build_model(compose_cfg(overrides), 256, 256, 64)
    assert (model.num_params(), len(model.state_dict())) == (n_params, n_entries)


def test_a_composition_asked_for_again_is_a_copy_the_caller_may_change(tmp_path: Path, monkeypatch) -> None:
    """``ablate.compose.compose`` composes a config once per overrides, working directory and state of
    the config files; each caller gets its own copy; a config file changed since is composed anew."""
    import os
    from collections import OrderedDict

    from ablate import compose as composing
    from ablate.paths import CONF_DIR

    monkeypatch.setattr(composing, "_composed", OrderedDict())  # this test's compositions only
    overrides = ["model.d_model=24", "seed=3"]
    first = compose_cfg(overrides)
    again = compose_cfg(overrides)
    assert again is not first and OmegaConf.to_container(again) == OmegaConf.to_container(first)
    first.model.d_model = 8  # a caller's change stays its own
    assert compose_cfg(overrides).model.d_model == 24
    assert len(composing._composed) == 1

    monkeypatch.chdir(tmp_path)  # another working directory: Hydra's runtime node says so
    here = compose_cfg(overrides, hydra_config=True)
    assert here.hydra.runtime.cwd == str(tmp_path) and len(composing._composed) == 2

    option = CONF_DIR / "ffn" / "gelu.yaml"  # touched, unchanged: a composition made before is not used
    stat = option.stat()
    try:
        os.utime(option, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
        compose_cfg(overrides)
        assert len(composing._composed) == 3
    finally:
        os.utime(option, ns=(stat.st_atime_ns, stat.st_mtime_ns))
