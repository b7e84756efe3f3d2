"""wandb runs: offline unless the user asked for online, and never a reason to lose a run.

Mode, in order:
1. ``WANDB_MODE`` when the user set it (``offline``, ``online``, ``disabled``);
2. ``online`` when credentials exist (``WANDB_API_KEY`` or a netrc entry for the wandb host);
3. ``offline`` otherwise.

An online run whose credentials are missing, whose host does not answer an HTTP request within
``PROBE_TIMEOUT_S`` (refused, unreachable, or a host that accepts the connection and never
answers), or whose ``wandb.init`` fails for any other reason within ``ONLINE_INIT_TIMEOUT_S``,
falls back to offline logging with a warning: local records and tables never depend on wandb
being reachable, and ``wandb sync`` uploads the offline run later. ``disabled`` means no run.

What a run carries besides its metrics (docs/wandb.md): every series against
``trainer/global_step`` with a best-value summary (:func:`define_metrics`), the code version as a
tag (:func:`code_version`), one run id per job directory whatever became of earlier attempts
(:func:`job_run_id`), and files as artifacts (:func:`log_files`).
"""

from __future__ import annotations

import http.client
import importlib.metadata
import netrc
import os
import re
import secrets
import shlex
import string
import urllib.error
import urllib.request
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping
from urllib.parse import urlparse

from ablate.results import write_text_atomic

DEFAULT_PROJECT = "ablate"
_DEFAULT_HOST = "https://api.wandb.ai"
PROBE_TIMEOUT_S = 3.0         # the host must answer one HTTP request in this time, or runs log offline
ONLINE_INIT_TIMEOUT_S = 20.0  # wandb.init's own limit is 90 s; past this an online start falls back to offline
STEP = "trainer/global_step"  # the x-axis of every series (what Lightning's WandbLogger logs with each row)
#: best-value summaries of the curves, most specific first (the first definition a name matches wins);
#: "last" kept beside the best, so the summary also holds the value at the end of training
SUMMARIES = (("val/loss", "min,last"), ("val/accuracy", "max,last"),
             ("test/loss@*", "min,last"), ("test/accuracy@*", "max,last"))
TAG_CHARS = 64                # wandb refuses longer tags
_RUN_ID = re.compile(r"[a-z0-9]{1,64}")
_ID_CHARS = string.ascii_lowercase + string.digits  # what wandb's own run ids are made of


def _host_url() -> str:
    return os.environ.get("WANDB_BASE_URL", _DEFAULT_HOST)


