"""``table.tex`` fits a paper: by default the paper columns (variant, accuracy ± std with its marks,
Δ [95% CI], speed, params; a pivot's cells; a ladder's CMs and trend), a one-sentence caption,
the statistics in a footnote-sized note under the tabular; ``--all-columns`` every column in a
``table*``. The LaTeX is checked for structure here, and compiled where ``pdflatex`` exists.

The tables are built by the real ``build_table`` from the synthetic records of the other report
tests (documented ``result.json`` format).
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from test_ladder_table import ladder_records
from test_report_layout import task_records, tuned_sweep
from test_table import qkv_records
from test_terminal_width import extrapolation_records

from ablate.report import LadderTable, build_table, columns, load_records, render


def _braced(text: str, start: int) -> str:
    """The text between the brace at ``start`` and its partner (escaped braces skipped)."""
    depth, i = 0, start
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start + 1:i]
        i += 1
    raise AssertionError(f"unbalanced braces from {text[start:start + 60]!r}")


def check_structure(tex: str) -> dict:
    """Environments nested and closed, braces and math balanced, every row with as many cells as
    the tabular has columns; returns the float's environment, the column spec, the caption and
    the note under the tabular."""
    stack = []
    for kind, name in re.findall(r"\\(begin|end)\{([^}]*)\}", tex):
        if kind == "begin":
            stack.append(name)
        else:
            assert stack and stack.pop() == name, f"\\end{{{name}}} closes {stack[-1:] or 'nothing'}"
    assert not stack, f"never closed: {stack}"
    unescaped = re.sub(r"\\[{}$&%_#]", "", tex)
    assert unescaped.count("{") == unescaped.count("}")
    for line in unescaped.splitlines():
        assert line.count("$") % 2 == 0, f"unbalanced math: {line}"
    spec = re.search(r"\\begin\{tabular\}\{([lrc]+)\}", tex).group(1)
    rows = [ln for ln in tex.split(r"\toprule")[1].split(r"\bottomrule")[0].replace(r"\midrule", "").splitlines()
            if ln.strip()]
    for row in rows:
        assert row.endswith(r"\\"), row
        assert len(re.split(r"(?<!\\)&", row)) == len(spec), f"{len(spec)} columns, row: {row}"
    env = re.search(r"\\begin\{(table\*?)\}", tex).group(1)
    caption = _braced(tex, tex.index(r"\caption{") + len(r"\caption"))
    after = tex.split(r"\end{tabular}")[1]
    note = re.search(r"\{\\footnotesize\\raggedright (.*)\\par\}", after, re.S)
    assert note, "no note under the tabular"
    return {"env": env, "spec": spec, "caption": caption, "note": note.group(1), "rows": rows}


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> dict:
    return {
        "flat": build_table(qkv_records()),
        "pivoted": build_table(task_records(), columns="task"),
        "tuned": build_table(load_records(tuned_sweep(tmp_path_factory.mktemp("tuned") / "sweep"))),
        "extrapolation": build_table(extrapolation_records()),
        "ladder": build_table(ladder_records(), n_boot=100),
    }


@pytest.mark.parametrize("kind", ["flat", "pivoted", "tuned", "extrapolation", "ladder"])
def test_the_default_latex_is_the_paper_table(tables, kind):
    t = tables[kind]
    tex = render(t, "latex")
    found = check_structure(tex)
    words = found["caption"].split()
    assert len(words) < 40, f"{len(words)} words: {found['caption']}"
    for rule in (r"\toprule", r"\midrule", r"\bottomrule"):
        assert tex.count(rule) == 1
    every = len(columns(t))
    assert len(found["spec"]) < every, "the paper table leaves the detail columns out"
    head = found["rows"][0]
    if isinstance(t, LadderTable):
        assert all(f"{rung} cm" in head.lower() for rung in t.rungs) and "Trend" in head and "loss" not in head
        assert "bootstrap" in found["note"]
    else:
        assert "Acc" in head or t.pivoted
        assert "Tokens/s" not in head and "Memory" not in head and "Runs" not in head
        # the statistics: the test, the correction, what the marks mean
        assert "Holm--Bonferroni" in found["note"] and "* p$<$0.05, ** p$<$0.01" in found["note"]
        assert "baseline" in found["caption"] and "seeds" in found["caption"]
    if not t.pivoted and not isinstance(t, LadderTable):
        assert r"$\Delta$" in head and "[95\\% CI]" in found["caption"]
        assert "Speed" in head and "Params" in head
    for row in t.rows:
        assert any(r.startswith(row.label.replace("_", r"\_")) for r in found["rows"]), row.label


def test_a_narrow_table_sits_in_one_column_a_wider_one_spans_both(tables):
    two_tasks = [r for r in task_records() if r.config["task"]["name"] != "copy"]
    narrow = check_structure(render(build_table(two_tasks, columns="task"), "latex"))
    assert narrow["env"] == "table" and narrow["spec"] == "lrrr"
    # variant, accuracy, Δ [CI], speed, params: wider than a column of a two-column paper
    assert check_structure(render(tables["flat"], "latex"))["env"] == "table*"


def test_all_columns_puts_every_column_in_a_table_star(tables):
    for kind, t in tables.items():
        found = check_structure(render(t, "latex", all_columns=True))
        assert found["env"] == "table*" and len(found["spec"]) == len(columns(t)), kind
        assert len(found["caption"].split()) < 40
    flat = render(tables["flat"], "latex", all_columns=True)
    assert "Memory" in flat and "Tokens/s" in flat and "0.75$\\times$" in flat
    assert "peak bytes per training step" in check_structure(flat)["note"]


@pytest.mark.slow  # starts pdflatex
@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex is not installed: the structure "
                    "is checked by test_the_default_latex_is_the_paper_table instead")
@pytest.mark.parametrize("all_columns", [False, True])
def test_the_latex_compiles_in_a_two_column_paper(tables, tmp_path, all_columns):
    body = "\n".join(render(t, "latex", all_columns=all_columns) for t in tables.values())
    doc = tmp_path / "paper.tex"
    doc.write_text("\\documentclass[twocolumn]{article}\n\\usepackage[T1]{fontenc}\n\\usepackage[utf8]{inputenc}\n"
                   "\\usepackage{booktabs}\n\\begin{document}\nText.\n" + body + "\n\\end{document}\n")
    done = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", doc.name], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:]
    assert (tmp_path / "paper.pdf").is_file()
