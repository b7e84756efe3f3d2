"""The README and docs/ say what the code does: every link leads to a file, every docs page is on
the README's map, the experiment table lists the experiments that exist with the runs and steps
they compose to, every `ablate` command line in a code block composes, every `ablate-table` line
parses, and the table's columns are each explained. (The group table and the CSV's columns are
checked in test_catalog.py and test_table.py.)"""

from __future__ import annotations

import math
import re
import shlex
from pathlib import Path

import pytest
from conftest import compose_cfg
from omegaconf import OmegaConf

from ablate.paths import CONF_DIR

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()
DOCS = sorted((REPO / "docs").glob("*.md"))
PAGES = [REPO / "README.md", *DOCS, REPO / "examples" / "README.md"]


def _section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def _table_rows(section: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines()
            if line.startswith("| ") and not line.startswith("|---")][1:]


def test_the_readme_is_a_front_door() -> None:
    assert len(README.splitlines()) <= 220
    assert "make main" in README and "make test" in README


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_leads_to_a_file(page: Path) -> None:
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
        if "://" in target:
            continue
        assert (page.parent / target).exists(), f"{page.name} links to {target}, which does not exist"


def test_every_docs_page_is_on_the_readme_map() -> None:
    mapped = set(re.findall(r"\(docs/([\w-]+\.md)\)", _section(README, "Documentation")))
    assert mapped == {p.name for p in DOCS}


def _experiment(name: str):
    return compose_cfg([f"experiment={name}"], hydra_config=True)


def _runs(cfg) -> int | None:
    """The jobs a plain or design experiment launches: its swept values' product (a design's rows
    count as one swept key); None for a tuned one, whose final runs depend on the tuning."""
    if cfg.tune.lr:
        return None
    params = OmegaConf.to_container(cfg.hydra.sweeper.params) or {}
    counts = [len(str(v).split(",")) for v in params.values()]
    design = cfg.experiment.get("design")
    if design:
        counts.append(len(design.changes) + 1)
    return math.prod(counts)


def test_the_experiment_table_lists_every_experiment_with_its_runs_and_steps() -> None:
    rows = _table_rows(_section(README, "Named experiments"))
    listed = {re.match(r"`(\w+)`", r[0]).group(1): r for r in rows}
    assert set(listed) == {p.stem for p in (CONF_DIR / "experiment").glob("*.yaml")}
    for name, row in listed.items():
        cfg = _experiment(name)
        stages = row[2].split("+")  # a fine-tune stage: "pretraining runs × steps + fine-tunes × steps"
        runs, steps = (s.strip() for s in stages[0].split("×"))
        expected = _runs(cfg)
        if str(cfg.hydra.sweeper.params.get("seed")) == "auto":  # seeds in rounds: "first round–cap"
            rows = expected
            assert runs == f"{rows * cfg.stats.min_seeds}–{rows * cfg.stats.max_seeds}", name
        elif expected is not None:
            assert int(runs) == expected, name
        if cfg.budget.match in ("steps", "flops"):  # flops: the baseline trains max_steps, the rest near it
            assert int(steps) == cfg.trainer.max_steps, name
        assert len(stages) == (2 if cfg.finetune.tasks else 1), name
        if cfg.finetune.tasks:
            fine_runs, fine_steps = (s.strip() for s in stages[1].split("×"))
            assert int(fine_runs) == int(runs) * len(cfg.finetune.tasks) * len(cfg.finetune.seeds), name
            assert int(fine_steps) == cfg.finetune.steps, name  # one figure: no task has steps of its own
            assert not any("steps" in own for own in cfg.finetune.per_task.values()), name


def _command_lines(text: str, program: str) -> list[list[str]]:
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words and words[0] == program:
                lines.append(words[1:])
    return lines


def test_every_ablate_command_in_the_readme_composes_and_validates() -> None:
    """Each command's overrides (every value of a swept list, the first of each other list) compose
    and pass the validation a run gets before it trains."""
    from ablate.config import config_problems

    commands = _command_lines(README, "ablate")
    assert len(commands) >= 10
    for argv in commands:
        if "--config-dir" in argv or "--list" in argv or "--help" in argv:
            continue  # a directory of the reader's own; runs nothing
        overrides = [a for a in argv if not a.startswith("-")]
        first = [o if "," not in o.partition("=")[2] or o.partition("=")[2].startswith("[")
                 else f"{o.partition('=')[0]}={o.partition('=')[2].split(',')[0]}" for o in overrides]
        assert config_problems(compose_cfg(first)) == [], argv
        for i, override in enumerate(overrides):
            key, _, value = override.partition("=")
            if "," in value and not value.startswith("[") and "." not in key:
                for each in value.split(",")[1:]:  # a group's options: each exists
                    compose_cfg([*first[:i], f"{key}={each}", *first[i + 1:]])


def test_every_ablate_table_command_in_the_readme_parses() -> None:
    from ablate.report.cli import _parser as parser

    commands = _command_lines(README, "ablate-table")
    assert commands
    for argv in commands:
        parser().parse_args(argv)


def test_every_column_of_the_table_is_explained_in_the_readme() -> None:
    from test_table import qkv_records

    from ablate.record import CurvePoint
    from ablate.report import build_table
    from ablate.report.formats import to_markdown

    records = qkv_records()
    for i, record in enumerate(records):  # the optional columns: FLOPs, early and final loss
        record.metrics.update(flops_per_token=1e6 * (1 + i % 3), train_flops=1e9 * (1 + i % 3),
                              history=[CurvePoint(step=1, loss=2.0, accuracy=0.3, tokens=10, flops=1.0),
                                       CurvePoint(step=10, loss=1.0, accuracy=0.6, tokens=100, flops=10.0)])
    header = next(line for line in to_markdown(build_table(records)).splitlines() if line.startswith("| variant"))
    columns = {re.sub(r" \(.*\)$", "", c.strip()) for c in header.strip("|").split("|")}
    explained = set()
    for name in re.findall(r"^- \*\*([^*]+)\*\*", _section(README, "Reading the table"), flags=re.M):
        explained |= {n.strip().rstrip(":") for n in name.split(" / ")}
    assert columns - {"Δ"} <= explained | {"Δ"}, columns - explained
    assert any(n.startswith("Δ") for n in explained)