def _has_credentials() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(_host_url()).hostname or ""
    path = os.environ.get("NETRC", str(Path.home() / ".netrc"))
    try:
        return netrc.netrc(path).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def host_answers(timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Whether the wandb host answers one HTTP request within ``timeout_s`` (any status counts: an
    answer is what matters). An open TCP connection is not enough: a host that accepts it and never
    answers would hold ``wandb.init`` for 90 s and then fail it."""
    try:
        with urllib.request.urlopen(_host_url(), timeout=timeout_s):
            return True
    except urllib.error.HTTPError:  # 401, 404, ...: it answered
        return True
    except (OSError, ValueError, http.client.HTTPException):  # refused, timed out, a bad URL or reply
        return False


def wandb_mode() -> str:
    """The mode a new run gets (see the module docstring); ``online`` only when it can work."""
    requested = os.environ.get("WANDB_MODE") or ("online" if _has_credentials() else "offline")
    if requested != "online":
        return requested
    if not _has_credentials():
        warnings.warn("WANDB_MODE=online but no wandb credentials (WANDB_API_KEY or `wandb login`): "
                      "logging offline; `wandb sync` uploads later.", stacklevel=2)
        return "offline"
    if not host_answers():
        warnings.warn(f"wandb host {_host_url()} did not answer within {PROBE_TIMEOUT_S:.0f} s: logging offline; "
                      "`wandb sync` uploads later.", stacklevel=2)
        return "offline"
    return "online"


def wants_system_metrics(trainer: Any) -> bool:
    """Whether a job of this ``trainer`` node logs wandb's system metrics (CPU, memory, GPU
    utilisation and memory charts): on a GPU (``accelerator`` gpu/cuda, or auto with one visible);
    on a CPU they cost speed (3.5% on a 2-core machine: docs/wandb.md)."""
    accelerator = str((trainer or {}).get("accelerator", "auto"))
    if accelerator in ("gpu", "cuda"):
        return True
    if accelerator != "auto":
        return False
    import torch

    return torch.cuda.is_available()


def init_run(*, name: str, group: str, job_type: str, config: dict[str, Any] | None, dir: str | Path,
             project: str | None = None, entity: str | None = None, tags: Iterable[str] | None = None,
             notes: str | None = None, run_id: str | None = None, system_metrics: bool = False) -> Any:
    """Start a wandb run in its own directory ``dir/wandb``; the caller must ``finish`` it. None
    when ``WANDB_MODE=disabled`` (no run: nothing to point a record at).

    With ``run_id`` the run has that id and is resumed when it exists (online), so logging again
    updates the one run rather than adding another; ``config`` then replaces the earlier values.
    ``system_metrics``: wandb's CPU/GPU/memory charts (off: they cost speed on a CPU run)."""
    import wandb

    mode = wandb_mode()
    if mode == "disabled":
        return None
    Path(dir).mkdir(parents=True, exist_ok=True)
    settings = {"console": "off", "silent": True, "x_disable_stats": not system_metrics}
    arguments = dict(project=project or os.environ.get("WANDB_PROJECT", DEFAULT_PROJECT), entity=entity or None,
                     group=group, job_type=job_type, name=name, config=None if run_id else config, dir=str(dir),
                     tags=list(tags) if tags else None, notes=notes or None, reinit="create_new", id=run_id,
                     resume="allow" if run_id else None)
    run = None
    if mode == "online":
        try:
            run = wandb.init(mode="online", settings=wandb.Settings(**settings, init_timeout=ONLINE_INIT_TIMEOUT_S),
                             **arguments)
        except Exception as error:  # noqa: BLE001 - whatever failed online, the run logs offline
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            warnings.warn(f"wandb could not start an online run ({reason}): logging offline; "
                          "`wandb sync` uploads later.", stacklevel=2)
    if run is None:
        mode = "offline" if mode == "online" else mode
        # this process's wandb settings too (wandb.setup updates them): with the environment's
        # online mode, wandb's own usage metrics would wait ~10 s at exit for a host that is not there
        wandb.setup(settings=wandb.Settings(mode=mode))
        run = wandb.init(mode=mode, settings=wandb.Settings(**settings), **arguments)
    if run_id and config:
        run.config.update(config, allow_val_change=True)
    return run


def define_metrics(run: Any) -> None:
    """Every series a job logs against ``trainer/global_step`` (Lightning logs it with each row;
    its WandbLogger does not define it for a run it did not create), and the best values of the
    curves in the summary: ``val/loss`` the minimum, ``val/accuracy`` (higher is better for every
    task metric) the maximum, each beside its last value."""
    run.define_metric(STEP)
    for name, summary in SUMMARIES:  # before the catch-all: a name takes the first definition it matches
        run.define_metric(name, step_metric=STEP, summary=summary)
    run.define_metric("*", step_metric=STEP)


def job_run_id(dir: str | Path, earlier: str | None = None) -> str:
    """The wandb run id of the job in ``dir``, the same for every attempt at it: the id an earlier
    attempt wrote to ``dir/wandb/run_id`` (whatever became of that attempt: killed, hung up,
    stopped during start-up), else ``earlier`` (a checkpoint's, from before this file existed),
    else a new one. Written before ``wandb.init``, so syncing a job's runs uploads one run."""
    path = Path(dir) / "wandb" / "run_id"
    try:
        stored = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        stored = ""
    if _RUN_ID.fullmatch(stored):
        return stored
    run_id = earlier if earlier and _RUN_ID.fullmatch(earlier) else "".join(secrets.choice(_ID_CHARS) for _ in range(8))
    write_text_atomic(path, run_id + "\n")
    return run_id


