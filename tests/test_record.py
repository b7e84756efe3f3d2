"""The typed record (``ablate.record``): the documented file is the code, records of every earlier
format still read, and a bad one is refused with every problem named."""

from __future__ import annotations

import json
import math
import re
from dataclasses import fields
from pathlib import Path

import pytest

from ablate.record import (SCHEMA, BudgetEntry, CurvePoint, FinetuneEntry, JobEntry, Metrics, Record, RecordError,
                           Score, TuneEntry, WandbEntry)

DOCS = Path(__file__).resolve().parent.parent / "docs" / "internals.md"


def _documented() -> dict:
    """docs/internals.md's result.json block, its ``// comments`` removed."""
    text = DOCS.read_text()
    section = text[text.index("### `result.json`"):text.index("### `sweep.json`")]
    block = section.split("```json\n", 1)[1].split("```", 1)[0]
    return json.loads(re.sub(r"//[^\n]*", "", block))


def test_the_documented_record_is_the_code() -> None:
    doc = _documented()
    assert set(doc) == {f.name for f in fields(Record)} - {"path", "sweep_dir"}
    flat = {k for k in doc["metrics"] if "@" in k}  # each length's figures again, derived from eval
    assert set(doc["metrics"]) - flat == {f.name for f in fields(Metrics)}
    assert set(doc["metrics"]["eval"]["16"]) == set(doc["metrics"]["val"]) == {f.name for f in fields(Score)}
    assert set(doc["metrics"]["history"][0]) == {f.name for f in fields(CurvePoint)}
    for key, cls in (("budget", BudgetEntry), ("tune", TuneEntry), ("finetune", FinetuneEntry), ("job", JobEntry),
                     ("wandb", WandbEntry)):
        assert set(doc[key]) == {f.name for f in fields(cls)}, key
    assert doc["schema"] == SCHEMA
    assert Record.from_json(doc).to_json() == doc  # read and written back: the same file


def test_a_record_round_trips_through_its_file(tmp_path: Path) -> None:
    record = Record(status="ok", overrides=["qkv_sharing=qk_shared", "seed=1"], config={"seed": 1},
                    metrics=Metrics(metric="accuracy", accuracy=0.5, loss=0.7, eval={"16": Score(0.5, 0.7, 64)},
                                    history=[CurvePoint(step=10, loss=0.9)], tokens_per_s=10.0, params=100),
                    budget=BudgetEntry(match="tokens", steps=12, baseline="qkv_sharing=independent",
                                       baseline_tokens=4096))
    path = record.write(tmp_path)
    data = json.loads(path.read_text())
    assert data["schema"] == SCHEMA and data["metrics"]["accuracy@16"] == 0.5 and data["metrics"]["loss@16"] == 0.7
    back = Record.read(tmp_path)
    assert back == record and back.path == path and back.metrics.eval["16"].count == 64
    assert back.seed == 1 and back.ok


#: records as earlier versions wrote them (from docs/internals.md at each step): the first format
#: (no schema, no history, budget, tune or timing), and the one before schema 2 (history, budget
#: without the baseline's totals, a running job's entry); every one reads, absent fields None
EARLIER = {
    "first": {
        "status": "ok", "overrides": ["qkv_sharing=qk_shared", "seed=1"], "choices": {"qkv_sharing": "qk_shared"},
        "experiment": {"name": "qkv_sharing", "baseline": "qkv_sharing=independent"}, "config": {"seed": 1},
        "metrics": {"metric": "token_accuracy", "accuracy": 0.91, "loss": 0.31,
                    "eval": {"16": {"accuracy": 0.91, "loss": 0.31}}, "tokens_per_s": 51234.0,
                    "step_time_s": {"min": 0.01, "median": 0.012, "max": 0.02}, "peak_memory_bytes": 1234567,
                    "memory_source": "cpu-accounting", "params": 12345, "wall_time_s": 12.3, "steps": 500},
        "error": None, "diverged_step": None,
        "wandb": {"project": "ablate", "group": "g", "name": "n", "dir": "d"},
        "job": {"num": 1, "dir": "/tmp/j", "sweep_dir": "/tmp"}},
    "before schema 2": {
        "status": "diverged", "overrides": ["ffn=swiglu", "seed=0"], "choices": {}, "experiment": {},
        "config": {"seed": 0}, "error": "non-finite loss at step 40", "diverged_step": 40,
        "metrics": {"metric": "accuracy", "accuracy": math.nan, "loss": math.inf, "params": 10,
                    "history": [{"step": 20, "tokens": 100, "flops": 1e6, "loss": 2.0, "accuracy": 0.1}],
                    "time_s": {"validate": 0.1}, "accuracy@16": math.nan, "loss@16": math.inf},
        "budget": {"match": "tokens", "steps": 40, "baseline": "ffn=gelu"}, "tune": None, "wandb": None,
        "job": {"num": 0, "dir": "/tmp/j0", "sweep_dir": "/tmp", "launcher": "basic", "started_at": 1.0,
                "slot_wait_s": 0.0, "slurm": None}},
}


@pytest.mark.parametrize("name", list(EARLIER))
def test_records_of_earlier_formats_still_read(name: str, tmp_path: Path) -> None:
    (tmp_path / "result.json").write_text(json.dumps(EARLIER[name]))
    record = Record.read(tmp_path)
    assert record.schema == 1 and record.status == EARLIER[name]["status"]
    assert record.overrides == EARLIER[name]["overrides"] and record.metrics.params is not None
    if name == "first":
        assert record.metrics.history == [] and record.budget is None and record.tune is None
        assert record.metrics.eval["16"].accuracy == 0.91 and record.wandb.id is None
    else:
        assert record.metrics.history[0].step == 20 and record.budget.baseline_tokens is None
        assert record.diverged_step == 40 and math.isinf(record.metrics.loss)


def test_a_bad_record_is_refused_naming_every_problem() -> None:
    data = json.loads(json.dumps(EARLIER["first"]))
    data["status"] = "done"
    data["metrics"]["accuracy"] = 1.5
    data["metrics"]["params"] = -3
    with pytest.raises(RecordError) as refused:
        Record.from_json(data)
    assert refused.value.problems == [
        "status='done' (expected one of ok, diverged, failed, interrupted)",
        "metrics.accuracy=1.5 (expected a number in [0, 1])",
        "metrics.params=-3 (expected an integer >= 0)"]
    with pytest.raises(ValueError, match="expected a JSON object, got list"):
        Record.from_json([1, 2])
    with pytest.raises(RecordError, match=r"budget.steps='many' \(expected an integer\)"):
        Record.from_json({**EARLIER["first"], "budget": {"match": "tokens", "steps": "many"}})
