"""A job's directory in its sweep: one flat, safe, unique and stable name per list of overrides.

``hydra.sweep.subdir`` is ``${ablate_job_dir:${hydra.overrides.task}}`` (conf/config.yaml), i.e.
:func:`job_dir_name` of the job's overrides; ``ablate.resolvers`` registers the resolver.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Iterable

from ablate.sweep import override_key

#: ``hydra.sweep.subdir`` as conf/config.yaml sets it: each job in the directory :func:`job_dir_name` names
JOB_SUBDIR = "${ablate_job_dir:${hydra.overrides.task}}"
READABLE_BYTES = 120     # a longer name is shortened (and gets the hash)
VALUE_CHARS = 40         # a shortened name keeps the last this-many characters of a long value
_UNSAFE = re.compile(r"[^A-Za-z0-9._=,+-]")


def _safe(text: str) -> str:
    return _UNSAFE.sub("_", text)


def _short_item(item: str, short_keys: bool) -> str:
    key, sep, value = item.partition("=")
    key = _safe(key)
    if short_keys:
        key = key.rsplit(".", 1)[-1]
    value = _safe(value)
    if len(value) > VALUE_CHARS:  # paths: the file name at the end is what tells jobs apart
        value = "_" + value[-(VALUE_CHARS - 1):]
    return key + sep + value


def _readable(items: list[str]) -> str:
    """A name of at most READABLE_BYTES safe characters that reads like the overrides: long values
    cut to their end, then keys cut to their last part, then overrides left out from the last,
    settings (dotted keys) before group choices and the seed, which ablations sweep most."""
    for short_keys in (False, True):
        parts = [_short_item(item, short_keys) for item in items]
        if len(",".join(parts)) <= READABLE_BYTES:
            return ",".join(parts)
    keep = list(range(len(items)))
    drop_order = [i for i in reversed(keep) if "." in override_key(items[i])]
    drop_order += [i for i in reversed(keep) if "." not in override_key(items[i])]
    for i in drop_order:
        if len(keep) == 1 or len(",".join(parts[k] for k in keep)) <= READABLE_BYTES:
            break
        keep.remove(i)
    return ",".join(parts[k] for k in keep)[:READABLE_BYTES]


def job_dir_name(overrides: Iterable[str]) -> str:
    """The directory name of a job of a sweep, from its overrides: flat, readable, unique, stable.

    The overrides (``experiment=`` left out, as the sweep's; sorted as Hydra's override_dirname)
    joined by ``,`` when that is a short name of safe characters (``[A-Za-z0-9._=,+-]``): the
    common case reads as before. Otherwise (a path, a list, a long sweep) the name is shortened,
    unsafe characters become ``_``, and ``-`` plus 8 hex digits of the SHA-1 of the overrides is
    appended, so jobs never share a directory. The same overrides always give the same name:
    a relaunched sweep finds its finished jobs. At most READABLE_BYTES + 9 bytes (far below any
    file system's 255); never starts with ``.`` or ``-``; ``defaults`` for no overrides.
    """
    items = sorted(o for o in (str(o).strip() for o in overrides) if o and override_key(o) != "experiment")
    if not items:
        return "defaults"
    full = ",".join(items)
    if (len(full) <= READABLE_BYTES and not _UNSAFE.search(full) and not full.startswith((".", "-"))
            and full.count(",") == len(items) - 1):  # a comma inside a value would be ambiguous
        return full
    digest = hashlib.sha1("\n".join(items).encode("utf-8")).hexdigest()[:8]
    name = _readable(items)
    if name.startswith((".", "-")):
        name = "_" + name[1:]
    return f"{name}-{digest}"


def job_dir_resolver(overrides: Any) -> str:
    """``${ablate_job_dir:${hydra.overrides.task}}``: :func:`job_dir_name` of a job's overrides."""
    if isinstance(overrides, str):
        overrides = [overrides]
    return job_dir_name([str(o) for o in overrides or []])
