"""What exists: every option of every config group, built-in and from a user's ``--config-dir``.

``ablate --list`` prints it. Options are the YAML files of ``<config dir>/<group>/``; a user's
directory is searched first, as Hydra's ``--config-dir`` is. An option's description is the
first line of its YAML's leading comment (each built-in one cites its paper), else the first
line of its ``_target_``'s docstring.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from ablate.components import describe, import_target
from ablate.config import CONFIG_GROUPS
from ablate.paths import CONF_DIR


@dataclass
class Option:
    group: str
    name: str
    path: Path
    target: str | None
    description: str
    builtin: bool


def _leading_comment(text: str) -> str:
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("# @package"):
            continue
        if stripped.startswith("#"):
            return stripped.lstrip("#").strip()
        if stripped:
            return ""
    return ""


def _target(text: str) -> str | None:
    for line in text.splitlines():
        if line.startswith("_target_:"):
            return line.split(":", 1)[1].strip().strip("'\"") or None
    return None


def read_option(group: str, path: Path, builtin: bool) -> Option:
    text = path.read_text(encoding="utf-8")
    target = _target(text)
    description = _leading_comment(text)
    if not description and target:
        try:
            description = describe(import_target(target))
        except Exception as error:  # noqa: BLE001 - listing must not fail on one bad option
            description = f"(cannot import: {type(error).__name__}: {error})"
    return Option(group, path.stem, path, target, description, builtin)


def options(group: str, config_dirs: Iterable[str | Path] = ()) -> list[Option]:
    """The options of ``group``: the user's ``config_dirs`` first (they win a name clash), then the
    built-in tree; sorted by name."""
    found: dict[str, Option] = {}
    for directory, builtin in [*((Path(d), False) for d in config_dirs), (CONF_DIR, True)]:
        for path in sorted((directory / group).glob("*.yaml")):
            found.setdefault(path.stem, read_option(group, path, builtin))
    return sorted(found.values(), key=lambda o: o.name)


def render(config_dirs: Iterable[str | Path] = ()) -> str:
    """The text ``ablate --list`` prints: per group, one line per option."""
    config_dirs = list(config_dirs)
    lines = []
    for group in CONFIG_GROUPS:
        opts = options(group, config_dirs)
        lines.append(f"{group}:")
        width = max((len(o.name) for o in opts), default=0) + 2
        for o in opts:
            mark = "" if o.builtin else "  [from --config-dir]"
            target = f"  ({o.target})" if o.target else ""
            lines.append(f"  {o.name:<{width}}{o.description}{target}{mark}")
        lines.append("")
    lines.append("Pick one per group: ablate GROUP=OPTION (e.g. ablate pos_enc=rope); "
                 "sweep several with -m GROUP=A,B.")
    return "\n".join(lines)
