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
(:func:`job_run_id`, :func:`carry_over_attempts`), and files as artifacts (:func:`log_files`).
The ``logger`` group (which loggers a job uses; TensorBoard, MLflow) is ``ablate.loggers``'s.
"""

from __future__ import annotations

import http.client
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

from ablate.code_version import code_version
from ablate.results import write_text_atomic
from ablate.wandb_history import read_history

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


# ---------------------------------------------------------------------------- one folder per job
#: where a job's superseded offline run folders go (out of ``wandb sync``'s reach: it syncs ``*run-*``)
ATTEMPTS_DIR = "earlier-attempts"


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
