"""A sweep for a person and for a notebook: ``ablate-table PATH --html`` (``report.html``, opened in a
real headless Chromium) and ``ablate.report.load`` (DataFrames), on one tiny sweep trained in process:
two variants x two seeds and a run that diverges."""

from __future__ import annotations

import base64
import csv
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import IN_PROCESS, compose_cfg

from ablate.compose import tiny_overrides
from ablate.job import Job
from ablate.report import REPORT_FILE, build_table, load
from ablate.report.cli import main as ablate_table
from ablate.run import run_job
from ablate.sweep import load_sweep_records

TINY = tiny_overrides(*IN_PROCESS)
JOBS = [["pos_enc=learned", "seed=0"], ["pos_enc=learned", "seed=1"], ["pos_enc=rope", "seed=0"],
        ["pos_enc=rope", "seed=1"], ["pos_enc=rope", "seed=0", "optim.lr=1e9"]]  # the last one diverges


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory, one_thread) -> Path:
    directory = tmp_path_factory.mktemp("sweep")
    for num, overrides in enumerate(JOBS):
        run_job(compose_cfg([*TINY, *overrides]), Job(directory / ",".join(overrides), overrides, {}, str(directory), num))
    statuses = sorted(r.status for r in load_sweep_records(directory))
    assert statuses == ["diverged", "ok", "ok", "ok", "ok"], statuses
    return directory


# ------------------------------------------------------------------------------ DataFrames

def test_load_gives_the_records_the_table_and_the_curves_as_dataframes(sweep: Path, tmp_path: Path) -> None:
    frames = load(sweep)
    records = load_sweep_records(sweep)

    runs = frames.records
    assert len(runs) == len(records) and list(runs["job"]) == [0, 1, 2, 3, 4]
    assert list(runs["status"]) == ["ok", "ok", "ok", "ok", "diverged"]
    assert list(runs["pos_enc"]) == ["learned", "learned", "rope", "rope", "rope"]  # a column per swept key
    by_job = {r.job.num: r for r in records}
    for _, run in runs.iterrows():
        record = by_job[run["job"]]
        assert Path(run["job_dir"]) == record.path.parent
        if run["status"] == "ok":
            assert run["accuracy"] == record.metrics.accuracy and run["val.loss"] == record.metrics.val.loss
    assert "non-finite loss" in runs.loc[4, "error"]

    table = frames.table  # the same numbers as table.csv (ablate-table --save)
    ablate_table([str(sweep), "--save", "--no-wandb", "--format", "csv"])
    with open(sweep / "table.csv", newline="") as f:
        saved = list(csv.DictReader(f))
    # the CSV's columns, its variant (the label) and overrides (the key) named as in every frame
    assert list(table.columns) == ["variant", "label", *[c for c in saved[0] if c not in ("variant", "overrides")]]
    assert list(table["label"]) == [row["variant"] for row in saved]
    assert list(table["variant"]) == [row["overrides"] for row in saved]
    for (_, row), csv_row in zip(table.iterrows(), saved):
        for column in ("accuracy_mean", "loss_mean", "n", "params", "delta"):
            assert (row[column] != row[column] and csv_row[column] == "") or float(csv_row[column]) == pytest.approx(row[column])
    ok = runs[runs["status"] == "ok"]
    means = ok.groupby("label")["accuracy"].mean()
    for _, row in table[table["n"] > 0].iterrows():
        assert means[row["label"]] == pytest.approx(row["accuracy_mean"])  # a notebook's groupby agrees
    merged = runs.merge(table, on="variant", suffixes=("", "_row"))  # each run with its row
    assert len(merged) == len(runs) and (merged["label"] == merged["label_row"]).all()
    # missing numbers are NaN, never None: memory was not measured (memory_ratio has no value at all)
    assert table["memory_ratio"].dtype == float and table["memory_ratio"].isna().all()
    assert table["delta"].dtype == float and table["delta"].isna().sum() == 2  # the baseline's, the diverged row's
    assert runs["diverged_step"].dtype == float

    history = frames.history
    assert len(history) == sum(len(r.metrics.history) for r in records if r.ok)
    first = history[history["job"] == 0]
    assert list(first["step"]) == [p.step for p in by_job[0].metrics.history]
    assert frames.caption == build_table(records).caption()


# ------------------------------------------------------------------------------ report.html

