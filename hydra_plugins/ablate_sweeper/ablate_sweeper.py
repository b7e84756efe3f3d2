"""The sweeper class Hydra instantiates for ``hydra/sweeper=ablate`` (imports nothing heavy: Hydra
imports every plugin module at start-up).

Hydra finds it two ways: 1.3 scans the ``hydra_plugins`` namespace package; 1.4 also loads the
``hydra.plugins`` entry point (pyproject.toml) that names this class, which imports only this
module, so this module imports the one that registers ``hydra/sweeper=ablate``'s config node."""

from typing import Any, Dict, List, Optional

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

from hydra_plugins.ablate_sweeper.config import AblateSweeperConf

__all__ = ["AblateSweeper", "AblateSweeperConf"]


class AblateSweeper(BasicSweeper):
    """Hydra's basic sweeper (same settings, same launchers) whose ``sweep`` runs
    ``ablate.sweeper.run_sweep``: plan once (design rows, budget steps, tuning stages), validate
    every job, record the plan, then launch it. ``plan``: print the plan and run nothing
    (``ablate --plan``); ``redefine``: run this definition in a sweep directory that holds
    another (``ablate --redefine``)."""

    def __init__(self, max_batch_size: Optional[int] = None, params: Optional[Dict[str, str]] = None,
                 plan: bool = False, redefine: bool = False) -> None:
        super().__init__(max_batch_size=max_batch_size, params=params)
        self.plan, self.redefine = bool(plan), bool(redefine)

    def sweep(self, arguments: List[str]) -> Any:
        from ablate.sweeper import run_sweep

        return run_sweep(self, arguments)
