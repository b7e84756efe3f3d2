"""The two test tiers can't drift apart: `make test` runs every test, `make test-fast` the ones not
marked `slow` (a marker pytest knows, strictly), and a fast test that starts a process fails."""

from __future__ import annotations

import multiprocessing
import os
import re
import shlex
import subprocess
from pathlib import Path

import conftest
import pytest

REPO = Path(__file__).resolve().parent.parent


def pytest_ini() -> dict:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]


def make_targets() -> dict[str, tuple[list[str], list[list[str]]]]:
    """The Makefile's rules: {target: (prerequisites, recipe commands split as a shell does)}, its
    ``NAME := value`` variables expanded."""
    rules: dict[str, tuple[list[str], list[list[str]]]] = {}
    variables: dict[str, str] = {}
    current = None
    for line in (REPO / "Makefile").read_text().splitlines():
        variable = re.match(r"(\w+)\s*:=\s*(.*)", line)
        rule = re.match(r"([\w.-]+):(?!=)([^#]*)", line)
        if variable:
            variables[variable.group(1)] = variable.group(2).strip()
            current = None
        elif rule and not line.startswith("\t"):
            current = rules[rule.group(1)] = (rule.group(2).split(), [])
        elif line.startswith("\t") and current is not None:
            command = re.sub(r"\$\((\w+)\)", lambda m: variables[m.group(1)], line.strip())
            current[1].append(shlex.split(command))
        elif not line.strip().startswith("#"):
            current = None
    return rules


def pytest_command(target: str) -> list[str]:
    """The arguments of the pytest that ``make target`` runs (after ``.venv/bin/python -m pytest``)."""
    prerequisites, recipe = make_targets()[target]
    assert "setup" in prerequisites, f"make {target} must depend on setup (it creates .venv)"
    start = [".venv/bin/python", "-m", "pytest"]
    (command,) = [c[i + 3:] for c in recipe for i in range(len(c)) if c[i:i + 3] == start]
    return command


def test_slow_is_declared_and_markers_are_strict() -> None:
    ini = pytest_ini()
    assert any(re.match(r"slow:\s*end-to-end or takes seconds", m) for m in ini["markers"]), ini.get("markers")
    addopts = shlex.split(ini["addopts"])
    assert "--strict-markers" in addopts, "a misspelt marker would silently put a slow test in the fast tier"
    assert not {"-m", "-k"} & set(addopts), "addopts applies to `make test` too: it must select every test"


def test_make_test_runs_everything_and_test_fast_leaves_out_the_slow_ones() -> None:
    everything = pytest_command("test")
    assert not {"-m", "-k", "--deselect", "--ignore", "--ignore-glob"} & set(everything), everything
    assert not any(arg.startswith(("-m", "-k", "--deselect=", "--ignore")) for arg in everything), everything
    fast = pytest_command("test-fast")
    assert fast[fast.index("-m") + 1] == "not slow", fast
    assert not {"-k", "--deselect", "--ignore"} & set(fast), fast


@pytest.mark.parametrize("start", [
    lambda: subprocess.run(["true"]),
    lambda: subprocess.check_output("true", shell=True),
    lambda: os.system("true"),
    lambda: multiprocessing.get_context("fork").Process(target=print).start(),
    lambda: multiprocessing.get_context("spawn").Process(target=print).start(),
], ids=["run", "check_output", "os.system", "fork", "spawn"])
def test_a_fast_test_that_starts_a_process_fails_naming_the_marker(start) -> None:
    with pytest.raises(pytest.fail.Exception, match=re.escape(conftest.SLOW_HINT)):
        start()
    conftest._violations.clear()  # refused as it should be: this test itself passes


@pytest.mark.slow
def test_a_slow_test_may_start_one() -> None:
    assert subprocess.run(["true"]).returncode == 0 and os.system("true") == 0