def code_version() -> str:
    """The code a run ran, as a tag: ``git:<commit>`` of the checkout ``ablate`` is imported from
    (a source tree or an editable install), else ``ablate:<package version>``. Read from the files
    in ``.git`` (no ``git`` process); uncommitted changes are not seen."""
    commit = _git_commit(Path(__file__).resolve().parent.parent / ".git")
    if commit:
        return f"git:{commit[:12]}"
    try:
        return f"ablate:{importlib.metadata.version('ablate')}"
    except importlib.metadata.PackageNotFoundError:
        return "ablate:unknown"


def _git_commit(git: Path) -> str | None:
    """The commit HEAD names in the git directory ``git`` (a ``.git`` file points to a worktree's)."""
    sha = re.compile(r"[0-9a-f]{40}")
    try:
        if git.is_file():  # a worktree or a submodule: "gitdir: PATH"
            git = (git.parent / git.read_text().strip().removeprefix("gitdir:").strip()).resolve()
        head = (git / "HEAD").read_text().strip()
        if sha.fullmatch(head):  # detached
            return head
        ref = head.removeprefix("ref:").strip()
        common = (git / (git / "commondir").read_text().strip()).resolve() if (git / "commondir").is_file() else git
        for root in dict.fromkeys((git, common)):
            if (root / ref).is_file():
                return next(iter(sha.findall((root / ref).read_text())), None)
        packed = (common / "packed-refs").read_text() if (common / "packed-refs").is_file() else ""
        return next((line.split()[0] for line in packed.splitlines() if line.endswith(f" {ref}")), None)
    except (OSError, UnicodeDecodeError):
        return None


def job_tags(user_tags: Iterable[str], experiment: str | None, smoke: bool) -> list[str]:
    """A job run's tags: the user's (``logger.tags``), the experiment's name, ``smoke`` for a
    smoke test, and the code version (:func:`code_version`); each once, in that order."""
    tags = [*user_tags, *([experiment] if experiment else []), *(["smoke"] if smoke else []), code_version()]
    return list(dict.fromkeys(str(t)[:TAG_CHARS] for t in tags))


def job_notes(user_notes: str | None, overrides: Iterable[str]) -> str:
    """A job run's notes: the user's (``logger.notes``), then the command line that runs this job
    alone (its overrides, as ``ablate`` takes them: in a sweep, the job's own values)."""
    command = " ".join(["ablate", *(shlex.quote(o) for o in overrides)])
    return f"{user_notes}\n\n{command}" if user_notes else command


def log_files(run: Any, name: str, type: str, files: Mapping[str, str | Path], metadata: dict[str, Any] | None = None,
              copy: bool = True) -> Any:
    """Log ``files`` (``{name in the artifact: path}``, missing paths left out) as a new version of
    the artifact ``name``. ``copy=False`` for large files that stay where they are until the run is
    synced (a kept checkpoint): wandb then reads them in place instead of staging a copy."""
    import wandb

    artifact = wandb.Artifact(re.sub(r"[^A-Za-z0-9_.-]", "-", name)[:128], type=type, metadata=metadata)
    for key, path in files.items():
        if Path(path).is_file():
            artifact.add_file(str(path), name=key, policy="mutable" if copy else "immutable", skip_cache=not copy)
    return run.log_artifact(artifact)


def share_service() -> None:
    """Start this process's wandb service now, for the job processes it is about to start on this
    machine (joblib's workers, submitit's local jobs): they inherit its address through the
    environment and log through it instead of each starting a service of its own (wandb's
    ``wandb.setup()``, the way wandb documents for child processes)."""
    import wandb

    wandb.setup()


def superseded_runs(dir: str | Path, run_id: str, keep: str | Path) -> list[Path]:
    """The local directories of the run ``run_id`` under ``dir/wandb`` other than ``keep``: those
    of earlier logs of the same run (wandb writes each ``init`` to a new directory)."""
    keep = Path(keep).resolve()
    return sorted(d for d in (Path(dir) / "wandb").glob(f"*run-*-{run_id}")
                  if d.is_dir() and not d.is_symlink() and d.resolve() != keep)