class Page(HTMLParser):
    """What a page is made of: each table's body rows (cell texts), images, links, scripts' sources."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.images: list[str] = []
        self.links: list[str] = []
        self.external: list[str] = []
        self._table: str | None = None
        self._in_body = False
        self._row: list[str] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        attrs = dict(attrs)
        for key in ("src", "href"):
            if attrs.get(key) and re.match(r"(https?:)?//", attrs[key]):
                self.external.append(attrs[key])
        if tag == "link":
            self.external.append(str(attrs))
        if tag == "table":
            self._table = attrs.get("id")
            self.tables[self._table] = []
        elif tag == "tbody":
            self._in_body = True
        elif tag == "tr" and self._in_body:
            self._row = []
        elif tag == "td" and self._row is not None:
            self._cell = []
        elif tag == "img":
            self.images.append(attrs.get("src", ""))
        elif tag == "a":
            self.links.append(attrs.get("href", ""))

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.tables[self._table].append(self._row)
            self._row = None
        elif tag == "tbody":
            self._in_body = False

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def parse(text: str) -> Page:
    page = Page()
    page.feed(text)
    return page


def test_ablate_table_html_writes_one_self_contained_page(sweep: Path) -> None:
    assert ablate_table([str(sweep), "--html", "--no-wandb", "--format", "csv"]) == 0
    text = (sweep / REPORT_FILE).read_text()
    page = parse(text)
    table = build_table(load_sweep_records(sweep))

    assert page.external == [], "the page must not fetch anything"
    assert [r[0].removesuffix(" (baseline)") for r in page.tables["paper"]] == [r.label for r in table.rows]
    assert len(page.tables["all"]) == len(table.rows) and len(page.tables["all"][0]) > len(page.tables["paper"][0])
    runs = page.tables["runs"]
    assert [(r[0], r[3]) for r in runs] == [("0", "ok"), ("1", "ok"), ("2", "ok"), ("3", "ok"), ("4", "diverged")]
    assert "non-finite loss" in runs[4][8] and all(r[8] == "" for r in runs[:4])  # each run's error
    for href in page.links:  # its directory, result.json: relative, and there
        assert not href.startswith("/") and (sweep / href).exists(), href
    assert {sweep / h for h in page.links} >= {sweep / ",".join(j) for j in JOBS}

    assert len(page.images) == 2, "table.png and curves.png"
    for src in page.images:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]).startswith(b"\x89PNG\r\n\x1a\n")
    assert "Holm–Bonferroni-corrected across 1 comparison" in text and "t(0.975, n − 1)" in text


def _browser() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path and subprocess.run([path, "--version"], capture_output=True, timeout=60).returncode == 0:
            return path
    return None


@pytest.mark.slow  # a headless Chromium
def test_the_page_renders_and_sorts_in_a_headless_browser(sweep: Path, tmp_path: Path) -> None:
    browser = _browser()
    if browser is None:
        pytest.skip("no Chromium here: scripts/setup.sh installs Debian's chromium where it runs as root with apt-get")
    if not (sweep / REPORT_FILE).exists():
        ablate_table([str(sweep), "--html", "--no-wandb", "--format", "csv"])
    url = (sweep / REPORT_FILE).as_uri()
    flags = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             f"--user-data-dir={tmp_path / 'profile'}"]
    env = {**os.environ, "HOME": str(tmp_path)}

    # the runs sorted by accuracy, lowest first, by the page's own script (#sort=TABLE.COLUMN[.desc]);
    # the page lists them in job order, learned's (higher) first, so only a sort puts rope's first
    out = subprocess.run([*flags, "--dump-dom", url + "#sort=runs.4"], capture_output=True, text=True,
                         timeout=120, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    dom = parse(out.stdout)
    table = build_table(load_sweep_records(sweep))
    assert [r[0].removesuffix(" (baseline)") for r in dom.tables["paper"]] == [r.label for r in table.rows]
    runs = dom.tables["runs"]
    accuracies = [float(r[4]) for r in runs[:4]]
    assert accuracies == sorted(accuracies) and accuracies[0] < accuracies[-1], runs
    assert {r[0] for r in runs[:2]} == {"2", "3"} and runs[4][0] == "4", "rope's runs first, the diverged one last"
    assert re.search(r'<th[^>]*aria-sort="ascending"[^>]*>accuracy \(%\)</th>', out.stdout), "the header says so"

    shot = tmp_path / "report.png"
    out = subprocess.run([*flags, "--window-size=1200,1600", f"--screenshot={shot}", url], capture_output=True,
                         text=True, timeout=120, env=env)
    assert out.returncode == 0 and shot.exists(), out.stderr[-2000:]
    from PIL import Image

    with Image.open(shot) as image:
        assert image.format == "PNG" and image.size == (1200, 1600)
        colours = image.convert("RGB").getcolors(maxcolors=1 << 20)
    assert len(colours) > 100, "a rendered page: text, tables and figures, not a blank screen"
