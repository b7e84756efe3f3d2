"""The import graph of ``ablate``: no cycles, and every import points down the layers.

Every import of an ``ablate`` module anywhere in a file counts: at module level and inside
functions (a function-local import is still a dependency, only a later one), absolute and
relative, and ``from ablate.x import y`` is an import of the module ``ablate.x.y`` when ``y``
is a module, else of ``ablate.x``.

Rule for packages: importing ``a.b.c`` is an edge to the module ``a.b.c`` only, not to the
packages above it (whose ``__init__`` Python runs first). So a package ``__init__`` may import
its own submodules (``ablate.report`` re-exports its parts); a submodule that imports its
package (``from ablate.report import x`` inside ``ablate/report/table.py``) is an edge back to
the ``__init__``, which closes a cycle and fails.

Layers, lowest first (docs/internals.md, "Layers"); a module imports from its own layer and
the layers below it, never above:

    foundation      ablate, ablate.paths, ablate.code_version, ablate.components, ablate.stops, ablate.heap, ablate.sequential
    records         ablate.results, ablate.record, ablate.record_checks, ablate.sweep, ablate.jobdir, ablate.seed_spreads   (what jobs write and sweeps are made of)
    model and data  ablate.model.*, ablate.data.*
    training        ablate.lit, ablate.curve, ablate.optim, ablate.measure, ablate.memory, ablate.tracking, ablate.wandb_history, ablate.loggers,
                    ablate.settings, ablate.config, ablate.catalog, ablate.resolvers, ablate.job, ablate.launchers, ablate.compose, ablate.console, ablate.train,
                    ablate.run, ablate.timing, ablate.step_times, ablate.pace, ablate.meters, ablate.finetune
    planning        ablate.planner, ablate.tuning, ablate.finetune_plan, ablate.seed_rounds, ablate.power, ablate.preview
    report          ablate.report.*
    entry points    ablate.cli, ablate.sweeper, ablate.callbacks, ablate.bench, ablate.report.cli

A new module must be given a layer here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import ablate

PACKAGE_DIR = Path(ablate.__file__).resolve().parent

LAYERS = {
    "foundation": ["ablate", "ablate.paths", "ablate.code_version", "ablate.components", "ablate.stops", "ablate.heap",
                   "ablate.sequential"],
    "records": ["ablate.results", "ablate.record", "ablate.record_checks", "ablate.sweep", "ablate.jobdir",
                "ablate.seed_spreads"],
    "model and data": ["ablate.model", "ablate.data"],
    "training": ["ablate.lit", "ablate.curve", "ablate.optim", "ablate.measure", "ablate.memory", "ablate.tracking", "ablate.wandb_history",
                 "ablate.loggers", "ablate.settings", "ablate.config", "ablate.catalog",
                 "ablate.resolvers", "ablate.job", "ablate.launchers", "ablate.compose", "ablate.console", "ablate.train",
                 "ablate.run", "ablate.timing", "ablate.step_times", "ablate.pace", "ablate.meters", "ablate.finetune"],
    "planning": ["ablate.planner", "ablate.ownership", "ablate.tuning", "ablate.finetune_plan", "ablate.seed_rounds",
                 "ablate.power", "ablate.preview"],
    "report": ["ablate.report"],
    "entry points": ["ablate.cli", "ablate.callbacks", "ablate.sweeper", "ablate.bench", "ablate.report.cli",
                     "ablate.coord_check"],
}
ORDER = list(LAYERS)


def module_name(path: Path, root: Path = PACKAGE_DIR) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path = PACKAGE_DIR) -> dict[str, Path]:
    """Every module of the package: ``{dotted name: file}``."""
    return {module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def _resolve(name: str, known: set[str]) -> str | None:
    """The module an imported dotted name refers to: the longest known prefix of it."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in known:
            return candidate
    return None


def imports_of(source: str, module: str, known: set[str], is_package: bool = False) -> dict[str, int]:
    """``{imported ablate module: first line}`` for every import statement in ``source``, wherever it is."""
    found: dict[str, int] = {}

    def add(name: str | None, line: int) -> None:
        target = _resolve(name, known) if name else None
        if target is not None and target != module:
            found.setdefault(target, line)

    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)] if node.level > 1 else base
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            for alias in node.names:  # `from a import b`: the module a.b if there is one, else a
                submodule = f"{prefix}.{alias.name}"
                add(submodule if submodule in known else prefix, node.lineno)
    return found


def import_graph(root: Path = PACKAGE_DIR) -> dict[str, dict[str, int]]:
    mods = modules(root)
    known = set(mods)
    return {name: imports_of(path.read_text(), name, known, path.name == "__init__.py")
            for name, path in mods.items()}


