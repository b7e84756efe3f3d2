"""The ``logger`` group: which loggers a job uses (``logger=[wandb,tensorboard]``: :func:`logger_names`),
what is wrong with a ``logger`` node, where TensorBoard and MLflow logs go (:class:`LoggerPlace`), and
the Lightning loggers of a job (:func:`make_loggers`). The wandb run itself is ``ablate.tracking``'s.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import urlparse

from ablate.code_version import code_version
from ablate.results import write_text_atomic

#: the loggers of the ``logger`` group (conf/logger/*.yaml); several at once: ``logger=[wandb,tensorboard]``
LOGGERS = ("wandb", "csv", "tensorboard", "mlflow")
#: the Python package each needs beyond ablate's own (the ``ablate[tensorboard]``/``ablate[mlflow]`` extras)
LOGGER_PACKAGES = {"tensorboard": ("tensorboard", "tensorboard"), "mlflow": ("mlflow", "mlflow")}
MLFLOW_URI_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql", "http", "https", "databricks")


def sweep_group(cfg: Any, sweep_dir: str | None) -> str:
    """A sweep's group in every logger (wandb's group, MLflow's experiment): one per sweep, stable when
    the sweep is relaunched into its directory; single runs share ``single-runs`` (or their experiment's)."""
    name = cfg.experiment.name or "sweep"
    if sweep_dir is None:
        return name if cfg.experiment.name else "single-runs"
    return f"{name}-{'_'.join(Path(sweep_dir).parts[-2:])}"


def logger_names(node: Mapping[str, Any] | None) -> list[str]:
    """The loggers a ``logger`` node turns on, in the order chosen: the keys of ``use`` (each option
    of the group adds its own, so ``logger=[wandb,tensorboard]`` has both), or for a node without
    ``use`` (a config from before it) its ``name``; ``none`` is none. The one way to ask "does this
    run log to wandb?": ``logger.name`` alone names only the last of several."""
    if not isinstance(node, Mapping):
        return []
    use = node.get("use")
    if isinstance(use, Mapping):
        return [str(name) for name, on in use.items() if on]
    name = node.get("name")
    return [] if name in (None, "none") else [str(name)]


def uses_wandb(node: Mapping[str, Any] | None) -> bool:
    """Whether a run with this ``logger`` node logs to wandb."""
    return "wandb" in logger_names(node)


def logger_problems(node: Mapping[str, Any]) -> list[str]:
    """What is wrong with a ``logger`` node, one line each: an unknown logger, a logger whose package
    is not installed, an MLflow tracking URI MLflow refuses (a plain directory: its file store)."""
    import importlib.util

    out = []
    use = node.get("use")
    if use is not None and not isinstance(use, Mapping):
        return [f"logger.use={use!r} must map logger names to true/false (each logger option sets its own)"]
    out += [f"logger.use.{k}={v!r} must be true or false; valid loggers: {', '.join(LOGGERS)}"
            for k, v in (use or {}).items() if not isinstance(v, bool)]
    if out:
        return out
    for name in logger_names(node):
        if name not in LOGGERS:
            out.append(f"logger: {name!r} is not a logger; valid: {', '.join(LOGGERS)}, none "
                       "(several: logger=[wandb,tensorboard])")
        elif name in LOGGER_PACKAGES and importlib.util.find_spec(LOGGER_PACKAGES[name][0]) is None:
            out.append(f"logger={name} needs the {LOGGER_PACKAGES[name][1]} package, which is not installed: "
                       f"pip install 'ablate[{name}]'")
    uri = ((node.get("mlflow") or {}) if isinstance(node.get("mlflow"), Mapping) else {}).get("tracking_uri")
    if "mlflow" in logger_names(node) and uri is not None:
        scheme = urlparse(str(uri)).scheme
        if scheme not in MLFLOW_URI_SCHEMES:
            out.append(f"logger.mlflow.tracking_uri={uri!r}: MLflow refuses a plain directory (its file store); "
                       "valid: null (sqlite in the sweep's directory), sqlite:///PATH.db, http(s)://HOST")
    return out


@dataclass
class LoggerPlace:
    """Where a job's TensorBoard and MLflow logs go: ``home`` is the sweep's directory (one place for
    every job of a sweep: ``tensorboard --logdir HOME/tensorboard``, ``mlflow ui --backend-store-uri
    sqlite:///HOME/mlflow.db``), or a single run's own directory."""

    home: Path
    group: str       # the sweep's group (wandb's group): MLflow's experiment
    variant: str     # the job's variant: TensorBoard's run directory, MLflow's run name
    seed: int

    @property
    def tensorboard_dir(self) -> Path:
        return self.home / "tensorboard"

    @property
    def mlflow_uri(self) -> str:
        return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{(self.home / 'mlflow.db').resolve()}"

    @property
    def mlflow_artifacts(self) -> Path:
        return (self.home / "mlartifacts").resolve()


def safe_name(text: str) -> str:
    """``text`` as one path component (a variant's ``/`` and other odd characters become ``_``)."""
    return re.sub(r"[^A-Za-z0-9_.,=+@-]", "_", text)[:200] or "_"


def mlflow_key(key: str) -> str:
    """A metric name MLflow accepts: ``test/loss@64`` becomes ``test/loss_at_64`` (MLflow refuses ``@``;
    Lightning's MLFlowLogger would drop it: ``test/loss64``)."""
    return re.sub(r"[^A-Za-z0-9_/. -]", "_", key.replace("@", "_at_"))


def make_loggers(node: Mapping[str, Any], place: LoggerPlace, job_dir: Path, run: Any = None,
                 hparams: Mapping[str, Any] | None = None) -> list[Any]:
    """The Lightning loggers of a job, in the order its ``logger`` node names them: ``csv``
    (``metrics.csv`` in the job's directory), ``wandb`` (``run``, when it started), ``tensorboard``
    (``HOME/tensorboard/<variant>/seed=<seed>``), ``mlflow`` (experiment = the sweep's group, run
    name = the variant, tagged; the run id kept in ``job_dir/mlflow/run_id`` so that a resumed job
    continues its run). Every series is logged against the global step."""
    loggers: list[Any] = []
    for name in logger_names(node):
        if name == "csv":
            from pytorch_lightning.loggers import CSVLogger

            loggers.append(CSVLogger(save_dir=str(job_dir), name="", version=""))
        elif name == "wandb" and run is not None:
            from pytorch_lightning.loggers import WandbLogger

            loggers.append(WandbLogger(experiment=run))
        elif name == "tensorboard":
            from pytorch_lightning.loggers import TensorBoardLogger

            settings = node.get("tensorboard") or {}
            root = Path(settings.get("save_dir") or place.tensorboard_dir)
            loggers.append(TensorBoardLogger(save_dir=str(root), name=safe_name(place.variant),
                                             version=f"seed={place.seed}", default_hp_metric=False))
        elif name == "mlflow":
            loggers.append(_mlflow_logger(node.get("mlflow") or {}, place, job_dir))
    if hparams:
        for logger in loggers:
            if type(logger).__name__ != "WandbLogger":  # wandb has the whole config already
                logger.log_hyperparams(dict(hparams))
    return loggers


def _mlflow_logger(settings: Mapping[str, Any], place: LoggerPlace, job_dir: Path) -> Any:
    from pytorch_lightning.loggers import MLFlowLogger

    class AblateMLFlowLogger(MLFlowLogger):
        """Lightning's MLFlowLogger with ablate's metric names kept readable (``mlflow_key``)."""

        def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
            super().log_metrics({mlflow_key(k): v for k, v in metrics.items()}, step)

    user_uri = os.environ.get("MLFLOW_TRACKING_URI")
    uri = settings.get("tracking_uri") or place.mlflow_uri
    id_file = job_dir / "mlflow" / "run_id"
    earlier = id_file.read_text().strip() if id_file.is_file() else None
    tags = {"variant": place.variant, "seed": str(place.seed), "group": place.group, "job_dir": str(job_dir),
            "code_version": code_version(), **{str(k): str(v) for k, v in (settings.get("tags") or {}).items()}}
    place.home.mkdir(parents=True, exist_ok=True)
    import logging  # MLflow's "Creating initial MLflow database tables...", Lightning's "Experiment ... not found"

    for quiet in ("mlflow", "alembic", "pytorch_lightning.loggers.mlflow", "lightning.pytorch.loggers.mlflow"):
        logging.getLogger(quiet).setLevel(logging.ERROR)
    with _file_lock(place.home / ".mlflow.lock"):  # jobs of a sweep create one database and experiment
        logger = AblateMLFlowLogger(experiment_name=settings.get("experiment") or place.group,
                                    run_name=place.variant, tracking_uri=uri, tags=tags, run_id=earlier,
                                    artifact_location=place.mlflow_artifacts.as_uri())
        run_id = logger.run_id  # creates the experiment and the run now, under the lock
    # Lightning's MLFlowLogger calls mlflow.set_tracking_uri, which sets MLFLOW_TRACKING_URI for the
    # process: the user's own value (or none) is put back, so a later job or table finds its own database
    _restore_env("MLFLOW_TRACKING_URI", user_uri)
    if run_id != earlier:
        write_text_atomic(id_file, run_id + "\n")
    return logger


def _restore_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


class _file_lock:
    """An exclusive ``flock`` on ``path`` while inside (POSIX; elsewhere no lock)."""

    def __init__(self, path: Path) -> None:
        self.path, self.handle = path, None

    def __enter__(self) -> "_file_lock":
        self.handle = open(self.path, "a")
        try:
            import fcntl

            fcntl.flock(self.handle, fcntl.LOCK_EX)
        except ImportError:
            pass
        return self

    def __exit__(self, *exc: Any) -> None:
        self.handle.close()  # closing releases the lock
