"""The per-user cache of step times measured on this machine (:func:`remember`, :func:`recall`):
``$ABLATE_CACHE_DIR/step_times.json`` (default ``$XDG_CACHE_HOME/ablate``, else ``~/.cache/ablate``),
keyed by :func:`step_time_key`, i.e. by what sets a step's time: the model and its components, the
task's shape (batch, lengths), the optimizer and trainer settings except the learning rate and the
step count, the evaluation and measurement settings, torch threads, jobs sharing the machine, the
device and the host. Each measurement also says when it was taken and what share of its threads'
time its steps had (``cpu_share``): the load is not in the key, so that estimates can choose.
``ablate --plan`` and the start of a sweep read it (``ablate.preview``), a sweep's end and ``--plan``'s
timings fill it, and a sweep's jobs find their own entry by the key (``ablate.pace``).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any, Iterable

import torch
from omegaconf import DictConfig, OmegaConf

from ablate.paths import user_cache
from ablate.record import Record

SAMPLES_PER_KEY = 8   # newest measurements kept per key
MAX_KEYS = 500        # settings kept (the least recently measured go first)
LOADED_SHARE = 0.8    # a measurement whose steps had less of their threads' time was taken under load


def loaded(sample: dict[str, Any]) -> bool:
    """Whether a measurement was taken under load (its ``cpu_share`` under :data:`LOADED_SHARE`;
    one recorded without a share counts as quiet)."""
    share = sample.get("cpu_share")
    return isinstance(share, (int, float)) and share < LOADED_SHARE


def bench_device(cfg: DictConfig) -> torch.device:
    """The device a job of ``cfg`` trains on, as Lightning picks it from ``trainer.accelerator``
    (``gpu``/``cuda``: the first CUDA device; ``auto``: CUDA when there is one; else the CPU)."""
    accelerator = str(cfg.trainer.get("accelerator", "cpu")).lower()
    if accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available()):
        return torch.device("cuda", 0)
    if accelerator == "mps":
        return torch.device("mps")
    return torch.device("cpu")



def cache_path() -> Path:
    """The per-user cache of step times measured on this machine."""
    return user_cache() / "step_times.json"


def step_time_key(config: dict[str, Any] | DictConfig, threads: int | None, parallel: int | None,
                  device: str, host: str | None = None) -> str:
    """What sets a training step's time, hashed: the settings named in this module's docstring."""
    from ablate.model import MODEL_GROUPS

    if isinstance(config, DictConfig):
        config = OmegaConf.to_container(config, resolve=True)
    dropped = {"optim": {"lr"}, "trainer": {"max_steps", "log_every_n_steps", "enable_progress_bar"}}
    shape = {name: (config.get(name) if not isinstance(config.get(name), dict) else
                    {k: v for k, v in config[name].items() if k not in dropped.get(name, ())})
             for name in (*MODEL_GROUPS, "model", "task", "optim", "trainer", "eval", "measure")}
    shape.update(threads=threads, parallel=parallel, device=device, host=host or socket.gethostname())
    return hashlib.sha1(json.dumps(shape, sort_keys=True, default=str).encode()).hexdigest()[:20]


def device_name(config: DictConfig) -> str:
    """The device a job of ``config`` trains on, by name (``cpu``; a CUDA device's model)."""
    device = bench_device(config)
    return torch.cuda.get_device_name(device) if device.type == "cuda" else device.type


#: the cache's notes already printed by this process (a bad entry is named once, however often it is read)
_NOTED: set[str] = set()


def _note(text: str) -> None:
    if text not in _NOTED:
        _NOTED.add(text)
        print(f"[ablate] note: {text}", file=sys.stderr, flush=True)


def _number(value: Any) -> bool:
    """A finite number, not negative (not a bool, not NaN)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def _entry_problem(entry: Any) -> str | None:
    """Why one cache entry cannot be used (None when it can): ``{"samples": [...], "at": time}``,
    each sample with a positive finite ``step_s`` and, where given, finite ``low_s``, ``high_s``,
    ``other_s`` and ``at``."""
    if not isinstance(entry, dict):
        return f"a {type(entry).__name__}, not an object with samples"
    if not isinstance(entry.get("samples"), list):
        return "no list of samples"
    if "at" in entry and not _number(entry["at"]):
        return f'"at" is {entry["at"]!r}, not a time in seconds'
    return next((f"sample {n} {problem}" for n, sample in enumerate(entry["samples"])
                 if (problem := _sample_problem(sample))), None)


def _sample_problem(sample: Any) -> str | None:
    """Why one measurement cannot be used (None when it can)."""
    if not isinstance(sample, dict):
        return f"is a {type(sample).__name__}, not an object"
    if not (_number(sample.get("step_s")) and sample["step_s"] > 0):
        return f"has step_s {sample.get('step_s')!r}, not a positive number of seconds"
    bad = next((k for k in ("low_s", "high_s", "other_s", "at", "cpu_share") if sample.get(k) is not None
                and not _number(sample[k])), None)
    if bad:
        return f"has {bad} {sample[bad]!r}, not a number of seconds"
    return None if isinstance(sample.get("id"), (str, type(None))) else f"has id {sample['id']!r}, not a string"


def _read_cache() -> tuple[dict[str, Any], bool]:
    """The cache's usable entries, and whether the file is there but not a cache at all (not JSON,
    or not an object). It is advisory: a bad entry is left out with one note naming the file and the
    entry, never raised, so it can neither stop a plan or a sweep nor cost a sweep its table."""
    path = cache_path()
    try:
        cache = json.loads(path.read_text())
    except FileNotFoundError:  # none yet
        return {}, False
    except (OSError, ValueError) as error:  # unreadable: estimates start afresh
        _note(f"the step-time cache {path} cannot be read ({type(error).__name__}: {error}); ignoring it")
        return {}, path.is_file()
    if not isinstance(cache, dict):
        _note(f"the step-time cache {path} holds a JSON {type(cache).__name__}, not an object of entries; ignoring it")
        return {}, True
    good = {}
    for key, entry in cache.items():
        problem = _entry_problem(entry)
        if problem:
            _note(f"the step-time cache {path}: ignoring entry {key!r} ({problem})")
        else:
            good[key] = entry
    return good, False


def recall(key: str) -> list[dict[str, Any]]:
    """The measurements cached under ``key``, oldest first: each ``{"step_s", "low_s", "high_s",
    "other_s", "source", "id", "at", "cpu_share"}`` (``other_s``: a job's seconds besides its steps,
    from a finished job's record, None from a timing; ``at``: when it was taken; ``cpu_share``: the
    share of its threads' time its steps had, None where not measured)."""
    entry = _read_cache()[0].get(key)
    return list(entry["samples"]) if entry else []


def remember(samples: dict[str, list[dict[str, Any]]]) -> None:
    """Add measurements (key -> samples) to the cache; a sample whose ``id`` is there already is
    skipped, and so is one that is not a usable measurement. The cache is written back with its
    usable entries only (each bad one was named as it was read); a file that was no cache at all is
    kept beside it (``step_times.json.unreadable``). A cache that cannot be written is left as it is
    (it only saves time)."""
    from ablate.results import write_json_atomic

    if not samples:
        return
    cache, unreadable = _read_cache()
    for key, new in samples.items():
        entry = cache.get(key) or {"samples": []}
        known = {s.get("id") for s in entry["samples"] if s.get("id")}
        fresh = [dict(s, at=s.get("at") or time.time()) for s in new if (not s.get("id") or s["id"] not in known)
                 and _sample_problem(s) is None]  # a measurement that is no time (NaN, say) is not kept
        if fresh:
            cache[key] = {**entry, "samples": (entry["samples"] + fresh)[-SAMPLES_PER_KEY:], "at": time.time()}
    newest = sorted(cache, key=lambda k: cache[k].get("at", 0))[-MAX_KEYS:]
    path = cache_path()
    try:
        if unreadable:
            os.replace(path, path.with_name(path.name + ".unreadable"))
            _note(f"the step-time cache {path} was not a cache; kept as {path.name}.unreadable, written afresh")
        write_json_atomic(path, {k: cache[k] for k in newest})
    except OSError:
        pass


def record_samples(records: Iterable[Record]) -> dict[str, list[dict[str, Any]]]:
    """Step times of finished jobs' records, keyed as the cache keys them (:func:`remember` takes
    them: a sweep's end feeds the next estimate)."""
    found: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        metrics = record.metrics
        median = (metrics.step_time_s or {}).get("median")
        if not (record.ok and median and record.config and metrics.steps and metrics.wall_time_s) \
                or metrics.resumed_from_step:
            continue  # a resumed job's clock holds only its last attempt
        host = (record.job.slurm or {}).get("node")  # None: this machine
        key = step_time_key(record.config, metrics.torch_threads, metrics.concurrent_jobs or 1,
                            metrics.device or "cpu", host)
        other = max(0.0, metrics.wall_time_s - metrics.steps * median)
        started = record.job.started_at
        found.setdefault(key, []).append({"step_s": median, "low_s": median, "high_s": median, "other_s": other,
                                          "source": "runs", "id": f"{record.job.dir}@{started}",
                                          "cpu_share": metrics.cpu_share,
                                          "at": started + metrics.wall_time_s if started else None})
    return found
