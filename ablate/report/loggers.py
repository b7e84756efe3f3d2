"""A sweep's table in the loggers beside wandb (``logger=tensorboard``, ``logger=mlflow``): what the
sweep's end and ``ablate-table`` call after writing the table's files (wandb has its own table run:
``ablate.report.publish.log_to_wandb``).

* TensorBoard: the run ``table`` beside the jobs' runs (``<sweep dir>/tensorboard/table``): the
  table as markdown text (``table``) and each figure as an image (``figures/<name>``).
* MLflow: a run named ``table`` (tag ``job_type=table``) in the sweep's experiment, the table's files
  as its artifacts; the same run for every table of the sweep (its id kept in
  ``<sweep dir>/mlflow/table_run_id``), so a later ``ablate-table`` replaces the files.

:func:`log_table` never raises: what could not be logged comes back as one line each.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from ablate.console import describe_error
from ablate.results import write_text_atomic
from ablate.loggers import LoggerPlace, _file_lock, logger_names

#: the keys of ``save_outputs``'s files that are figures (logged as images)
FIGURES = ("png", "curves", "lr")


def log_table(table: Any, sweep_dir: str | Path, outputs: Mapping[str, str | Path] | None = None,
              logger: Mapping[str, Any] | None = None, group: str | None = None) -> list[str]:
    """Log ``table`` (a ``SweepTable``/``LadderTable``) to the sweep's TensorBoard and MLflow, as its
    ``logger`` node names them (None: the node of the sweep's records). ``outputs``: the files
    ``save_outputs`` wrote (``{"markdown": table.md, "png": ..., ...}``; None or a missing
    markdown: the table's markdown is rendered here). ``group``: the MLflow experiment (None: the
    jobs' own, from the records). Returns the problems, one line each (empty: all logged)."""
    problems: list[str] = []
    try:
        sweep_dir = Path(sweep_dir)
        if logger is None or group is None:  # the records the table was built from, else read here
            sweep = getattr(table, "sweep", None)
            found_logger, found_group = _from_records(sweep.records if sweep is not None else None, sweep_dir)
            logger, group = logger if logger is not None else found_logger, group or found_group
        names = logger_names(logger)
        files = {k: Path(v) for k, v in (outputs or {}).items() if v is not None and Path(v).is_file()}
        markdown = files["markdown"].read_text(encoding="utf-8") if "markdown" in files else _markdown(table)
        place = LoggerPlace(home=sweep_dir, group=group or sweep_dir.resolve().name, variant="table", seed=0)
    except Exception as error:  # noqa: BLE001 - never raises: named instead
        return [f"the table for the loggers ({describe_error(error)})"]
    for name, log in (("tensorboard", _tensorboard), ("mlflow", _mlflow)):
        if name in names:
            try:
                log(markdown, files, place, (logger.get(name) or {}))
            except Exception as error:  # noqa: BLE001
                problems.append(f"the {name} table ({describe_error(error)})")
    return problems


def _from_records(records: list[Any] | None, sweep_dir: Path) -> tuple[dict[str, Any], str | None]:
    """The ``logger`` node and the group (MLflow's experiment) of a sweep's jobs, from their records
    (None: the sweep directory's, read here)."""
    from omegaconf import OmegaConf

    from ablate.loggers import sweep_group
    from ablate.sweep import load_sweep_records

    for record in load_sweep_records(sweep_dir) if records is None else records:
        logger, experiment = record.config.get("logger"), record.config.get("experiment")
        if isinstance(logger, Mapping):
            name = experiment.get("name") if isinstance(experiment, Mapping) else None
            cfg = OmegaConf.create({"experiment": {"name": name}})
            return dict(logger), sweep_group(cfg, record.job.sweep_dir or str(sweep_dir))
    return {}, None


def _markdown(table: Any) -> str:
    from ablate.report.formats import to_markdown

    return to_markdown(table)


def _tensorboard(markdown: str, files: Mapping[str, Path], place: LoggerPlace, settings: Mapping[str, Any]) -> None:
    import matplotlib.image
    from torch.utils.tensorboard import SummaryWriter

    root = Path(settings.get("save_dir") or place.tensorboard_dir)
    writer = SummaryWriter(log_dir=str(root / "table"))
    try:
        writer.add_text("table", markdown, global_step=0)
        for key, path in files.items():
            if key in FIGURES or path.suffix == ".png":
                image = matplotlib.image.imread(str(path))[..., :3]  # RGBA -> RGB, floats in [0, 1]
                writer.add_image(f"figures/{path.stem}", image, global_step=0, dataformats="HWC")
    finally:
        writer.close()


def _mlflow(markdown: str, files: Mapping[str, Path], place: LoggerPlace, settings: Mapping[str, Any]) -> None:
    import logging

    from mlflow import MlflowClient

    logging.getLogger("mlflow").setLevel(logging.ERROR)
    logging.getLogger("alembic").setLevel(logging.ERROR)
    uri = settings.get("tracking_uri") or place.mlflow_uri
    experiment_name = settings.get("experiment") or place.group
    id_file = place.home / "mlflow" / "table_run_id"
    place.home.mkdir(parents=True, exist_ok=True)
    with _file_lock(place.home / ".mlflow.lock"):
        client = MlflowClient(tracking_uri=uri)
        experiment = client.get_experiment_by_name(experiment_name)
        experiment_id = experiment.experiment_id if experiment else client.create_experiment(
            experiment_name, artifact_location=place.mlflow_artifacts.as_uri())
        run_id = id_file.read_text().strip() if id_file.is_file() else ""
        try:
            run_id = client.get_run(run_id).info.run_id if run_id else ""
        except Exception:  # noqa: BLE001 - a database started afresh: a new table run
            run_id = ""
        if not run_id:
            run_id = client.create_run(experiment_id, run_name="table", tags={"job_type": "table"}).info.run_id
            write_text_atomic(id_file, run_id + "\n")
    client.log_text(run_id, markdown, "table.md")
    for key, path in files.items():
        if key != "markdown":
            client.log_artifact(run_id, str(path))
    client.set_terminated(run_id)
