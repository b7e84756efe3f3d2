"""The task registry (``TASKS``: name -> class), config conversion and config checks."""

from __future__ import annotations

from typing import Any, Mapping

from .base import Task
from .digits import DIGIT_TASKS
from .files import Classify, Tagging
from .glue import GLUE_CLASSES, UNSUPPORTED
from .recall import Recall
from .text import LanguageModel

#: every task name users can type (``task.name``) -> its class. The GLUE tasks are registered
#: under their GLUE names (``task=glue task.name=sst2``); ``conf/task/glue.yaml`` sets sst2.
TASKS: dict[str, type[Task]] = {
    **DIGIT_TASKS,
    Recall.name: Recall,
    LanguageModel.name: LanguageModel,
    Classify.name: Classify,
    Tagging.name: Tagging,
    **GLUE_CLASSES,
}


def task_config(task_cfg: Any) -> dict:
    """A plain, resolved ``dict`` of a task config (``DictConfig`` or mapping)."""
    try:
        from omegaconf import DictConfig, OmegaConf
    except ImportError:  # pragma: no cover
        DictConfig = ()  # type: ignore
    if isinstance(task_cfg, DictConfig):
        return OmegaConf.to_container(task_cfg, resolve=True)  # type: ignore[return-value]
    if isinstance(task_cfg, Mapping):
        return dict(task_cfg)
    raise TypeError(f"a task config must be a mapping, got {type(task_cfg).__name__}")


def _lookup(name: Any) -> tuple[type[Task] | None, str | None]:
    if name in TASKS:
        return TASKS[name], None
    if name in UNSUPPORTED:
        return None, f"task.name={name!r}: {UNSUPPORTED[name]}; valid choices: {', '.join(TASKS)}"
    if name == "glue":
        return None, ("task.name='glue' needs a GLUE task name, e.g. task=glue task.name=sst2; "
                      f"valid choices: {', '.join(TASKS)}")
    return None, f"task.name={name!r} is not a known task; valid choices: {', '.join(TASKS)}"


def task_problems(task_cfg: Any) -> list[str]:
    """Human-readable problems of a task config (empty when it is fine). Checks the name, the
    keys, ``seq_len``/``batch_size`` (positive), ``eval_lengths`` (not shorter than
    ``seq_len``), ``path`` (present and existing where needed) and task-specific constraints.
    Cheap: reads no data files."""
    try:
        cfg = task_config(task_cfg)
    except Exception as e:  # noqa: BLE001 - reported, not raised
        return [f"task config cannot be read: {e}"]
    if "name" not in cfg:
        return [f"task.name is missing; valid choices: {', '.join(TASKS)}"]
    name = cfg.pop("name")
    cls, err = _lookup(name)
    if cls is None:
        return [err]  # type: ignore[list-item]
    return cls.problems(cfg)


def build_task(task_cfg: Any) -> Task:
    """Construct the task of a config; raises ``ValueError`` listing every problem."""
    cfg = task_config(task_cfg)
    name = cfg.pop("name", None)
    cls, err = _lookup(name)
    if cls is None:
        raise ValueError(err)
    problems = cls.problems(cfg)
    if problems:
        raise ValueError("invalid task config:\n  " + "\n  ".join(problems))
    return cls(**cfg)