def strongly_connected(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's strongly connected components of the graph (iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for succ in edges:
                if succ not in index:
                    index[succ] = low[succ] = counter
                    counter += 1
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(graph.get(succ, {}))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
    return components


def cycles(graph: dict[str, dict[str, int]]) -> list[str]:
    """One line per strongly connected component of more than one module, with its edges."""
    out = []
    for component in strongly_connected(graph):
        if len(component) > 1:
            members = set(component)
            edges = [f"{a} -> {b} (line {line})" for a in component for b, line in graph[a].items() if b in members]
            out.append(f"cycle among {', '.join(component)}: " + "; ".join(edges))
    return out


def layer(module: str) -> str | None:
    """The layer of the longest listed name that is the module or a package above it."""
    best = None
    for name, prefixes in LAYERS.items():
        for prefix in prefixes:
            exact_only = prefix == "ablate"
            if module == prefix or (not exact_only and module.startswith(prefix + ".")):
                if best is None or len(prefix) > len(best[1]):
                    best = (name, prefix)
    return best[0] if best else None


def upward_imports(graph: dict[str, dict[str, int]]) -> list[str]:
    bad = []
    for source, targets in graph.items():
        for target, line in targets.items():
            a, b = layer(source), layer(target)
            if a and b and ORDER.index(b) > ORDER.index(a):
                bad.append(f"{source} ({a}) imports {target} ({b}) at line {line}")
    return bad


# --- the package ---------------------------------------------------------------------------------

def test_no_import_cycles() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(found)


def test_every_module_has_a_layer() -> None:
    missing = [m for m in modules() if layer(m) is None]
    assert not missing, f"give these modules a layer in LAYERS (tests/test_architecture.py): {missing}"


def test_imports_point_down_the_layers() -> None:
    bad = upward_imports(import_graph())
    assert not bad, "imports from a higher layer:\n" + "\n".join(bad)


def _reaches(graph: dict[str, dict[str, int]], start: str) -> set[str]:
    """Every module ``start`` imports, directly or through others."""
    seen, todo = set(), [start]
    while todo:
        for target in graph.get(todo.pop(), {}):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def test_the_sweep_path_points_one_way() -> None:
    """entry point -> sweeper -> plan -> (launch) -> job -> train -> record -> report: each stage
    reaches only the stages after it, never one before (a job never plans; the planner never
    launches; the table needs no training code)."""
    graph = import_graph()
    assert {"ablate.planner", "ablate.sweep"} <= _reaches(graph, "ablate.sweeper")
    planning = _reaches(graph, "ablate.planner")
    assert {"ablate.sweep", "ablate.config", "ablate.measure"} <= planning  # costs through measure.job_cost, not the training code
    assert not {"ablate.sweeper", "ablate.callbacks", "ablate.cli", "ablate.bench", "ablate.run"} & planning
    for job_module in ("ablate.job", "ablate.train", "ablate.run"):
        reached = _reaches(graph, job_module)
        assert not {"ablate.planner", "ablate.preview", "ablate.sweeper", "ablate.callbacks", "ablate.cli"} & reached
        assert not [m for m in reached if m.startswith("ablate.report")]
    assert {"ablate.job", "ablate.train", "ablate.record"} <= set(graph["ablate.run"])
    # the records of a sweep, and the design of its seed rounds (pure statistics: numpy and scipy)
    assert _reaches(graph, "ablate.sweep") <= {"ablate.record", "ablate.record_checks", "ablate.results",
                                                "ablate.sequential"}
    report = set().union(*(_reaches(graph, m) for m in graph if m.startswith("ablate.report") and m != "ablate.report.cli"))
    assert "ablate.sweep" in report
    assert not {"ablate.job", "ablate.train", "ablate.run", "ablate.planner", "ablate.sweeper"} & report


# --- the checker itself --------------------------------------------------------------------------

KNOWN = {"ablate", "ablate.run", "ablate.report", "ablate.report.table", "ablate.report.stats", "ablate.data",
         "ablate.data.base", "ablate.sweep"}


@pytest.mark.parametrize("module,source,expected", [
    ("ablate.run", "from ablate.report import build_table", {"ablate.report"}),
    ("ablate.run", "def f():\n    if True:\n        from ablate.report.table import Row", {"ablate.report.table"}),
    ("ablate.run", "from ablate import report, sweep", {"ablate.report", "ablate.sweep"}),
    ("ablate.run", "import ablate.report.table as t", {"ablate.report.table"}),
    ("ablate.run", "from ablate import __version__", {"ablate"}),
    ("ablate.run", "from ablate.report.table import nothing_here, Row", {"ablate.report.table"}),
    ("ablate.report.table", "from . import stats\nfrom .stats import mean", {"ablate.report.stats"}),
    ("ablate.report.table", "from .. import sweep", {"ablate.sweep"}),
    ("ablate.report.table", "from . import something", {"ablate.report"}),
    ("ablate.data.base", "from ..report.table import Row", {"ablate.report.table"}),
    ("ablate.run", "import os, json\nfrom pathlib import Path", set()),
])
def test_every_kind_of_import_is_seen(module: str, source: str, expected: set[str]) -> None:
    assert set(imports_of(source, module, KNOWN)) == expected


def test_package_relative_imports_and_cycles() -> None:
    assert set(imports_of("from .table import Row", "ablate.report", KNOWN, is_package=True)) == {"ablate.report.table"}
    graph = {"ablate.report": {"ablate.report.table": 1}, "ablate.report.table": {"ablate.sweep": 2}, "ablate.sweep": {}}
    assert cycles(graph) == []
    graph["ablate.report.table"]["ablate.report"] = 3  # a submodule importing its package back
    (found,) = cycles(graph)
    assert "ablate.report, ablate.report.table" in found and "line 3" in found


def test_an_upward_import_fails(tmp_path: Path) -> None:
    """What this test exists for: ``from ablate.report import x`` inside run.py is reported."""
    graph = import_graph()
    graph["ablate.run"] = {**graph["ablate.run"], **imports_of("from ablate.report import x", "ablate.run", set(graph))}
    assert any(line.startswith("ablate.run (training) imports ablate.report (report)") for line in upward_imports(graph))
