"""What a run is credited with: tokens and FLOPs under gradient accumulation, the value a sweeper
optimises, the early-loss point. Jobs run in process through the real Lightning trainer."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import IN_PROCESS, compose_cfg
from omegaconf import DictConfig

from ablate.compose import tiny_overrides
from ablate.job import Job
from ablate.record import Record
from ablate.run import run_job
from ablate.measure import job_cost

TINY = tiny_overrides(*IN_PROCESS)


def config(*overrides: str) -> DictConfig:
    return compose_cfg([*TINY, *overrides])


def run(tmp_path: Path, *overrides: str) -> dict:
    """The run's metrics as its result.json holds them."""
    job = Job(tmp_path / "_".join(overrides).replace("=", "-"), list(overrides), {}, None, None)
    record = run_job(config(*overrides), job)
    assert record.status == "ok", record.error
    return record.to_json()["metrics"]


@pytest.mark.slow  # trains two tiny runs in process (seconds)
def test_accumulated_batches_count_in_tokens_flops_and_the_curve(tmp_path: Path, one_thread) -> None:
    one = run(tmp_path, "trainer.max_steps=4")
    two = run(tmp_path, "trainer.max_steps=4", "+trainer.accumulate_grad_batches=2")
    assert one["steps"] == two["steps"] == 4
    assert one["tokens"] == 4 * 4 * 16 and two["tokens"] == 2 * one["tokens"]
    assert two["train_flops"] == pytest.approx(2 * one["train_flops"])
    assert [p["tokens"] for p in two["history"]] == [2 * p["tokens"] for p in one["history"]]
    assert two["history"][-1]["flops"] == pytest.approx(two["train_flops"])


def test_a_budget_step_counts_every_accumulated_batch() -> None:
    one = job_cost(config())
    two = job_cost(config("+trainer.accumulate_grad_batches=2"))
    assert two["tokens_per_step"] == 2 * one["tokens_per_step"] == 2 * 4 * 16
    assert two["flops_per_token"] == one["flops_per_token"]


# ---------------------------------------------------------------------------------- early loss

def test_early_loss_is_read_at_the_configured_fraction_of_training() -> None:
    from ablate.curve import curve_steps

    assert curve_steps(800, 0) == [200, 800] and curve_steps(800, 0, 0.125) == [100, 800]
    assert curve_steps(8, 4, 0.5) == [4, 8]


@pytest.mark.parametrize("fraction", [0, 1, 1.5, -0.1])
def test_an_early_fraction_outside_the_run_is_refused(fraction: float) -> None:
    from ablate.config import config_problems

    problems = config_problems(config(f"eval.early_fraction={fraction}"))
    assert any(p.startswith(f"eval.early_fraction={fraction}") and "> 0" in p and "< 1" in p for p in problems), problems


@pytest.mark.slow  # trains a tiny run in process (seconds)
def test_the_record_and_the_caption_say_where_early_loss_was_read(tmp_path: Path, one_thread) -> None:
    from ablate.report import build_table

    metrics = run(tmp_path, "trainer.max_steps=8", "eval.early_fraction=0.125")
    assert metrics["early_loss_step"] == 1 and metrics["early_loss"] == metrics["history"][0]["loss"]
    record = next(tmp_path.rglob("result.json"))
    caption = build_table([Record.read(record)]).caption()
    assert "validation loss at 12.5% of training (eval.early_fraction; within the run)" in caption
    assert "Narang" not in caption