def run_dir(run: Any) -> str:
    """The local directory of a run (the one ``wandb leet inspect`` and ``wandb sync`` read)."""
    return str(Path(run.dir).parent)


# ---------------------------------------------------------------------------- the logger group
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


# ---------------------------------------------------------------------------- one folder per job
#: where a job's superseded offline run folders go (out of ``wandb sync``'s reach: it syncs ``*run-*``)
ATTEMPTS_DIR = "earlier-attempts"
_BLOCK = 32768  # the .wandb file's record framing: LevelDB's log format, 32 KiB blocks, 7-byte record headers


def read_history(run_folder: str | Path) -> list[dict[str, Any]]:
    """The history rows (what ``run.log`` logged, wandb's ``_step``/``_runtime``/``_timestamp`` left
    out) of an offline run folder, read from its ``.wandb`` transaction log; a torn end (a killed
    writer) ends the read. Empty when the folder has no readable log."""
    import json
    import struct

    from wandb.proto import wandb_internal_pb2 as pb

    files = sorted(Path(run_folder).glob("run-*.wandb"))
    if not files:
        return []
    data = files[0].read_bytes()
    rows, chunk, pos = [], b"", 7  # after the file header (":W&B", magic, version)
    while pos + 7 <= len(data):
        if _BLOCK - pos % _BLOCK < 7:  # a block's tail too short for a header is padding
            pos += _BLOCK - pos % _BLOCK
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 or pos + 7 + length > len(data):
            break
        chunk, pos = chunk + data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind not in (1, 4):  # FIRST and MIDDLE pieces of a record: keep reading
            continue
        record = pb.Record()
        try:
            record.ParseFromString(chunk)
        except Exception:  # noqa: BLE001 - a torn record: what came before stands
            break
        chunk = b""
        if record.WhichOneof("record_type") == "history":
            row = {}
            for item in record.history.item:
                key = item.key or "/".join(item.nested_key)
                if not key.startswith("_"):
                    row[key] = json.loads(item.value_json)
            rows.append(row)
    return rows


@dataclass
class CarriedOver:
    """What :func:`carry_over_attempts` did: the rows re-logged and the folders moved aside."""

    rows: int = 0
    moved: list[str] = field(default_factory=list)
    problem: str | None = None


def carry_over_attempts(run: Any, job_dir: str | Path, resumed_step: int) -> CarriedOver:
    """Make ``run``'s folder the job's one folder: wandb cannot append to an offline run folder (each
    ``wandb.init`` writes a new ``offline-run-<time>-<id>``, and ``wandb sync`` of two folders of one
    id keeps the last one's history: wandb issues #3841, #5865). So the history an earlier offline
    attempt logged up to ``resumed_step`` (the checkpoint this attempt resumed from: later rows are
    logged again by this attempt; none for a fresh start) is logged again into ``run``, and the
    earlier folders move to ``job_dir/wandb/earlier-attempts/``, where ``wandb sync`` does not look.
    Never raises: a problem leaves the folders where they were (and is returned)."""
    done = CarriedOver()
    try:
        earlier = superseded_runs(job_dir, run.id, run_dir(run))
        rows: dict[tuple[Any, ...], dict[str, Any]] = {}  # a later attempt's row replaces an earlier's
        for folder in earlier:  # by name, so by start time
            if folder.name.startswith("offline-run-") and resumed_step > 0:
                for row in read_history(folder):
                    step = row.get(STEP)
                    if isinstance(step, (int, float)) and step <= resumed_step:
                        rows[(step, *sorted(row))] = row
        for row in sorted(rows.values(), key=lambda r: r[STEP]):
            run.log(row)
        done.rows = len(rows)
        aside = Path(job_dir) / "wandb" / ATTEMPTS_DIR
        for folder in earlier:
            aside.mkdir(parents=True, exist_ok=True)
            os.replace(folder, aside / folder.name)
            done.moved.append(folder.name)
    except Exception as error:  # noqa: BLE001 - the run logs on; its earlier folders stay for `wandb sync`
        done.problem = f"{type(error).__name__}: {error}"
        warnings.warn(f"wandb: the earlier attempts' history was not carried over ({done.problem})", stacklevel=2)
    return done
