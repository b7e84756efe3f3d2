"""The per-job record, ``result.json``: what tables and resumed sweeps are built from.

Records are written to a temporary file in the job directory, flushed to disk and renamed over
``result.json`` (``os.replace`` is atomic on POSIX), so a job killed at any moment leaves either
its previous record or none: never a partial one.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

RESULT_FILE = "result.json"
STATUSES = ("ok", "diverged", "failed")


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` so that readers see the old file or the new one, whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2, default=str)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_record(job_dir: str | Path, record: dict[str, Any]) -> Path:
    path = Path(job_dir) / RESULT_FILE
    write_json_atomic(path, record)
    return path


def read_record(job_dir: str | Path) -> dict[str, Any] | None:
    """The job's record, or None when there is none (or it cannot be read)."""
    try:
        return json.loads((Path(job_dir) / RESULT_FILE).read_text())
    except (OSError, ValueError):
        return None
