"""Loggers beside wandb: ``logger=tensorboard``, ``logger=mlflow``, several at once, and the sweep's
table in them. Real Lightning loggers, real TensorBoard event files (read back with TensorBoard's
EventAccumulator) and a real MLflow sqlite store (read back with ``MlflowClient``); offline."""

from __future__ import annotations

from pathlib import Path

import mlflow  # noqa: F401 - imported here, at collection: its import runs `uname -p` once (platform.processor),
import pytest  # a process the fast tier's guard refuses inside a test; ablate's import of it is then cached
from conftest import IN_PROCESS, compose_cfg

from ablate.compose import tiny_overrides
from ablate.config import config_problems
from ablate.job import Job
from ablate.curve import curve_steps
from ablate.run import run_job
from ablate.loggers import logger_names, mlflow_key, safe_name

TINY = tiny_overrides(*IN_PROCESS, "trainer.max_steps=6", "optim.warmup_steps=2", without=["logger"])  # a logger per test


def scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar series of a TensorBoard run directory: ``{tag: [(step, value), ...]}``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def mlflow_client(home: Path):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=f"sqlite:///{(home / 'mlflow.db').resolve()}")


def test_logger_options_combine_and_the_old_single_name_still_reads() -> None:
    assert logger_names(compose_cfg(["logger=[wandb,tensorboard]"]).logger) == ["wandb", "tensorboard"]
    assert logger_names(compose_cfg(["logger=[tensorboard,mlflow,csv]"]).logger) == ["tensorboard", "mlflow", "csv"]
    assert [logger_names(compose_cfg([f"logger={n}"]).logger) for n in ("wandb", "csv", "none")] == \
        [["wandb"], ["csv"], []]
    assert compose_cfg([]).logger.name == "wandb"  # the default, and logger.name's readers, unchanged
    assert logger_names({"name": "csv"}) == ["csv"]  # a logger node from before `use` (an old record)


BAD = {
    "logger=mlflow logger.mlflow.tracking_uri=./mlruns":
        "logger.mlflow.tracking_uri='./mlruns': MLflow refuses a plain directory (its file store); "
        "valid: null (sqlite in the sweep's directory), sqlite:///PATH.db, http(s)://HOST",
    "+logger.use.neptune=true": "logger: 'neptune' is not a logger; valid: wandb, csv, tensorboard, mlflow, none",
    "logger.use=3": "logger.use=3 must be a mapping or null",
    "+logger.use.csv=yes": "logger.use.csv='yes' must be true or false; valid loggers: wandb, csv, tensorboard, mlflow",
}


@pytest.mark.parametrize("args,named", BAD.items(), ids=list(BAD))
def test_a_bad_logger_is_named_before_training(args: str, named: str) -> None:
    problems = config_problems(compose_cfg([*TINY, *args.split()]))
    assert any(named in p for p in problems), problems


@pytest.mark.slow  # in-process, but MLflow's run tags start `git` (its source-version context)
def test_tensorboard_and_mlflow_log_every_series_against_the_step_grouped_by_sweep_and_variant(
        tmp_path: Path, one_thread) -> None:
    sweep = tmp_path / "sweep"
    overrides = [*TINY, "logger=[csv,tensorboard,mlflow]", "ffn=relu", "seed=3"]
    job = Job(sweep / "job0", overrides, {"ffn": "relu"}, str(sweep), 0)
    record = run_job(compose_cfg(overrides), job)
    assert record.status == "ok", record.error
    points = curve_steps(6, 2)
    assert points == [2, 4, 6]

    # TensorBoard: <sweep>/tensorboard/<variant>/seed=<seed>, val/* at each curve point, train/loss each step
    (run_dir,) = [d for d in (sweep / "tensorboard").glob("*/seed=3")]
    assert run_dir.parent.name == safe_name(job.variant)
    series = scalars(run_dir)
    assert [s for s, _ in series["val/loss"]] == points
    assert [v for _, v in series["val/loss"]] == pytest.approx([p.loss for p in record.metrics.history])
    assert len(series["train/loss"]) == 6  # log_every_n_steps=1 (trainer=debug)
    length = next(iter(record.metrics.eval))
    assert series[f"test/loss@{length}"] == [(6, pytest.approx(record.metrics.eval[length].loss))]

    # MLflow: experiment = the sweep's group, run name = the variant, tags; the same series
    client = mlflow_client(sweep)
    (experiment,) = [e for e in client.search_experiments() if e.name != "Default"]
    assert experiment.name == record.wandb.group if record.wandb else experiment.name.startswith("sweep-")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == job.variant and run.data.tags["seed"] == "3"
    assert run.data.tags["variant"] == job.variant and run.data.tags["job_dir"] == str(job.dir)
    assert run.data.params["ffn"] == "relu"
    history = client.get_metric_history(run.info.run_id, "val/loss")
    assert [(m.step, m.value) for m in history] == [(s, pytest.approx(v)) for s, v in series["val/loss"]]
    test_key = mlflow_key(f"test/loss@{length}")
    assert test_key == f"test/loss_at_{length}" and run.data.metrics[test_key] == pytest.approx(
        record.metrics.eval[length].loss)
    assert (job.dir / "mlflow" / "run_id").read_text().strip() == run.info.run_id
    assert (job.dir / "metrics.csv").is_file()  # and csv beside them


def test_the_sweeps_table_goes_to_tensorboard_and_mlflow_and_problems_come_back(tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from ablate.report.loggers import log_table

    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "table.md").write_text("| variant | loss |\n|---|---|\n| relu | 1.23 |\n")
    (sweep / "table.csv").write_text("variant,loss\nrelu,1.23\n")
    figure = plt.figure(figsize=(2, 1))
    figure.savefig(sweep / "table.png")
    plt.close(figure)
    outputs = {"markdown": sweep / "table.md", "csv": sweep / "table.csv", "png": sweep / "table.png"}
    logger = {"name": "mlflow", "use": {"tensorboard": True, "mlflow": True}}
    for _ in range(2):  # the sweep's end, then `ablate-table --save`: one table run each
        assert log_table(None, sweep, outputs, logger, group="ffn-sweep") == []

    events = EventAccumulator(str(sweep / "tensorboard" / "table"), size_guidance={"tensors": 0, "images": 0})
    events.Reload()
    (text,) = {e.tensor_proto.string_val[0].decode() for e in events.Tensors("table/text_summary")}
    assert "| relu | 1.23 |" in text
    assert events.Tags()["images"] == ["figures/table"]

    client = mlflow_client(sweep)
    experiment = client.get_experiment_by_name("ffn-sweep")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == "table" and run.data.tags["job_type"] == "table"
    assert sorted(a.path for a in client.list_artifacts(run.info.run_id)) == ["table.csv", "table.md", "table.png"]
    local = Path(client.download_artifacts(run.info.run_id, "table.md", str(tmp_path)))
    assert local.read_text() == (sweep / "table.md").read_text()

    # never raises: a sweep directory that is a file, an MLflow URI it refuses, each one line
    problems = log_table(None, sweep / "table.md", outputs, logger, group="g")
    assert problems and all("\n" not in p for p in problems), problems
    bad = {**logger, "mlflow": {"tracking_uri": "nosuchscheme://x"}}
    (problem,) = log_table(None, sweep, outputs, bad, group="g")
    assert problem.startswith("the mlflow table (")
