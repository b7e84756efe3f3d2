"""scripts/setup.sh checks its prerequisites first and names what to install."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # every test runs scripts/setup.sh

REPO = Path(__file__).resolve().parent.parent
REAL_PYTHON = shutil.which("python3") or sys.executable


def _checkout(tmp_path: Path) -> Path:
    """A checkout without .venv: setup.sh as a newcomer meets it."""
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "setup.sh", root / "scripts" / "setup.sh")
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    return root


def _bin(tmp_path: Path, tools: list[str]) -> Path:
    """A PATH directory holding only ``tools`` (links to the real ones)."""
    d = tmp_path / "bin"
    d.mkdir()
    for tool in tools:
        os.symlink(shutil.which(tool), d / tool)
    return d


def _fake_python(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "fake-python"
    path.write_text(f"#!/bin/sh\n{body}\nexec {REAL_PYTHON} \"$@\"\n")
    path.chmod(0o755)
    return path


def _setup(root: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["/bin/bash", str(root / "scripts" / "setup.sh")], env=env, text=True,
                          capture_output=True, timeout=60)


def test_missing_make_is_named(tmp_path: Path) -> None:
    root = _checkout(tmp_path)
    path = _bin(tmp_path, ["dirname", "python3"])
    out = _setup(root, {"PATH": str(path), "HOME": str(tmp_path)})
    assert out.returncode == 1 and "'make' is not installed" in out.stderr and "apt-get install make" in out.stderr
    assert not (root / ".venv").exists()


def test_python_without_venv_is_named(tmp_path: Path) -> None:
    root = _checkout(tmp_path)
    fake = _fake_python(tmp_path, 'case "$*" in *"import venv"*) echo "No module named ensurepip" >&2; exit 1;; esac')
    out = _setup(root, {**os.environ, "PYTHON": str(fake)})
    assert out.returncode == 1 and "python3-venv" in out.stderr, out.stderr
    assert not (root / ".venv").exists()


def test_old_python_is_named(tmp_path: Path) -> None:
    root = _checkout(tmp_path)
    fake = _fake_python(tmp_path, 'case "$*" in *version_info*) exit 1;; *python_version*) echo 3.8.10; exit 0;; esac')
    out = _setup(root, {**os.environ, "PYTHON": str(fake)})
    assert out.returncode == 1 and "Python >= 3.10" in out.stderr and "3.8.10" in out.stderr, out.stderr
    assert not (root / ".venv").exists()
