"""A sweep read once (``ablate.report.records.load_sweep``) and every table layout through the same
interface (``ablate.report.layout.TableLayout``): a ladder's ``report.html`` and ``load``, a
directory of several sweeps refused by name, one meaning per column name in ``load``'s frames, and
only safe links on the page. The records are synthetic, in the documented ``result.json`` format
(docs/internals.md), written to disk as a sweep's jobs write them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_ladder_table import ladder_records

from ablate.record import Record
from ablate.report import build_table, load, write_report
from ablate.report.layout import TableLayout
from ablate.report.records import load_sweep
from ablate.report.webpage import safe_href, to_html
from ablate.sweep import SWEEP_FILE, SeveralSweeps, SweepPlan, load_sweep_records


def write_sweep(directory: Path, records: list[Record], swept: list[str]) -> Path:
    """``records`` as the jobs of one sweep in ``directory``, with its ``sweep.json``."""
    directory.mkdir(parents=True, exist_ok=True)
    for rec in records:
        rec.write(directory / str(rec.job.num))
    jobs = [rec.overrides for rec in records]
    SweepPlan(swept=swept, jobs=jobs, definition=jobs).write(directory)
    return directory


def flat_records() -> list[Record]:
    """The ladder's smallest rung without its size key: a flat sweep of ffn x seed."""
    recs = [r for r in ladder_records() if "model.size=xs" in r.overrides]
    for r in recs:
        r.overrides = [o for o in r.overrides if not o.startswith("model.size")]
    return recs


@pytest.fixture
def ladder_dir(tmp_path: Path) -> Path:
    return write_sweep(tmp_path / "ladder", ladder_records(), ["model.size", "ffn", "seed"])


def test_a_ladder_has_its_page_and_its_frames(ladder_dir: Path) -> None:
    """On the old code both raised AttributeError: 'LadderTable' object has no attribute 'flat'."""
    sweep = load_sweep(ladder_dir)
    table = build_table(sweep, n_boot=50)
    assert isinstance(table, TableLayout) and table.layout == "ladder" and table.sweep is sweep
    page = write_report(table, sweep.records, ladder_dir).read_text()
    assert "scaling.png" in page and "xs CM" in page and "swiglu · xs" in page  # each run: its row and rung

    frames = load(ladder_dir, n_boot=50)
    assert list(frames.table["variant"]) == ["ffn=gelu", "ffn=swiglu"] and list(frames.table["label"]) == ["gelu", "swiglu"]
    runs = frames.records
    assert len(runs) == 24 and set(runs["variant"]) == {"ffn=gelu", "ffn=swiglu"}
    assert list(runs["model.size"][:3]) == ["xs"] * 3  # the rung: a column of its own
    assert len(runs.merge(frames.table, on="variant")) == 24  # every run finds its row


def test_a_number_a_ladder_has_not_is_nan(tmp_path: Path) -> None:
    """2 rungs: no trend for any row (on the old code a column of None)."""
    two = write_sweep(tmp_path / "two", ladder_records(rungs=["xs", "s"]), ["model.size", "ffn", "seed"])
    table = load(two, n_boot=50).table
    assert table["trend"].dtype == float and table["trend"].isna().all()
    assert table["trend_note"].str.startswith("2 rungs").all()  # text stays text


def test_a_flat_table_and_a_ladder_answer_the_same_interface(ladder_dir: Path) -> None:
    flat = build_table(flat_records())
    ladder = build_table(load_sweep(ladder_dir), n_boot=50)
    for table, variant, figure in ((flat, {"ffn": "swiglu"}, "table.png"),
                                   (ladder, {"ffn": "swiglu", "model.size": "xs"}, "scaling.png")):
        assert isinstance(table, TableLayout)
        assert table.columns()[0].head == "variant" and table.csv_fields()[0][0] == "variant"
        assert table.wandb_summary() and table.wandb_config() and table.latex_summary()
        assert table.run_place(variant).key == "ffn=swiglu" and table.run_place(variant).label == "swiglu"
        assert table.figures()[0].key == "png" and table.figures()[0].file == figure
        assert all(f.caption for f in table.figures())  # report.html's caption under each, from its layout
    assert ladder.run_place({"ffn": "swiglu", "model.size": "xs"}).column == "xs"
    assert flat.image_key("png") == "ablation_plot" and ladder.image_key("png") == "scaling"
    assert flat.statistics_terms() and not ladder.statistics_terms()  # a ladder's caption explains its numbers


