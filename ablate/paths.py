"""Where the package's own files are: the config tree ships inside it (``ablate/conf``)."""

from pathlib import Path

CONF_DIR = Path(__file__).resolve().parent / "conf"
