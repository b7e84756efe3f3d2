"""A sweep's jobs and variants: the one definition of both.

A *job* is one list of Hydra overrides (``qkv_sharing=qk_shared seed=1 ...``). A *variant* is
what a job's overrides say once the seed is set aside: the job's overrides of the sweep's swept
keys, without ``seed``, ``experiment=`` and ``hydra...`` keys. The swept keys are those recorded
in the sweep's ``sweep.json`` at its start; where there is none (records copied out of their
sweep, another sweeper), the keys whose values vary across the records. A single run outside a
sweep has no swept keys to go by: all its overrides but those three make its variant.

Every consumer names a variant by :func:`variant_key` (sorted ``key=value`` pairs joined by
``,``): the wandb ``job_type`` of a job (``ablate.run``), the rows of the table
(``ablate.report``) and the keys of ``bench.json`` (``ablate.bench``), so the three always agree.

This module also names each job's directory (:func:`job_dir_name`, Hydra's
``hydra.sweep.subdir``), and imports nothing of the training, report or entry-point modules.
"""

from __future__ import annotations

import hashlib
import json
import re
import warnings
from pathlib import Path
from typing import Any, Iterable

from ablate.results import load_records, sort_records, write_json_atomic

SWEEP_FILE = "sweep.json"
#: set (by ``ablate --redefine``) to run a new sweep definition in a directory that holds another
REDEFINE_ENV = "ABLATE_REDEFINE_SWEEP"
#: set (by ``ablate --plan``) to print what a sweep would run, and run nothing
PLAN_ENV = "ABLATE_PLAN_SWEEP"
NOT_VARIANT_KEYS = frozenset({"seed", "experiment"})


# ---------------------------------------------------------------------------------------------
# Overrides
# ---------------------------------------------------------------------------------------------

def override_key(override: str) -> str:
    """The key an override sets, without Hydra's ``+``/``++``/``~`` prefix: ``+a.b=1`` -> ``a.b``."""
    return str(override).split("=", 1)[0].strip().lstrip("+~")


#: the launchers a sweep may name, by the end of their ``hydra.launcher._target_``
LAUNCHERS = (("BasicLauncher", "basic"), ("JoblibLauncher", "joblib"),
             ("submitit_launcher.LocalLauncher", "submitit_local"), ("SlurmLauncher", "submitit_slurm"))


def launcher_kind(target: str) -> str:
    """The launcher a ``hydra.launcher._target_`` names: ``basic``, ``joblib``, ``submitit_local``,
    ``submitit_slurm``, or another launcher's class name."""
    return next((kind for suffix, kind in LAUNCHERS if target.endswith(suffix)),
                target.rsplit(".", 1)[-1] or "unknown")


def is_variant_key(key: str) -> bool:
    """False for the keys that never tell variants apart: the seed, the experiment, Hydra's own."""
    return key not in NOT_VARIANT_KEYS and key != "hydra" and not key.startswith(("hydra/", "hydra."))


def parse_overrides(overrides: Iterable[str] | None) -> dict[str, str]:
    """Hydra overrides -> ``{key: value}`` in their order, without ``seed``, ``experiment=`` and ``hydra...``.

    Overrides without a value (``~key``) set nothing a variant can be named by and are skipped."""
    out: dict[str, str] = {}
    for item in overrides or []:
        item = str(item).strip()
        if "=" not in item:
            continue
        key, value = override_key(item), item.split("=", 1)[1].strip()
        if is_variant_key(key):
            out[key] = value
    return out


def split_override_string(text: str) -> dict[str, str]:
    """``"a=1,b=2"`` or ``"a=1 b=2"`` -> ``{"a": "1", "b": "2"}`` (values may hold commas: ``[16,32]``)."""
    parts = re.split(r"[,\s]+(?=[+~]*[\w./-]+=)", text.strip())
    return parse_overrides(p for p in parts if p)


def variant_key(overrides: dict[str, Any]) -> str:
    """The canonical name of a variant: sorted ``key=value`` pairs joined by ``,``.

    Sorted, so that the order keys were given in on the command line never splits one variant in
    two. ``bench.json`` is keyed by it, and so is an experiment's ``labels`` map.
    """
    return ",".join(f"{k}={v}" for k, v in sorted(overrides.items()))


