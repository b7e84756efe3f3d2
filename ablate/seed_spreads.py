"""The per-user cache of seed spreads measured on this machine: ``$ABLATE_CACHE_DIR/seed_spreads.json``
beside the step-time cache, so that ``--plan`` can say how many seeds a comparison needs before
anything of it has run.

A comparison's spread is the sample standard deviation of its paired differences over seeds (the
row's accuracy minus its baseline's, seed by seed: what a paired t-test and the rounds divide by).
It is keyed by :func:`spread_key`, i.e. by what sets it: both configs of the pair without what cannot
change a result (the seed, loggers, measurement, checkpoints, callbacks, the experiment's labels).
Each entry says where it was measured (``source``: the sweep directory), when (``at``) and over how
many seeds (``n``); a sweep's end fills it (``ablate.callbacks``), ``--plan`` reads it
(``ablate.power``). It is advisory: an unreadable cache reads as empty and one that cannot be written
is left as it is.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping

from ablate.paths import user_cache
from ablate.results import write_json_atomic

MAX_KEYS = 500  # comparisons kept (the least recently measured go first)
#: what does not change a run's result, left out of the key
NOT_RESULT_KEYS = frozenset({"seed", "logger", "measure", "checkpoint", "callbacks", "experiment", "hydra",
                             "optimized_metric", "stats"})
NOT_RESULT_TRAINER_KEYS = frozenset({"log_every_n_steps", "enable_progress_bar", "enable_model_summary"})


@dataclass(frozen=True)
class Spread:
    """The spread of one comparison's paired differences (accuracy, as a fraction)."""

    sd: float
    n: int              # paired seeds it was measured over
    at: float           # when (seconds since the epoch)
    source: str         # where: the sweep directory


def cache_path() -> Path:
    return user_cache() / "seed_spreads.json"


def _result_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    settings = {k: v for k, v in config.items() if k not in NOT_RESULT_KEYS}
    if isinstance(settings.get("trainer"), Mapping):
        settings["trainer"] = {k: v for k, v in settings["trainer"].items() if k not in NOT_RESULT_TRAINER_KEYS}
    if isinstance(settings.get("finetune"), Mapping):  # a fine-tune's pretraining directory is named per sweep
        settings["finetune"] = {k: v for k, v in settings["finetune"].items() if k != "from_job"}
    return settings


def spread_key(row_config: Mapping[str, Any], base_config: Mapping[str, Any]) -> str:
    """What sets a comparison's spread, hashed: both resolved configs (a record's ``config``, or a
    composed config as a container) without the keys that cannot change a result."""
    pair = [_result_settings(row_config), _result_settings(base_config)]
    return hashlib.sha1(json.dumps(pair, sort_keys=True, default=str).encode()).hexdigest()[:20]


def paired_spread(row: Mapping[Any, float], base: Mapping[Any, float]) -> tuple[float, int] | None:
    """``(sd, n)`` of the paired differences of two ``{seed: value}`` maps (None below two pairs)."""
    diffs = [row[s] - base[s] for s in row if s in base and math.isfinite(row[s]) and math.isfinite(base[s])]
    if len(diffs) < 2:
        return None
    mean = sum(diffs) / len(diffs)
    return math.sqrt(sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1)), len(diffs)


def _read() -> dict[str, Any]:
    try:
        cache = json.loads(cache_path().read_text())
    except (OSError, ValueError):
        return {}
    return cache if isinstance(cache, dict) else {}


def recall(key: str) -> Spread | None:
    """The spread cached under ``key``, or None."""
    entry = _read().get(key)
    try:
        spread = Spread(float(entry["sd"]), int(entry["n"]), float(entry["at"]), str(entry["source"]))
    except (TypeError, KeyError, ValueError):
        return None
    return spread if math.isfinite(spread.sd) and spread.sd >= 0 and spread.n >= 2 else None


def remember(spreads: Mapping[str, Spread]) -> None:
    """Keep ``spreads`` (key -> spread); a key's new measurement replaces its old one unless the old one
    rests on more seeds and is from the same sweep directory (a table built again of fewer seeds)."""
    if not spreads:
        return
    cache = _read()
    for key, spread in spreads.items():
        old = cache.get(key)
        if isinstance(old, dict) and old.get("source") == spread.source and int(old.get("n", 0)) > spread.n:
            continue
        cache[key] = asdict(spread)
    newest = sorted(cache, key=lambda k: cache[k].get("at", 0) if isinstance(cache[k], dict) else 0)[-MAX_KEYS:]
    try:
        write_json_atomic(cache_path(), {k: cache[k] for k in newest})
    except OSError:
        pass


def measured_now(sd: float, n: int, source: str | Path) -> Spread:
    return Spread(float(sd), int(n), time.time(), str(source))
