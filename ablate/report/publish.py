"""Where a table goes: ``table.{md,tex,csv,png}`` (and ``curves.png``, ``lr.png``) in the sweep
directory, and the sweep's wandb group."""

from __future__ import annotations

import hashlib
import math
import shlex
import shutil
import sys
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from ablate.console import describe_error
from ablate.report.formats import csv_columns, csv_rows, to_csv, to_latex, to_markdown
from ablate.report.layout import TableLayout
from ablate.record import Record, WandbEntry
from ablate.report.records import LoadedSweep
from ablate.report.webpage import REPORT_FILE, to_html
from ablate.results import write_text_atomic
from ablate.sweep import SWEEP_FILE


def write_atomic(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file and a rename: readers never see half a file."""
    return write_text_atomic(path, text)


def _outputs(table: TableLayout) -> list[tuple[str, str, Callable[[Path], Path | None]]]:
    """What ``save_outputs`` writes for ``table``, one artefact at a time: (key, file name, writer of
    that file, which returns its path, or None when the records do not support that figure): the
    table's three text files, then its layout's figures (``TableLayout.figures``)."""
    def text(render: Callable[[Any], str]) -> Callable[[Path], Path]:
        return lambda path: write_atomic(path, render(table))

    return [("markdown", "table.md", text(to_markdown)), ("latex", "table.tex", text(to_latex)),
            ("csv", "table.csv", text(to_csv)),
            *((figure.key, figure.file, figure.draw) for figure in table.figures())]


def save_outputs(table: TableLayout, sweep_dir: str | Path) -> dict[str, Path]:
    """Write ``table.md``, ``table.tex``, ``table.csv`` and ``table.png`` into ``sweep_dir``
    atomically, and the figures the records support: ``curves.png`` (validation loss vs training
    FLOPs, when runs recorded ``metrics.history``) and ``lr.png`` (a tuned sweep's validation
    metric vs lr). Keys: markdown, latex, csv, png, and curves / lr when written: the layout's
    figures (``TableLayout.figures``; a ladder's png is ``scaling.png``, and it has no other figure).
    Raises the first error; :func:`publish` writes each file on its own and names what failed."""
    d = Path(sweep_dir)
    d.mkdir(parents=True, exist_ok=True)
    written = {}
    for key, name, write in _outputs(table):
        path = write(d / name)
        if path is not None:
            written[key] = path
    return written


def write_report(table: TableLayout, records: list[Record] | LoadedSweep | None, sweep_dir: str | Path,
                 figures: dict[str, Any] | None = None, into: str | Path | None = None) -> Path:
    """Write ``report.html`` into ``sweep_dir`` (atomically) and return its path. ``figures``: the
    paths ``save_outputs`` just wrote (its PNGs are embedded); None draws them afresh, in a
    temporary directory, so the page never shows a figure older than its table. ``into``: write the
    page there instead (its links still lead to ``sweep_dir``'s runs)."""
    sweep_dir = Path(sweep_dir)
    if figures is None:
        with tempfile.TemporaryDirectory() as tmp:
            return write_report(table, records, sweep_dir, save_outputs(table, tmp), into)
    pngs = {k: Path(v) for k, v in figures.items() if Path(v).suffix == ".png" and Path(v).is_file()}
    return write_atomic(Path(into) if into is not None else sweep_dir / REPORT_FILE,
                        to_html(table, records, sweep_dir, pngs))


@dataclass
class Published:
    """What :func:`publish` wrote (artefact key -> path; ``html`` for the page) and, one per artefact
    it could not write, what went wrong (``"report.html (KeyError: 'x')"``)."""

    written: dict[str, Path] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    wandb_dir: str | None = None


def publish(table: TableLayout, records: list[Record], sweep_dir: str | Path, *, save: bool = True,
            html: bool = True, wandb: bool = False, loggers: bool | None = None) -> Published:
    """A sweep's end (and ``ablate-table --save --html --wandb``): each artefact on its own (the
    table files and each figure, ``report.html``, the wandb table run, the table in the sweep's
    TensorBoard and MLflow: ``report.loggers.log_table``, with ``loggers``, by default when saved),
    so one that fails costs only itself; what failed is named in ``problems``. Never raises for an
    artefact."""
    d = Path(sweep_dir)
    done = Published()
    if save:
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            done.problems.append(f"{d} ({describe_error(error)})")
            return done
        for key, name, write in _outputs(table):
            try:
                path = write(d / name)
            except Exception as error:  # noqa: BLE001 - named below, the other artefacts still written
                done.problems.append(f"{name} ({describe_error(error)})")
                continue
            if path is not None:
                done.written[key] = path
    if html:
        try:  # its figures those just written (drawn afresh when not saved)
            done.written["html"] = write_report(table, records, d, dict(done.written) if save else None)
        except Exception as error:  # noqa: BLE001
            done.problems.append(f"{REPORT_FILE} ({describe_error(error)})")
    if wandb:
        try:
            done.wandb_dir = log_to_wandb(table, d, done.written if save else None, strict=True)
        except Exception as error:  # noqa: BLE001
            done.problems.append(f"the wandb table run ({describe_error(error.__cause__ or error)})")
    if save if loggers is None else loggers:
        from ablate.report.loggers import log_table

        done.problems += log_table(table, d, done.written)  # TensorBoard, MLflow: those the jobs logged to
    return done


def redo_command(sweep_dir: str | Path, wandb: bool = False) -> str:
    """The command that redoes a sweep's end alone, from its records: table files, figures, report
    (and its wandb table run)."""
    return " ".join(["ablate-table", shlex.quote(str(sweep_dir)), "--save", "--html",
                     *(["--wandb"] if wandb else [])])


def table_run_id(sweep_dir: str | Path, group: str) -> str:
    """The wandb run id of a sweep's table: the same for every table of the sweep (the end of the
    sweep, each ``ablate-table``), from the sweep directory's resolved path and the wandb group."""
    key = f"{Path(sweep_dir).resolve()}\n{group}"
    return f"table-{hashlib.sha1(key.encode()).hexdigest()[:16]}"


class TableLogError(RuntimeError):
    """The table could not be logged to wandb (its run did not start, or a log call failed)."""


def log_to_wandb(table: TableLayout, sweep_dir: str | Path,
                 outputs: Mapping[str, str | Path] | None = None, strict: bool = False) -> str | None:
    """The sweep's one ``job_type=table`` run in its wandb group: a ``wandb.Table`` (the table as
    shown, pivoted or not: ``csv_columns``), every figure (``table.png`` as ``ablation_plot``, a
    ladder's ``scaling.png`` as ``scaling``, ``curves.png`` as ``learning_curves``, ``lr.png`` as
    ``lr_sweep``), and the table's files, ``report.html`` and ``sweep.json`` as a new version of the
    artifact ``table-<group>`` (:func:`log_table_artifact`). ``outputs``: what ``save_outputs`` wrote
    for this table (with ``html``, the page ``write_report`` wrote); None: the files are drawn in a
    temporary directory, the sweep directory left as it is (so is the page, when not given).

    Every table of a sweep logs to the same run (``table_run_id``): online it is resumed and its
    summary holds the latest table; offline each log is a new local directory, so once the new
    one is complete the earlier directories of that run are removed (they hold only superseded
    tables, and ``wandb sync`` of the sweep then uploads the latest table once).
    Returns the run's local directory, or None (WANDB_MODE=disabled, or with a warning when wandb
    could not log: the table files never depend on wandb). ``strict``: raise :class:`TableLogError`
    instead of warning (the sweep's end, :func:`publish`, names it with the other artefacts).
    """
    with tempfile.TemporaryDirectory() as tmp:  # artifact files are copied when added: tmp may go after
        files = dict(outputs) if outputs is not None else save_outputs(table, tmp)
        if "html" not in files:  # the page goes into the artifact too, drawn here if it was not written
            files["html"] = write_report(table, None, sweep_dir, files, into=Path(tmp) / REPORT_FILE)
        try:
            return _log_table_run(table, sweep_dir, files)
        except TableLogError as err:
            if strict:
                raise
            warnings.warn(f"wandb: {err}", stacklevel=2)
            return None


def _log_table_run(table: TableLayout, sweep_dir: str | Path, outputs: dict[str, str | Path]) -> str | None:
    from ablate.sweep import load_sweep_records
    from ablate.tracking import init_run, job_tags, run_dir, superseded_runs

    group = table.wandb_group or Path(sweep_dir).resolve().name
    run_id = table_run_id(sweep_dir, group)
    records = table.sweep.records if table.sweep is not None else load_sweep_records(sweep_dir)
    jobs = [r.wandb for r in records if r.wandb is not None and r.wandb.id]
    logger = records[0].config.get("logger") if records else None
    logger = logger if isinstance(logger, Mapping) else {}
    config = {"baseline": table.baseline, "baseline_key": table.baseline_key, "experiment": table.experiment,
              "sweep_dir": str(Path(sweep_dir).resolve()), "smoke": bool(table.smoke),
              "rows": [r.key for r in table.rows], "layout": table.layout, "job_runs": [j.id for j in jobs]}
    config.update(table.wandb_config())
    try:
        import wandb

        run = init_run(name=f"table-{group}", group=group, job_type="table", config=config, dir=sweep_dir,
                       project=table.wandb_project, entity=logger.get("entity"), run_id=run_id,
                       tags=job_tags(["table", *(logger.get("tags") or [])], table.experiment, bool(table.smoke)),
                       notes=" ".join(shlex.quote(a) for a in [Path(sys.argv[0]).name, *sys.argv[1:]]))
    except Exception as err:  # noqa: BLE001 - wandb must never break the table
        raise TableLogError(f"could not start the table run: {type(err).__name__}: {err}") from err
    if run is None:  # WANDB_MODE=disabled
        return None
    logged, failure = None, None
    try:
        data = [[v if not isinstance(v, float) or math.isfinite(v) else None for v in row] for row in csv_rows(table)]
        payload: dict[str, Any] = {"ablation_table": wandb.Table(columns=csv_columns(table), data=data)}
        for name, path in outputs.items():
            if str(path).endswith(".png") and Path(path).is_file():
                payload[table.image_key(name)] = wandb.Image(str(path), caption=table.caption() if name == "png" else None)
        run.log(payload)
        run.summary.update({
            "baseline": table.baseline, "baseline_key": table.baseline_key, "n_variants": len(table.rows),
            "n_runs": table.n_records, "caption": table.caption(), "smoke": bool(table.smoke),
        })
        run.summary.update(table.wandb_summary())
        log_table_artifact(run, table, group, sweep_dir, outputs, jobs)
        logged = run_dir(run)
    except Exception as err:  # noqa: BLE001
        failure = err
    finally:
        run.finish()
    if failure is not None:
        raise TableLogError(f"could not log the table: {type(failure).__name__}: {failure}") from failure
    if logged is not None:  # the new run is complete: drop the local copies it supersedes
        for old in superseded_runs(sweep_dir, run_id, logged):
            shutil.rmtree(old, ignore_errors=True)
    return logged


def log_table_artifact(run: Any, table: TableLayout, group: str, sweep_dir: str | Path,
                       outputs: Mapping[str, str | Path], jobs: list[WandbEntry]) -> None:
    """The table's files (``outputs``) and ``sweep.json`` as a new version of ``table-<group>``
    (type ``ablation-table``; wandb keeps one version per distinct content), its metadata naming the
    job runs it summarises. Lineage: each job run logged its record as ``record-<run id>``
    (``ablate.run``); an online table run uses those, so wandb's graph reads job run -> record ->
    table run -> table. wandb cannot use an artifact offline: there the metadata's ``job_runs`` (and
    the run's config) are the link, and ``ablate-table SWEEP`` run online after ``wandb sync`` of the
    job runs draws the graph."""
    from ablate.tracking import log_files

    files = {Path(p).name: Path(p) for p in outputs.values()}
    files[SWEEP_FILE] = Path(sweep_dir) / SWEEP_FILE
    if not run.offline:
        for job in jobs:
            try:
                run.use_artifact(f"record-{job.id}:latest")
            except Exception:  # noqa: BLE001 - a job run not synced yet: its record is not on the server
                pass
    log_files(run, f"table-{group}", "ablation-table", files, {
        "sweep_dir": str(Path(sweep_dir).resolve()), "caption": table.caption(), "n_runs": table.n_records,
        "job_runs": [{"id": j.id, "name": j.name, "project": j.project} for j in jobs]})