def variant_overrides(overrides: Iterable[str] | None, swept: Iterable[str] | None = None) -> dict[str, str]:
    """A job's variant as ``{key: value}`` (in the overrides' order): its overrides of the ``swept``
    keys (all keys when ``swept`` is None), without ``seed``, ``experiment=`` and ``hydra...``."""
    parsed = parse_overrides(overrides)
    if swept is None:
        return parsed
    keys = {override_key(k) for k in swept}
    return {k: v for k, v in parsed.items() if k in keys}


def job_variant(overrides: Iterable[str] | None, swept: Iterable[str] | None = None) -> str:
    """A job's variant by name (:func:`variant_key`), ``""`` for the defaults."""
    return variant_key(variant_overrides(overrides, swept))


# ---------------------------------------------------------------------------------------------
# The jobs of a sweep and sweep.json
# ---------------------------------------------------------------------------------------------

def expand_sweep(arguments: list[str]) -> list[list[str]]:
    """The overrides of every job that Hydra's basic sweeper makes of ``arguments`` (sweep
    params first, then the command line's overrides), in its order."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    loader = GlobalHydra.instance().config_loader() if GlobalHydra.instance().is_initialized() else None
    parser = OverridesParser.create(config_loader=loader)
    batches = BasicSweeper.split_arguments(parser.parse_overrides(arguments), max_batch_size=None)
    return [job for batch in batches for job in batch]


def swept_keys(jobs: list[list[str]]) -> list[str]:
    """The keys that take more than one value across the jobs, in command-line order
    (``seed`` included: ``sweep.json`` records what was swept; variants leave the seed out)."""
    values: dict[str, set[str]] = {}
    for job in jobs:
        for override in job:
            key, _, value = str(override).partition("=")
            values.setdefault(override_key(key), set()).add(value)
    return [key for key, seen in values.items() if len(seen) > 1]


def write_sweep_file(sweep_dir: str | Path, jobs: list[list[str]], definition: list[list[str]] | None = None,
                     swept: list[str] | None = None, **entries: Any) -> Path:
    """``<sweep_dir>/sweep.json``, written atomically: ``{"swept": swept, "jobs": jobs, "definition":
    definition, **entries}``. ``jobs`` are every job launched so far; ``definition`` the jobs the
    command line defines before any learning rate is tuned (default: ``jobs``); ``swept`` the keys
    that name variants (default: those that vary across the definition); ``entries`` e.g. ``tune``
    and ``budget`` (docs/internals.md, "sweep.json")."""
    definition = jobs if definition is None else definition
    path = Path(sweep_dir) / SWEEP_FILE
    write_json_atomic(path, {"swept": swept_keys(definition) if swept is None else swept, "jobs": jobs,
                             "definition": definition, **entries})
    return path


def _sweep_entry(sweep_dir: str | Path, key: str) -> Any:
    """One entry of ``<sweep_dir>/sweep.json`` (None when the file or the entry is missing or unreadable)."""
    try:
        data = json.loads((Path(sweep_dir) / SWEEP_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data.get(key) if isinstance(data, dict) else None


def read_sweep_keys(sweep_dir: str | Path) -> list[str] | None:
    """The swept keys recorded at the start of the sweep (None when unknown)."""
    swept = _sweep_entry(sweep_dir, "swept")
    return [override_key(k) for k in swept] if isinstance(swept, list) else None


def read_sweep_jobs(sweep_dir: str | Path) -> list[list[str]] | None:
    """The jobs (override lists) recorded at the start of the sweep (None when unknown)."""
    jobs = _sweep_entry(sweep_dir, "jobs")
    if not isinstance(jobs, list) or not all(isinstance(job, list) for job in jobs):
        return None
    return [[str(o) for o in job] for job in jobs]


def read_sweep_definition(sweep_dir: str | Path) -> list[list[str]] | None:
    """The jobs the sweep's command line defined (its ``jobs`` for sweeps written before definitions
    were recorded); what a relaunch must match to resume the sweep."""
    jobs = _sweep_entry(sweep_dir, "definition")
    if not isinstance(jobs, list) or not all(isinstance(job, list) for job in jobs):
        return read_sweep_jobs(sweep_dir)
    return [[str(o) for o in job] for job in jobs]


def read_sweep_budget(sweep_dir: str | Path) -> dict | None:
    """The ``budget`` entry of a sweep whose steps were matched (None otherwise):
    ``{"match", "steps": {variant_key: steps}, "baseline_of": {variant_key: its baseline}}``."""
    budget = _sweep_entry(sweep_dir, "budget")
    return budget if isinstance(budget, dict) else None


def read_sweep_tune(sweep_dir: str | Path) -> dict | None:
    """The ``tune`` entry of a sweep whose learning rate is tuned per variant (None otherwise):
    ``{"lr": grid, "default_lr", "seeds", "metric", "chosen": {variant_key: lr}, "scores": ...}``."""
    tune = _sweep_entry(sweep_dir, "tune")
    return tune if isinstance(tune, dict) else None


# ---------------------------------------------------------------------------------------------
# Designs: rows generated from a base (experiment.design)
# ---------------------------------------------------------------------------------------------

def override_value(value: Any) -> str:
    """A config value as Hydra override text: ``True`` -> ``true``, ``[1, 2]`` -> ``[1,2]``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(override_value(v) for v in value) + "]"
    return str(value)


