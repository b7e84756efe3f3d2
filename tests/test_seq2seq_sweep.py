"""The three families through the CLI: a FLOPs-matched sweep on a seq2seq task, its plan, its records,
its checkpoints and its table."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from conftest import records, run_cli

from ablate.data import build_task
from ablate.model import build_model
from ablate.model.seq2seq import EncoderDecoder


@pytest.mark.slow
def test_the_three_families_sweep_flops_matched_and_end_in_their_table(tmp_path: Path, tiny: list[str]) -> None:
    sweep = tmp_path / "sweep"
    args = ["-m", "task=add", "model.arch=decoder,prefix_lm,encoder_decoder", "budget.match=flops", *tiny,
            "model.n_layers=2", "trainer.max_steps=12", "task.eval_lengths=[22]", "pos_enc=rope", "checkpoint.every_n_steps=4", "checkpoint.keep=true",
            "logger=csv", f"hydra.sweep.dir={sweep}"]
    plan = run_cli([*args, "--plan"], tmp_path)
    assert plan.returncode == 0, plan.stderr[-3000:]
    assert all(f"model.arch={arch}" in plan.stdout for arch in ("decoder", "prefix_lm", "encoder_decoder"))
    assert not sweep.exists() or not list(sweep.rglob("result.json"))

    out = run_cli(args, tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    recs = {r["config"]["model"]["arch"]: r for r in records(sweep)}
    assert set(recs) == {"decoder", "prefix_lm", "encoder_decoder"}
    for arch, record in recs.items():
        metrics = record["metrics"]
        assert record["status"] == "ok", record.get("error")
        assert metrics["metric"] == "exact_match"
        for length in ("16", "22"):  # the training length, and longer numbers (6 digits, not 4)
            assert 0 <= metrics["eval"][length]["accuracy"] <= 1 and 0 <= metrics["eval"][length]["token_accuracy"] <= 1
        assert metrics["eval"]["22"]["count"] > metrics["eval"]["16"]["count"]
    decoder, enc_dec = recs["decoder"]["metrics"], recs["encoder_decoder"]["metrics"]
    assert enc_dec["params"] > 1.8 * decoder["params"]  # a second stack and cross-attention
    assert enc_dec["flops_per_token"] > decoder["flops_per_token"]
    assert enc_dec["steps"] < decoder["steps"] == 12  # the FLOPs budget: the dearer family trains fewer steps
    assert abs(enc_dec["train_flops"] / decoder["train_flops"] - 1) < 0.2

    with (sweep / "table.csv").open() as f:
        rows = {row["variant"]: row for row in csv.DictReader(f)}
    samples = recs["prefix_lm"]["metrics"]["samples"]
    assert len(samples) == 4 and all(s["source"].count("+") == 1 and s["target"].endswith("$") for s in samples)
    page = (sweep / "report.html").read_text()
    assert page.count('id="sample-table"') == 1 and all(f"<code>{s['source']}</code>" in page for s in samples)
    assert list(rows) == ["decoder", "prefix_lm", "encoder_decoder"]
    assert {row["metric"] for row in rows.values()} == {"exact_match"}
    assert rows["encoder_decoder"]["steps"] == str(enc_dec["steps"])
    assert "exact\\_match on the test split" in (sweep / "table.md").read_text()  # Markdown escapes the _

    # the kept checkpoint of the encoder–decoder loads into the model its record describes
    job_dir = next(p.parent for p in sweep.rglob("result.json")
                   if json.loads(p.read_text())["config"]["model"]["arch"] == "encoder_decoder")
    cfg = OmegaConf.create(recs["encoder_decoder"]["config"])
    task = build_task(cfg.task)
    model = build_model(cfg, task.vocab_size, task.n_classes, task.max_len, task.pad_id, task.layout)
    state = torch.load(job_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["state_dict"]
    model.load_state_dict({k.removeprefix("model."): v for k, v in state.items()})
    assert isinstance(model, EncoderDecoder)
