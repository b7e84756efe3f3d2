"""One run on two CPU processes through Lightning's DDP (gloo): one record, one wandb run, and a
test evaluation gathered across the ranks that equals a single process's evaluation of the same weights."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from conftest import REPO, records, run_cli
from omegaconf import OmegaConf

from ablate.compose import tiny_overrides
from ablate.data.base import IGNORE
from ablate.run import CHECKPOINT
from ablate.train import build

pytestmark = pytest.mark.slow  # two DDP ranks through the real `ablate` CLI


def checkpointed(run_dir: Path, record: dict):
    """(config, data, Lightning module) of a run's record, the module holding its kept checkpoint's weights."""
    cfg = OmegaConf.create(record["config"])
    data, _, module = build(cfg)
    module.load_state_dict(torch.load(run_dir / CHECKPOINT, map_location="cpu", weights_only=False)["state_dict"])
    return cfg, data, module


def test_cpu_ddp_gathers_the_evaluation_of_both_ranks(tmp_path: Path, tiny: list[str]) -> None:
    # under μP (its per-parameter learning rates and multipliers must survive DDP and a checkpoint)
    out = run_cli([*tiny, "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2", "trainer.max_steps=10",
                   "task.n_test=60", "checkpoint.keep=true", "hydra.run.dir=run",
                   "model.parametrization=mup", "model.mup_base_width=8"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    (record,) = records(tmp_path / "run")  # rank 0 alone writes the record and the wandb run
    assert record["status"] == "ok" and record["metrics"]["steps"] == 10
    assert len(list((tmp_path / "run" / "wandb").glob("offline-run-*"))) == 1
    # two ranks' batches per step: the record counts the tokens both trained on
    assert record["metrics"]["tokens"] == 10 * 2 * 8 * 64

    cfg, data, module = checkpointed(tmp_path / "run", record)
    trainer = pl.Trainer(accelerator="cpu", devices=1, precision=cfg.trainer.precision, logger=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.validate(module, dataloaders=data.test_dataloader(), verbose=False)
    single = module.eval_results()
    gathered = record["metrics"]["eval"]
    assert single.keys() == gathered.keys()
    for length, e in single.items():
        assert gathered[length]["count"] == e["count"] == 60 * 64  # every example once, none twice
        assert gathered[length]["accuracy"] == pytest.approx(e["accuracy"], abs=1e-9)
        assert gathered[length]["loss"] == pytest.approx(e["loss"], rel=1e-5)


def test_cpu_ddp_evaluates_a_seq2seq_test_split_of_one_batch_on_both_ranks(tmp_path: Path) -> None:
    """An encoder–decoder on your own parallel text under DDP, its test split 8 rows in one batch: the
    ranks share it by rows (``rank_share``; rank 1 used to stop on an empty loader, and the job failed
    with gloo's "connection closed by peer"). Every target token is counted once; the teacher-forced
    figures are one process's on the same weights, and the decoded texts of both ranks give BLEU and
    chrF. (The decodings themselves are not compared: a barely trained model's near-ties flip with the
    ranks' last-digit drift.)"""
    out = run_cli([*tiny_overrides("task=seq2seq_file"), "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2",
                   "trainer.max_steps=150", "optim.lr=3e-3", "eval.every=0",
                   f"task.path={REPO / 'tests' / 'fixtures' / 'seq2seq_file'}", "task.seq_len=48",
                   "model.arch=encoder_decoder", "logger=none", "checkpoint.keep=true", "hydra.run.dir=run"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    (record,) = records(tmp_path / "run")
    assert record["status"] == "ok", record["error"]

    _, data, module = checkpointed(tmp_path / "run", record)
    batches = data.eval_batches(48, "test")
    assert len(batches) == 1 and len(batches[0][0]) == 8
    single = module.evaluate(batches)
    (gathered,) = record["metrics"]["eval"].values()
    assert gathered["count"] == single["count"] == int((batches[0][1] != IGNORE).sum())  # each token once
    assert single["token_accuracy"] > 0
    for key in ("token_accuracy", "loss"):
        assert gathered[key] == pytest.approx(single[key], rel=1e-3), key
    assert 0 <= gathered["bleu"] <= 100 and 0 < gathered["chrf"] <= 100
