"""wandb runs: offline unless the user asked for online, and never a reason to lose a run.

Mode, in order:
1. ``WANDB_MODE`` when the user set it (``offline``, ``online``, ``disabled``);
2. ``online`` when credentials exist (``WANDB_API_KEY`` or a netrc entry for the wandb host);
3. ``offline`` otherwise.

An online run whose credentials are missing, or whose host does not answer within a few
seconds, falls back to offline logging with a warning: local records and tables never depend on
wandb being reachable, and ``wandb sync`` uploads the offline run later.
"""

from __future__ import annotations

import netrc
import os
import socket
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

DEFAULT_PROJECT = "ablate"
_DEFAULT_HOST = "https://api.wandb.ai"


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


def _host_reachable(timeout_s: float = 3.0) -> bool:
    url = urlparse(_host_url())
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "", port), timeout=timeout_s):
            return True
    except OSError:
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
    if not _host_reachable():
        warnings.warn(f"wandb host {_host_url()} is not reachable: logging offline; "
                      "`wandb sync` uploads later.", stacklevel=2)
        return "offline"
    return "online"


def init_run(*, name: str, group: str, job_type: str, config: dict[str, Any] | None, dir: str | Path,
             project: str | None = None, tags: list[str] | None = None, run_id: str | None = None) -> Any:
    """Start a wandb run in its own directory ``dir/wandb``; the caller must ``finish`` it.

    With ``run_id`` the run has that id and is resumed when it exists (online), so logging again
    updates the one run rather than adding another; ``config`` then replaces the earlier values."""
    import wandb

    Path(dir).mkdir(parents=True, exist_ok=True)
    run = wandb.init(
        project=project or os.environ.get("WANDB_PROJECT", DEFAULT_PROJECT),
        group=group, job_type=job_type, name=name, config=None if run_id else config, dir=str(dir), tags=tags,
        mode=wandb_mode(), reinit="create_new", id=run_id, resume="allow" if run_id else None,
        settings=wandb.Settings(console="off", silent=True, x_disable_stats=True),
    )
    if run_id and config:
        run.config.update(config, allow_val_change=True)
    return run


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
