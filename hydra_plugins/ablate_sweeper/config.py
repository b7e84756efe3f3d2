"""The config node of ``hydra/sweeper=ablate``: Hydra's basic sweeper's keys, plus ``plan`` and
``redefine`` (``ablate --plan`` and ``ablate --redefine`` set them)."""

from dataclasses import dataclass
from typing import Dict, Optional

from hydra.core.config_store import ConfigStore


@dataclass
class AblateSweeperConf:
    _target_: str = "hydra_plugins.ablate_sweeper.ablate_sweeper.AblateSweeper"
    max_batch_size: Optional[int] = None  # launch at most this many jobs per batch (None: each stage at once)
    params: Optional[Dict[str, str]] = None  # what the sweep varies, as in the basic sweeper
    plan: bool = False  # true (ablate --plan): print every job, what is done already and an estimate; run nothing
    redefine: bool = False  # true (ablate --redefine): run this definition in a directory that holds another


ConfigStore.instance().store(group="hydra/sweeper", name="ablate", node=AblateSweeperConf, provider="ablate")
