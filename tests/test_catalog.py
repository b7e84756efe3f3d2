"""`ablate --list`, the README's group table and config.yaml's comments name the same options."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import CONF, builtin_options, run_cli

from ablate.catalog import options
from ablate.config import CONFIG_GROUPS

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()


def _readme_row(group: str) -> set[str] | None:
    for line in README.splitlines():
        if line.startswith(f"| `{group}` |"):
            return set(re.findall(r"`([\w-]+)`", line.split("|")[2]))
    return None


def test_readme_group_table_lists_every_builtin_option() -> None:
    for group in ("qkv_sharing", "attention", "pos_enc", "norm", "ffn", "init", "task", "trainer", "logger", "optim"):
        assert _readme_row(group) == set(builtin_options(group)), group


def test_config_yaml_comments_list_every_builtin_option() -> None:
    for line in (CONF / "config.yaml").read_text().splitlines():
        m = re.match(r"\s+- (\w+): \w+\s+# (.*)", line)
        if m and "|" in m.group(2):
            group, listed = m.group(1), m.group(2).split("(")[0]
            assert {x.strip() for x in listed.split("|")} == set(builtin_options(group)), group


def test_every_option_has_a_description_and_a_target() -> None:
    for group in CONFIG_GROUPS:
        for option in options(group):
            assert option.builtin and option.description, (group, option.name)
            if group in ("qkv_sharing", "pos_enc", "norm", "ffn", "init", "task"):
                assert option.target and option.target.startswith("ablate."), (group, option.name)


@pytest.mark.slow
def test_ablate_list_prints_builtin_and_user_options(tmp_path: Path) -> None:
    user = tmp_path / "myconf"
    (user / "pos_enc").mkdir(parents=True)
    (user / "pos_enc" / "my_pe.yaml").write_text("# My position scheme (Me et al. 2026).\n"
                                                 "_target_: my_lab.positions.MyPE\nname: my_pe\n")
    out = run_cli(["--list", "--config-dir", str(user)], tmp_path)
    assert out.returncode == 0, out.stderr
    sections = dict(re.findall(r"^(\w+):\n((?:  .*\n)+)", out.stdout, flags=re.M))
    for group in CONFIG_GROUPS:
        listed = {line.split()[0] for line in sections[group].splitlines()}
        expected = set(builtin_options(group)) | ({"my_pe"} if group == "pos_enc" else set())
        assert listed == expected, group
    assert re.search(r"my_pe\s+My position scheme \(Me et al\. 2026\)\.\s+\(my_lab\.positions\.MyPE\)\s+"
                     r"\[from --config-dir\]", out.stdout)
    assert "ALiBi" in out.stdout or "linear biases" in out.stdout
