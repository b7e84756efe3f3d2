"""Tasks and the LightningDataModule (DESIGN §3).

``TASKS`` maps every task name (``task.name``) to its class; a YAML ``conf/task/<x>.yaml`` holds
``name`` plus the constructor keywords of that class. ``AblateDataModule(task_cfg, seed)`` is
what training uses; ``task_problems(task_cfg)`` lists what is wrong with a task config without
reading any data (used by ``ablate.config.validate``).

Every batch is ``(tokens, targets)``: LongTensors ``(B, T)``, ``targets == -100`` where nothing
is predicted.

``AblateDataModule`` is imported lazily, so checking configs does not import Lightning.
"""

from typing import TYPE_CHECKING, Any

from .base import IGNORE, Task
from .registry import TASKS, build_task, task_config, task_problems
from .text import DEFAULT_CORPUS_MODULES

if TYPE_CHECKING:
    from .datamodule import AblateDataModule

__all__ = ["TASKS", "AblateDataModule", "task_problems", "build_task", "task_config", "Task",
           "IGNORE", "DEFAULT_CORPUS_MODULES"]


def __getattr__(name: str) -> Any:
    if name == "AblateDataModule":
        from .datamodule import AblateDataModule

        return AblateDataModule
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
