"""The per-job record, ``result.json``: what tables and resumed sweeps are built from.

Jobs write their record here (``write_record``) and read it back to resume (``read_record``); the
table and the benchmark load a sweep's records (``load_records``) in sweep order.

Records are written to a temporary file in the job directory, flushed to disk and renamed over
``result.json`` (``os.replace`` is atomic on POSIX), so a job killed at any moment leaves either
its previous record or none: never a partial one.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import tempfile
import warnings
from pathlib import Path
from typing import Any, Iterable, Iterator

RESULT_FILE = "result.json"
STATUSES = ("ok", "diverged", "failed", "interrupted")


def _umask_mode() -> int:
    """The mode a plain ``open()`` would give a new file (0o666 less the umask)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


@contextlib.contextmanager
def atomic_file(path: str | Path) -> Iterator[Path]:
    """A temporary path beside ``path`` to write; on success it is flushed to disk, given the
    mode the umask asks for (``mkstemp`` alone would leave 0600) and renamed over ``path``, so
    readers see the old file or the new one, whole; on failure it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, _umask_mode())
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_file`)."""
    with atomic_file(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def write_json_atomic(path: str | Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` so that readers see the old file or the new one, whole."""
    write_text_atomic(path, json.dumps(data, indent=2, default=str))


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


def _natural_key(path: Path) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(path))]


def sort_records(records: Iterable[dict]) -> list[dict]:
    """Records in sweep order: by ``job.num`` where known, then by path."""
    def key(record: dict) -> tuple:
        num = (record.get("job") or {}).get("num")
        num = num if isinstance(num, (int, float)) else math.inf
        return (num, _natural_key(Path(record.get("_path", ""))))
    return sorted(records, key=key)


def load_records(sweep_dir: str | Path) -> list[dict]:
    """Every ``result.json`` under ``sweep_dir`` (recursively), in job order.

    A file that does not parse is skipped with a warning (a job may be writing it, or may have
    died); jobs without a record are simply absent. Each record gets ``_path`` (its file) and
    ``_sweep_dir`` (the directory searched), so that readers can find the sweep's other files
    (``sweep.json``, ``bench.json``).
    """
    sweep_dir = Path(sweep_dir)
    records = []
    for path in sorted(sweep_dir.rglob(RESULT_FILE), key=_natural_key):
        try:
            record = json.loads(path.read_text())
            if not isinstance(record, dict):
                raise ValueError(f"expected a JSON object, got {type(record).__name__}")
        except (OSError, ValueError) as err:
            warnings.warn(f"skipping {path}: {err}", stacklevel=2)
            continue
        record["_path"] = str(path)
        record["_sweep_dir"] = str(sweep_dir)
        records.append(record)
    return sort_records(records)


def jobs_at_once(records: Iterable[dict]) -> int:
    """The most jobs that trained at the same moment: each job's training lies within
    [job.started_at, job.started_at + metrics.wall_time_s] (started_at: when it got its share of
    the cores); records without those two figures are left out."""
    events = []
    for r in records:
        start, wall = (r.get("job") or {}).get("started_at"), (r.get("metrics") or {}).get("wall_time_s")
        if start is not None and wall is not None:
            events += [(start, 1), (start + wall, -1)]
    running = most = 0
    for _, step in sorted(events):  # at equal times an end (-1) sorts before a start
        running += step
        most = max(most, running)
    return most