def test_a_sweep_is_read_once(ladder_dir: Path) -> None:
    """The table, the page and the frames' runs take everything from the ``LoadedSweep``: with its
    files gone they give what they gave (on the old code the table re-read sweep.json per record
    directory and the page re-read the records)."""
    sweep = load_sweep(ladder_dir)
    before = build_table(sweep, n_boot=50).caption()
    (ladder_dir / SWEEP_FILE).unlink()
    for job in ladder_dir.iterdir():
        if job.is_dir():
            (job / "result.json").unlink()
    table = build_table(sweep, n_boot=50)
    assert table.caption() == before and table.size_keys == ["model.size"]
    page = to_html(table, None, ladder_dir, {})
    assert page.count('status-ok"') == 24


def test_a_directory_of_a_flat_sweep_and_a_ladder_is_refused_by_name(tmp_path: Path) -> None:
    """On the old code the parent was read as one ladder, the flat sweep's runs mixed in unseen."""
    write_sweep(tmp_path / "flat", flat_records(), ["ffn", "seed"])
    write_sweep(tmp_path / "ladder", ladder_records(), ["model.size", "ffn", "seed"])
    for read in (load_sweep, load_sweep_records, load):
        with pytest.raises(SeveralSweeps) as caught:
            read(tmp_path)
        message = str(caught.value)
        assert "\n" not in message and "holds 2 sweeps" in message and "point at one" in message
        assert str(tmp_path / "flat") in message and str(tmp_path / "ladder") in message
    assert build_table(load_sweep(tmp_path / "flat")).layout == "flat"  # each alone is its own table


def test_ablate_table_refuses_a_directory_of_several_sweeps_in_one_line(tmp_path: Path, capsys) -> None:
    from ablate.report.cli import main as ablate_table

    write_sweep(tmp_path / "flat", flat_records(), ["ffn", "seed"])
    write_sweep(tmp_path / "ladder", ladder_records(), ["model.size", "ffn", "seed"])
    assert ablate_table([str(tmp_path), "--no-wandb"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("ablate-table: ") and "holds 2 sweeps" in err, err


@pytest.mark.parametrize("url", ["javascript:alert(1)", "JavaScript:alert(1)", "java\tscript:alert(1)",
                                 "data:text/html,<script>alert(1)</script>", "vbscript:msgbox(1)", "x:y/z"])
def test_an_unsafe_href_is_refused(url: str) -> None:
    assert safe_href(url) is None


@pytest.mark.parametrize("url", ["3/result.json", "../other/3/", "wandb/offline-run-1/", "https://wandb.ai/a/b",
                                 "file:///tmp/x", "./x:y"])
def test_a_relative_path_or_web_address_is_a_link(url: str) -> None:
    assert safe_href(url) == url


def test_a_javascript_link_of_a_hand_made_record_is_shown_as_text(tmp_path: Path) -> None:
    """A record is a file anyone can edit: one naming ``javascript:...`` as its wandb directory (a
    file of that name in the sweep, so the page would link it) put an href the browser runs."""
    recs = flat_records()
    sweep_dir = write_sweep(tmp_path / "sweep", recs, ["ffn", "seed"])
    (sweep_dir / "javascript:alert(document.cookie)").write_text("")
    first = sweep_dir / "0" / "result.json"
    rec = json.loads(first.read_text())
    rec["wandb"]["dir"] = str(sweep_dir / "javascript:alert(document.cookie)")
    first.write_text(json.dumps(rec))
    sweep = load_sweep(sweep_dir)
    page = to_html(build_table(sweep), sweep, sweep_dir, {})
    assert "javascript:" not in page.lower().replace("javascript:alert(document.cookie)</", "")
    assert 'href="0/"' in page and 'href="0/result.json"' in page  # the job's own links stay