def design_rows(design: Any) -> list[tuple[str, dict[str, str]]]:
    """The rows of ``experiment.design``: ``[(label, {key: value}), ...]``, the base first.

    Both kinds change one thing at a time from ``base``; they differ in what the base is and so
    in how a row reads. ``one_at_a_time``: the base is the reference (e.g. the 2017 Transformer) and
    each row adds one change to it. ``leave_one_out``: the base has every change already (e.g. a
    modern "Transformer++"), and each row reverts one of them to the older choice, so the table
    shows what each choice buys in the company of the others. Every row sets every key of the
    design (the base's value where the row does not change it), so the rows differ only in the
    keys they change and their variants are named by those keys."""
    if not design:
        return []
    base = {str(k): override_value(v) for k, v in dict(design.get("base") or {}).items()}
    changes = {str(label): {str(k): override_value(v) for k, v in dict(ov).items()}
               for label, ov in dict(design["changes"]).items()}
    keys = list(base) + [k for ov in changes.values() for k in ov if k not in base]
    # a key only some rows change takes, in the others, its value in the base or else the config's
    rows = [(str(design.get("base_label") or "base"), dict(base))]
    rows += [(label, {**base, **ov}) for label, ov in changes.items()]
    return [(label, {k: row[k] for k in keys if k in row}) for label, row in rows]


def design_keys(design: Any) -> list[str]:
    """The keys that tell a design's rows apart: set to different values, or set by some rows only
    (``norm.placement=post`` in one row, the config's own value in the others). They name its
    variants, so they are swept keys of its sweep even when only one row sets them."""
    rows = design_rows(design)
    keys = list(dict.fromkeys(k for _, row in rows for k in row))
    return [k for k in keys if len({r.get(k) for _, r in rows}) > 1]


def design_labels(design: Any) -> dict[str, str]:
    """``{variant_key: label}`` of a design's rows (named by :func:`design_keys`)."""
    varying = set(design_keys(design))
    return {variant_key({k: v for k, v in row.items() if k in varying}): label for label, row in design_rows(design)}


def job_signature(overrides: Iterable[str] | None) -> tuple[str, ...]:
    """A job's identity within a sweep: its overrides, order aside."""
    return tuple(sorted(str(o) for o in overrides or []))


def same_jobs(a: Iterable[Iterable[str]], b: Iterable[Iterable[str]]) -> bool:
    """Whether two sweep definitions make the same jobs."""
    return {job_signature(j) for j in a} == {job_signature(j) for j in b}


def sweep_records(records: list[dict], jobs: Iterable[Iterable[str]] | None) -> list[dict]:
    """The records that are jobs of the sweep definition ``jobs`` (all of them when it is unknown):
    a directory reused with ``--redefine`` may hold records of an earlier definition."""
    if jobs is None:
        return records
    wanted = {job_signature(j) for j in jobs}
    return [r for r in records if job_signature(r.get("overrides")) in wanted]


