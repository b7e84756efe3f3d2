"""experiment=three_projections (Kayyam et al. 2026, Table 1) composes and validates for every job
of its sweep, and the digit tasks' ``n_values`` option: today's behaviour by default, correct
targets otherwise, bad values rejected with the valid range named. No training."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import compose_cfg
import torch
from omegaconf import OmegaConf

import ablate
from ablate.config import config_problems
from ablate.data.base import build_task, train_generator

CONF = Path(ablate.__file__).resolve().parent / "conf"
DIGIT_TASKS = ["reverse", "sort", "sub", "swap", "copy"]
VARIANTS = ["independent", "qk_shared", "kv_shared", "qkv_shared"]



def reference(name: str, xs: list[int], n_values: int) -> list[int]:
    """The paper's definitions, written out on a plain list."""
    T, h = len(xs), len(xs) // 2
    return {"reverse": xs[::-1], "sort": sorted(xs), "sub": [n_values - 1 - x for x in xs],
            "swap": xs[T - h:] + xs[h:T - h] + xs[:h], "copy": list(xs)}[name]


def task_node(name: str, **settings) -> dict:
    node = OmegaConf.to_container(OmegaConf.load(CONF / "task" / f"{name}.yaml"))
    return {**node, **settings}


# ---------------------------------------------------------------------------- the experiment
def test_sweep_is_five_tasks_by_four_variants_with_task_columns() -> None:
    raw = OmegaConf.load(CONF / "experiment" / "three_projections.yaml")
    params = raw.hydra.sweeper.params
    assert sorted(str(params.task).split(",")) == sorted(DIGIT_TASKS)
    assert sorted(str(params.qkv_sharing).split(",")) == sorted(VARIANTS)
    assert str(params.seed) == "0,1,2"
    assert raw.experiment.columns == "task"
    assert raw.experiment.baseline == "qkv_sharing=independent"
    assert sorted(raw.experiment.labels) == sorted(f"qkv_sharing={v}" for v in VARIANTS)


@pytest.mark.slow  # seconds each: every job of the sweep
@pytest.mark.parametrize("task", DIGIT_TASKS)
def test_every_job_of_the_sweep_validates(task: str) -> None:
    for variant in VARIANTS:
        cfg = compose_cfg(["experiment=three_projections", f"task={task}", f"qkv_sharing={variant}"])
        assert config_problems(cfg) == [], (task, variant)
        # the experiment's sizes win over the task YAML's own (experiment is applied last)
        assert (cfg.task.seq_len, cfg.task.batch_size, cfg.task.n_values) == (64, 32, 10)
        assert (cfg.model.d_model, cfg.trainer.max_steps) == (32, 280)
        assert cfg.pos_enc.max_len == 64


# ---------------------------------------------------------------------------- n_values
@pytest.mark.parametrize("name", DIGIT_TASKS)
def test_default_keeps_the_ten_digits(name: str) -> None:
    task = build_task(task_node(name, seq_len=12, batch_size=8))
    assert (task.n_values, task.vocab_size, task.n_classes) == (10, 10, 10)
    # the very batches of the stream before n_values existed: randint(0, 10) from the same generator
    g = train_generator(name, 3)
    x = torch.randint(0, 10, (8, 12), generator=g)
    tokens, targets = next(task.train_batches(3))
    assert torch.equal(tokens, x)
    assert [reference(name, row, 10) for row in x.tolist()] == targets.tolist()


@pytest.mark.parametrize("name", DIGIT_TASKS)
@pytest.mark.parametrize("n_values", [2, 37])
def test_n_values_sets_range_vocab_and_targets(name: str, n_values: int) -> None:
    task = build_task(task_node(name, seq_len=9, batch_size=16, n_test=20, n_values=n_values))
    assert (task.vocab_size, task.n_classes) == (n_values, n_values)
    batches = [next(task.train_batches(0))] + task.eval_batches(9)
    seen = torch.cat([tokens.flatten() for tokens, _ in batches])
    assert int(seen.min()) >= 0 and int(seen.max()) == n_values - 1  # 176 draws reach the top value
    for tokens, targets in batches:
        assert tokens.shape == targets.shape and tokens.shape[1] == 9
        for xs, ys in zip(tokens.tolist(), targets.tolist()):
            assert ys == reference(name, xs, n_values)


def test_sub_with_five_values_by_hand() -> None:
    from ablate.data.digits import Sub

    assert Sub.target(torch.tensor([[0, 1, 2, 3, 4]]), 5).tolist() == [[4, 3, 2, 1, 0]]
    assert Sub.target(torch.tensor([[0, 9]])).tolist() == [[9, 0]]  # default: 9 - x


@pytest.mark.parametrize("value,message", [
    (1, "task.n_values=1 must be >= 2"),
    (0, "task.n_values=0 must be >= 2"),
    (-3, "task.n_values=-3 must be >= 2"),
    (2.5, "task.n_values=2.5 must be an integer >= 2"),
    (True, "task.n_values=True must be an integer >= 2"),
    ("ten", "task.n_values='ten' must be an integer >= 2"),
])
def test_bad_n_values_name_the_valid_range(value, message: str) -> None:
    with pytest.raises(ValueError) as error:
        build_task(task_node("reverse", n_values=value))
    assert message in str(error.value)


def test_bad_n_values_stop_the_config_check() -> None:
    problems = config_problems(compose_cfg(["experiment=three_projections", "task=swap", "task.n_values=1"]))
    assert problems == ["task.n_values=1 must be >= 2"], problems
    assert config_problems(compose_cfg(["task=swap", "task.n_values=2"])) == []
