"""Where the package's own files are (the config tree ships inside it: ``ablate/conf``), and the
per-user cache."""

import os
from pathlib import Path

CONF_DIR = Path(__file__).resolve().parent / "conf"


def user_cache() -> Path:
    """The per-user cache: ``$ABLATE_CACHE_DIR``, else ``$XDG_CACHE_HOME/ablate``, else ``~/.cache/ablate``."""
    root = os.environ.get("ABLATE_CACHE_DIR")
    return Path(root) if root else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ablate"
