"""Tasks and the LightningDataModule.

A task YAML ``conf/task/<x>.yaml`` names its class by ``_target_`` (a subclass of :class:`Task`,
whose docstring states the contract) and holds its constructor's keywords. ``build_task(node)``
makes one; ``check(target, settings)`` lists what is wrong with a task config without reading
any data (``ablate.config`` runs it before training); ``AblateDataModule(task_cfg, seed)`` is
what training uses.

Every batch is ``(tokens, targets)``: LongTensors ``(B, T)``, ``targets == -100`` where nothing
is predicted.

Every task has a training stream and two held-out splits (:data:`SPLITS`): ``validation``, for
choices made while developing, and ``test``, the reported numbers. ``Task.eval_batches(length,
split="test")`` gives either; neither depends on the run seed.

``AblateDataModule`` is imported lazily, so checking configs does not import Lightning.
"""

from typing import TYPE_CHECKING, Any

from .base import IGNORE, SPLITS, SyntheticTask, Task, build_task, check
from .text import DEFAULT_CORPUS_MODULES

if TYPE_CHECKING:
    from .datamodule import AblateDataModule

__all__ = ["AblateDataModule", "build_task", "check", "Task", "SyntheticTask", "IGNORE", "SPLITS",
           "DEFAULT_CORPUS_MODULES"]


def __getattr__(name: str) -> Any:
    if name == "AblateDataModule":
        from .datamodule import AblateDataModule

        return AblateDataModule
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