def load_sweep_records(sweep_dir: str | Path) -> list[dict]:
    """A sweep directory's records that belong to the sweep its ``sweep.json`` defines; others
    (left by an earlier definition) are named in a warning and left out."""
    records = load_records(sweep_dir)
    kept = sweep_records(records, read_sweep_jobs(sweep_dir))
    if len(kept) < len(records):
        warnings.warn(f"{sweep_dir}: leaving out {len(records) - len(kept)} record(s) of jobs that are not in "
                      f"this sweep's definition ({SWEEP_FILE}): they come from an earlier sweep in this directory",
                      stacklevel=2)
    return kept


# ---------------------------------------------------------------------------------------------
# Variants of a set of records (the table's rows, the benchmark's variants)
# ---------------------------------------------------------------------------------------------

def varying_keys(records: list[dict]) -> set[str]:
    """The variant keys whose value differs between some of the records (absent counts as a value)."""
    parsed = [parse_overrides(r.get("overrides")) for r in records]
    keys = set().union(*parsed) if parsed else set()
    return {k for k in keys if len({p.get(k) for p in parsed}) > 1}


def _record_sweep_dir(record: dict) -> Path | None:
    """The directory a record's job directory sits in: its sweep's, which holds ``sweep.json``."""
    path = record.get("_path")
    return Path(path).parent.parent if path else None


def records_swept_keys(records: list[dict]) -> set[str]:
    """The swept keys of the sweep(s) the records come from: those of their ``sweep.json`` where
    every record's sweep directory has one, else the keys whose values vary across the records."""
    dirs = {_record_sweep_dir(r) for r in records}
    found = [read_sweep_keys(d) for d in dirs if d is not None]
    if records and None not in dirs and all(keys is not None for keys in found):
        return {k for keys in found for k in keys}
    return varying_keys(records)


def variants(records: list[dict], swept: Iterable[str] | None = None) -> dict[str, dict[str, str]]:
    """The variants of the records in sweep order: ``{variant_key: {key: value}}``.

    ``swept`` defaults to :func:`records_swept_keys`."""
    swept = records_swept_keys(records) if swept is None else set(swept)
    out: dict[str, dict[str, str]] = {}
    for record in sort_records(records):
        variant = variant_overrides(record.get("overrides"), swept)
        out.setdefault(variant_key(variant), variant)
    return out


def group_by_variant(records: list[dict], swept: Iterable[str] | None = None) -> dict[str, list[dict]]:
    """``{variant_key: [its records]}`` in sweep order (the table's rows, the benchmark's variants)."""
    swept = records_swept_keys(records) if swept is None else set(swept)
    groups: dict[str, list[dict]] = {key: [] for key in variants(records, swept)}
    for record in sort_records(records):
        groups[job_variant(record.get("overrides"), swept)].append(record)
    return groups


# ---------------------------------------------------------------------------------------------
# Job directories
# ---------------------------------------------------------------------------------------------

JOB_DIR_RESOLVER = "ablate_job_dir"
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


def _job_dir_resolver(overrides: Any) -> str:
    if isinstance(overrides, str):
        overrides = [overrides]
    return job_dir_name([str(o) for o in overrides or []])


def register_job_dir_resolver() -> None:
    """Make ``${ablate_job_dir:${hydra.overrides.task}}`` (``hydra.sweep.subdir``) resolvable.

    Hydra resolves the subdir in the process that runs the job: the ``ablate`` process itself
    (basic launcher), a joblib worker or a submitit job. ``ablate.cli`` calls this at import, in
    the ``ablate`` process; the other launchers do not import ``ablate.cli`` in their job processes,
    but they restore Hydra's state there (``Singleton.set_state``), which carries every OmegaConf
    resolver registered in the launching process (this one pickled by reference to
    ``ablate.sweep``). Calling it again does nothing."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver(JOB_DIR_RESOLVER):
        OmegaConf.register_new_resolver(JOB_DIR_RESOLVER, _job_dir_resolver)
