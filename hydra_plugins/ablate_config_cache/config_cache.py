"""Hydra reads ablate's config files once per process, not once per composition.

Hydra composes a config anew for every job: ``ablate -m`` composes each job when it plans the sweep,
a job process (joblib, submitit, SLURM) composes its own job again, and ``ablate --plan``,
``ablate-bench`` and the scripts compose dozens.
Each composition parses the same YAML files again (Hydra keeps them only within one composition):
about a quarter of its time. Two Hydra plugins (both found by Hydra's scan of ``hydra_plugins``):

* :class:`CachedFileSource` (``ablate+file://``) and :class:`CachedPackageSource` (``ablate+pkg://``):
  Hydra's own sources for ``file://`` and ``pkg://`` with what they load kept for the process, a file's
  by its path, size and modification time (an edited file is read again). Each load is a copy: Hydra
  changes what a source returns.
* :class:`AblateSearchPath`: where the search path's primary config directory is ablate's config
  tree, its ``main`` and ``hydra`` entries go through those sources. Any other Hydra app in the same
  environment, and a user's own config directories (``--config-dir``), are read as Hydra reads them.

Imports nothing heavy: Hydra imports every plugin module at start-up.
"""

import copy
import os
from typing import Dict, List, Optional, Tuple

from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.object_type import ObjectType
from hydra.plugins.config_source import ConfigResult, ConfigSource
from hydra.plugins.search_path_plugin import SearchPathPlugin

#: what the sources loaded, for the process: (scheme, source path, config path) -> (its version, the
#: config). Module-level: Hydra deep-copies its sources for each composition (CachingConfigRepository),
#: which would copy a cache held by a source.
_loaded: Dict[Tuple[str, str, str], Tuple[Tuple, ConfigResult]] = {}


class _KeptSource(ConfigSource):
    """Hydra's source for :attr:`inner_scheme`, with each config it loads kept."""

    inner_scheme = ""

    def __init__(self, provider: str, path: str) -> None:
        from hydra._internal.sources_registry import SourcesRegistry
        from hydra.core.plugins import Plugins

        super().__init__(provider=provider, path=path)
        Plugins.instance()  # Hydra's sources registered (done already where Hydra builds this source)
        self.inner = SourcesRegistry.instance().resolve(self.inner_scheme)(provider, f"{self.inner_scheme}://{self.path}")

    def _version(self, config_path: str) -> Optional[Tuple]:
        """What tells this config's loads apart (None: do not keep it)."""
        return ()

    def load_config(self, config_path: str) -> ConfigResult:
        version = self._version(config_path)
        if version is None:
            return self.inner.load_config(config_path)
        key = (self.inner_scheme, self.path, config_path)
        if key not in _loaded or _loaded[key][0] != version:  # an edited file replaces what was kept of it
            _loaded[key] = version, self.inner.load_config(config_path)
        kept = _loaded[key][1]
        return ConfigResult(provider=self.provider, path=kept.path, config=copy.deepcopy(kept.config),
                            header=dict(kept.header))

    def available(self) -> bool:
        return self.inner.available()

    def is_group(self, config_path: str) -> bool:
        return self.inner.is_group(config_path)

    def is_config(self, config_path: str) -> bool:
        return self.inner.is_config(config_path)

    def exists(self, config_path: str) -> bool:
        return self.inner.exists(config_path)

    def list(self, config_path: str, results_filter: Optional[ObjectType]) -> List[str]:
        return self.inner.list(config_path, results_filter)


class CachedFileSource(_KeptSource):
    """``file://``, each file kept until it changes (its size or modification time)."""

    inner_scheme = "file"

    @staticmethod
    def scheme() -> str:
        return "ablate+file"

    def _version(self, config_path: str) -> Optional[Tuple]:
        try:
            stat = os.stat(os.path.join(self.path, self._normalize_file_name(config_path)))
        except OSError:  # not there: Hydra's source says so
            return None
        return stat.st_size, stat.st_mtime_ns


class CachedPackageSource(_KeptSource):
    """``pkg://``: an installed package's configs (Hydra's own), which do not change while a process runs."""

    inner_scheme = "pkg"

    @staticmethod
    def scheme() -> str:
        return "ablate+pkg"


class AblateSearchPath(SearchPathPlugin):
    """ablate's config tree and Hydra's own configs through the kept sources."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        from ablate.paths import CONF_DIR

        elements = search_path.get_path()
        if not any(e.provider == "main" and _directory(e.path) == os.path.realpath(CONF_DIR) for e in elements):
            return
        for element in elements:
            scheme, _, rest = element.path.rpartition("://")
            if element.provider in ("main", "hydra") and scheme in ("", "file", "pkg"):
                element.path = f"ablate+{scheme or 'file'}://{rest}"


def _directory(path: str) -> Optional[str]:
    """The real directory of a ``file://`` (or schemeless) search path entry; None for another scheme."""
    scheme, _, rest = path.rpartition("://")
    return os.path.realpath(rest) if scheme in ("", "file") else None
