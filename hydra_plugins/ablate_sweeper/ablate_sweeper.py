"""The sweeper class Hydra instantiates for ``hydra/sweeper=ablate`` (imports nothing heavy: Hydra
imports every plugin module at start-up)."""

from typing import Any, List

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper


class AblateSweeper(BasicSweeper):
    """Hydra's basic sweeper (same settings, same launchers) whose ``sweep`` runs
    ``ablate.sweeper.run_sweep``: design rows, budget steps, then per-variant learning-rate tuning."""

    def sweep(self, arguments: List[str]) -> Any:
        from ablate.sweeper import run_sweep

        return run_sweep(self, arguments)
