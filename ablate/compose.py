"""The config composed in process, and the tiny config.

* :func:`compose`: the config ``ablate OVERRIDES`` composes (``ablate/conf``, resolvers registered),
  through Hydra's compose API: for ``ablate``'s own messages, ``ablate-bench``, ``ablate-coord-check``,
  the scripts and the tests;
* :func:`hydra_initialized`: Hydra's global state on that config tree for a block, for code that
  reads it besides composing (``ablate-bench``'s planner: Hydra's config loader);
* :data:`TINY`, :func:`tiny_overrides`: the overrides of a tiny model that trains in seconds on a
  CPU (the tests' runs), and what a test changes in them, by key.

Hydra is imported when something is composed, not with this module (``ablate``'s start-up).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterable, Iterator

from ablate.paths import CONF_DIR

if TYPE_CHECKING:
    from omegaconf import DictConfig

#: The held-out sets of a tiny run: 32 validation and 32 test examples, not the task's hundreds.
#: After a handful of steps, the built-in task's 256 validation windows (evaluated twice) and 256
#: test windows took most of a tiny run: 11-16 CPU-s for one run through the CLI, 7-10 with these.
HELD_OUT: tuple[str, ...] = ("task.n_val=32", "task.n_test=32")

#: A tiny model under ``trainer=debug`` (6 steps, no progress bar), 2 untimed steps, no re-timing
#: at a sweep's end (``measure.retime``: a tiny model's speed is no result; the tests of the
#: re-timing ask for it), and small held-out sets (:data:`HELD_OUT`).
TINY: tuple[str, ...] = ("trainer=debug", "model.d_model=16", "model.n_heads=2", "model.n_layers=1",
                         "task.batch_size=8", "measure.warmup_steps=2", "measure.retime=never", *HELD_OUT)


def _key(override: str) -> str:
    """``model.d_model`` of ``model.d_model=16`` (``+``/``++``/``~`` prefixes left out)."""
    return override.split("=", 1)[0].lstrip("+~")


def tiny_overrides(*changes: str, without: Iterable[str] = ()) -> list[str]:
    """:data:`TINY` with ``changes``: one that sets a key TINY sets takes its place, another is
    added at the end; then the keys in ``without`` left out (``"trainer"``: the default trainer
    instead of ``trainer=debug``; ``"measure.memory"``: memory measured after all). A change of
    ``task`` keeps the :data:`HELD_OUT` sizes that task has (``[*TINY, "task=glue"]`` would set a
    test size glue has not)."""
    changed = {_key(c): c for c in changes}
    dropped = set(without)
    if "task" in changed:  # another task: the held-out sizes it has (a file's test split has none)
        keys = _task_keys(changed["task"].split("=", 1)[1])
        dropped |= {_key(o) for o in HELD_OUT if _key(o).split(".", 1)[1] not in keys and _key(o) not in changed}
    out = [changed.pop(_key(o), o) for o in TINY] + list(changed.values())
    return [o for o in out if _key(o) not in dropped]


def _task_keys(name: str) -> set[str]:
    """The keys ``task=NAME`` sets in the package's config tree, its defaults' included (glue_sst2:
    glue's); none for a task that is not there (a user's, from ``--config-dir``)."""
    from omegaconf import OmegaConf

    path = CONF_DIR / "task" / f"{name}.yaml"
    if not path.is_file():
        return set()
    node = OmegaConf.to_container(OmegaConf.load(path))
    keys = set(node) - {"defaults"}
    for parent in node.get("defaults", []):
        if isinstance(parent, str) and parent != "_self_":
            keys |= _task_keys(parent)
    return keys


_depth = 0  # hydra_initialized blocks open (Hydra cannot be initialised twice: an inner block uses the outer's)


@contextmanager
def hydra_initialized() -> Iterator[None]:
    """Hydra initialised on the package's config tree for the block, and Hydra's state before it
    back after it. A block (or :func:`compose`) inside another uses the outer one's."""
    global _depth
    from hydra import initialize_config_dir

    if _depth:
        yield
        return
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        _depth += 1
        try:
            yield
        finally:
            _depth -= 1


def compose(overrides: Iterable[str] = (), *, hydra_config: bool = False) -> DictConfig:
    """The config ``ablate`` composes for ``overrides`` (its ``hydra`` node too with
    ``hydra_config``: what a sweeper gets), resolvers registered. Raises Hydra's errors.

    A composition costs ~0.17 CPU-s here (Hydra reads the config files once per process:
    ``hydra_plugins/ablate_config_cache``); the same one asked for again (same overrides, working
    directory and config files) is a copy of the first (~0.015 s), which the caller may change."""
    import copy

    from hydra import compose as hydra_compose

    from ablate.resolvers import register_resolvers

    register_resolvers()
    overrides = list(overrides)
    key = (tuple(overrides), hydra_config, os.getcwd(), _conf_state())
    if key not in _composed:
        with hydra_initialized():
            _composed[key] = hydra_compose(config_name="config", overrides=overrides, return_hydra_config=hydra_config)
        while len(_composed) > _REMEMBERED:
            _composed.popitem(last=False)
    _composed.move_to_end(key)
    return copy.deepcopy(_composed[key])


#: how many compositions :func:`compose` remembers (the latest)
_REMEMBERED = 64
_composed: OrderedDict[tuple, DictConfig] = OrderedDict()


def _conf_state() -> tuple[int, int]:
    """The config tree's files as they are now: how many, and their latest change."""
    count = latest = 0
    for root, _, files in os.walk(CONF_DIR):
        for name in files:
            count += 1
            latest = max(latest, os.stat(os.path.join(root, name)).st_mtime_ns)
    return count, latest
