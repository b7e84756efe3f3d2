"""One default per key: each settings class's defaults are conf/config.yaml's, so that reading a node
through its class (``ablate.settings.read_settings``) and composing the config agree, and the
planner, the job and its record read the run-level settings once (``RunSettings``)."""

from __future__ import annotations

from dataclasses import MISSING, fields

import pytest
from conftest import compose_cfg
from omegaconf import OmegaConf

from ablate.settings import (BudgetSettings, CheckpointSettings, EvalSettings, ExperimentSettings, FinetuneSettings,
                             RunSettings, TuneSettings, read_settings)

CLASSES = {"experiment": ExperimentSettings, "eval": EvalSettings, "budget": BudgetSettings,
           "checkpoint": CheckpointSettings, "tune": TuneSettings, "finetune": FinetuneSettings}


def _default(f) -> object:
    if f.default is not MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not MISSING else MISSING


@pytest.mark.parametrize("node", list(CLASSES))
def test_a_settings_class_defaults_are_the_configs(node: str) -> None:
    composed = OmegaConf.to_container(compose_cfg([]), resolve=True)[node]
    cls = CLASSES[node]
    assert set(composed) <= {f.name for f in fields(cls)}, f"{node}: keys the class does not name"
    for f in fields(cls):
        assert f.name in composed, f"{node}.{f.name}: a default the config does not state"
        assert composed[f.name] == _default(f), (node, f.name, composed[f.name], _default(f))


def test_run_settings_read_a_config_once_with_its_values() -> None:
    cfg = compose_cfg(["tune.lr=[1e-3,1e-2]", "tune.rungs=smallest", "budget.match=tokens_per_param",
                       "budget.tokens_per_param=0.5", "eval.every=7", "checkpoint.keep=true", "experiment=ladder"])
    settings = RunSettings.of(cfg)
    assert settings.tune.lr == [1e-3, 1e-2] and settings.tune.rungs == "smallest"
    assert settings.budget == BudgetSettings(match="tokens_per_param", tokens_per_param=0.5)
    assert settings.eval.every == 7 and settings.checkpoint.keep is True
    assert settings.experiment.name == "ladder"
    # a node without a key (a config from before it, a user's own config tree) reads the class's default
    assert read_settings(TuneSettings, {"lr": [0.1]}) == TuneSettings(lr=[0.1])
    assert RunSettings.of({}) == RunSettings()
