"""The code a run ran, as a tag every logger and record carries: ``git:<commit>`` or ``ablate:<version>``."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path


def code_version() -> str:
    """The code a run ran, as a tag: ``git:<commit>`` of the checkout ``ablate`` is imported from
    (a source tree or an editable install), else ``ablate:<package version>``. Read from the files
    in ``.git`` (no ``git`` process); uncommitted changes are not seen."""
    commit = _git_commit(Path(__file__).resolve().parent.parent / ".git")
    if commit:
        return f"git:{commit[:12]}"
    try:
        return f"ablate:{importlib.metadata.version('ablate')}"
    except importlib.metadata.PackageNotFoundError:
        return "ablate:unknown"


def _git_commit(git: Path) -> str | None:
    """The commit HEAD names in the git directory ``git`` (a ``.git`` file points to a worktree's)."""
    sha = re.compile(r"[0-9a-f]{40}")
    try:
        if git.is_file():  # a worktree or a submodule: "gitdir: PATH"
            git = (git.parent / git.read_text().strip().removeprefix("gitdir:").strip()).resolve()
        head = (git / "HEAD").read_text().strip()
        if sha.fullmatch(head):  # detached
            return head
        ref = head.removeprefix("ref:").strip()
        common = (git / (git / "commondir").read_text().strip()).resolve() if (git / "commondir").is_file() else git
        for root in dict.fromkeys((git, common)):
            if (root / ref).is_file():
                return next(iter(sha.findall((root / ref).read_text())), None)
        packed = (common / "packed-refs").read_text() if (common / "packed-refs").is_file() else ""
        return next((line.split()[0] for line in packed.splitlines() if line.endswith(f" {ref}")), None)
    except (OSError, UnicodeDecodeError):
        return None
