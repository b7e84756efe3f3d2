"""Hydra callbacks around a multirun: the table at its end; a guard at its start under other sweepers.

Configured in ``conf/config.yaml`` under ``hydra.callbacks``, so they run with every sweeper and
launcher, in the process that launched the sweep. Under ``hydra/sweeper=ablate`` (the default) the
sweeper owns the sweep (``ablate.sweeper``) and the start callback does nothing. Under another
sweeper nobody else checks the jobs before they train, so the start callback does:

* ``hydra/sweeper=basic`` launches the plain product of the swept values, so the same planner
  (``ablate.planner``) validates every job of it and records it (``sweep.json``), refusing what
  only ablate's sweeper can honour (designs, matched budgets, lr tuning);
* any other sweeper (an optimiser such as optuna) chooses its jobs as it goes: only those settings
  are refused, from the composed config; jobs validate themselves as they start.

A callback's exception is only a warning to Hydra, so a refusal here exits 2 itself.
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from ablate.launchers import sweeper_kind, sweeper_refusal
from ablate.record import Record
from ablate.loggers import uses_wandb


def _refuse(message: str) -> None:
    print(f"ablate: {message}", file=sys.stderr)
    sys.exit(2)


def _trained_elsewhere(sweep_dir: Path) -> list[str]:
    """The job directories of ``sweep_dir`` whose job another process is training (its lock is held)."""
    from ablate.job import lock_holder

    if not sweep_dir.is_dir():
        return []
    return sorted(d.name for d in sweep_dir.iterdir() if d.is_dir() and lock_holder(d) is not None)


def _retime(config: DictConfig, sweep: Any, table: Any) -> bool:
    """Whether the sweep's end times its variants again, interleaved, for the speed column
    (``measure.retime``): ``always``; ``auto`` where its jobs ran at once or a speed cell was timed
    under another load than its baseline's. Never for a layout without a speed column (a ladder), a
    smoke test, a sweep with a ``bench.json`` already, or one variant."""
    from ablate.measure import MeasureSettings
    from ablate.settings import read_settings

    mode = read_settings(MeasureSettings, config.get("measure")).retime
    if (mode == "never" or not table.shows_speed or sweep.bench is not None or len(table.rows) < 2
            or bool(config.get("smoke"))):
        return False
    shared = any((r.metrics.concurrent_jobs or 1) > 1 for r in sweep.records if r.ok)
    loaded = any(row.speed_doubt[0] == "load" for row in table.rows)
    return mode == "always" or shared or loaded


def _retimed(sweep: Any) -> Any:
    """The sweep with an interleaved timing of its variants (``ablate.bench.bench_sweep``) as its
    ``bench.json``, as ``ablate-table --bench --save`` leaves it."""
    import dataclasses

    from ablate.bench import bench_sweep
    from ablate.report.records import BENCH_FILE, save_bench

    started = time.perf_counter()
    print("[ablate] timing the variants again, interleaved, for the speed column (measure.retime)", flush=True)
    bench = bench_sweep([r for r in sweep.records if r.ok])
    save_bench(sweep.sweep_dir, bench)
    print(f"[ablate] re-timed in {time.perf_counter() - started:.0f} s: {BENCH_FILE} (ablate-table --bench redoes it)")
    return dataclasses.replace(sweep, bench=bench)


class SweepCallbacks(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._started = time.monotonic()  # the sweep's wall time, said at its end
        kind = sweeper_kind(str(config.hydra.sweeper.get("_target_", "")))
        if kind == "ablate":
            return  # ablate's sweeper plans, validates and records the sweep itself
        try:
            if kind == "basic":
                self._plan_basic_sweep(config)
            else:
                refusal = sweeper_refusal(config, kind)
                if refusal:
                    _refuse(f"this sweep cannot run: {refusal}. Nothing was trained.")
        except Exception as error:  # noqa: BLE001 - SystemExit (a refusal) passes through
            _refuse(f"the check of this sweep's jobs could not run ({type(error).__name__}: {error}); "
                    "nothing was trained")

    @staticmethod
    def _plan_basic_sweep(config: DictConfig) -> None:
        from ablate.ownership import claim_directory
        from ablate.planner import Planner, SweepError, launcher_compose

        planner = Planner(config, launcher_compose(config), sweeper="basic")
        sweep_dir = Path(config.hydra.sweep.dir)
        try:
            plan = planner.plan()
            claim_directory(sweep_dir, plan, planner.sweeper)  # checked and recorded as one step
        except SweepError as error:
            _refuse(str(error))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Print the sweep's table and write what it can (each artefact on its own: the table files
        and figures, report.html, the wandb table run); exit 1 if a job failed, or if any part of
        the end failed, naming each with the command that redoes the end alone."""
        if config.hydra.sweeper.get("plan"):
            return  # ablate --plan ran nothing
        from ablate.report import build_table, render
        from ablate.console import describe_error
        from ablate.report.publish import publish, redo_command
        from ablate.report.records import load_sweep

        sweep_dir = Path(config.hydra.sweep.dir)
        wandb = uses_wandb(config.logger)
        elsewhere = _trained_elsewhere(sweep_dir)
        if elsewhere:
            print(f"[ablate] {len(elsewhere)} job(s) of this sweep are being trained by another process, not here: "
                  f"{', '.join(elsewhere)}; their records appear when they end (ablate-table {sweep_dir})")
        problems: list[str] = []
        records: list[Record] = []
        table = None
        with warnings.catch_warnings(record=True) as notes:  # one plain line each, not Python's warning format
            warnings.simplefilter("default")
            try:
                sweep = load_sweep(sweep_dir)  # read once: the table, the page, the figures and wandb use it
                records = sweep.records
                table = build_table(sweep) if records else None
                if table is not None and _retime(config, sweep, table):
                    sweep = _retimed(sweep)
                    table = build_table(sweep)
                if table is not None:
                    print(render(table, "terminal", path=str(sweep_dir)))
            except Exception as error:  # noqa: BLE001 - named below with the command that redoes it
                problems.append(f"the table ({describe_error(error)})")
        for note in dict.fromkeys(str(n.message) for n in notes):
            print(f"[ablate] note: {note}")
        if records:  # this machine's step times, for the next sweep's estimate (ablate --plan, its first line)
            self._remember_step_times(records)
            self._remember_spreads(table)
        if table is not None:
            done = publish(table, records, sweep_dir, wandb=wandb)
            if done.written:
                print(f"[ablate] table saved: {', '.join(str(p) for p in done.written.values())}")
            problems += done.problems
        self._say_wall_time(records)
        failed = [r for r in records if r.status == "failed"]
        if failed:
            print(f"ablate: {len(failed)} job(s) failed: "
                  + "; ".join(f"{r.job.dir}: {r.error}" for r in failed), file=sys.stderr)
        if problems:
            print(f"ablate: the sweep's end could not write {'; '.join(problems)}. The records are in {sweep_dir}; "
                  f"this redoes the end alone: {redo_command(sweep_dir, wandb)}", file=sys.stderr)
        if failed or problems:
            sys.exit(1)

    @staticmethod
    def _remember_step_times(records: list[Record]) -> None:
        """Advisory: a cache that cannot be written costs later estimates only, never the sweep's end."""
        from ablate.step_times import record_samples, remember

        try:
            remember(record_samples(records))
        except Exception as error:  # noqa: BLE001
            from ablate.console import describe_error

            print(f"[ablate] note: this sweep's step times were not kept for later estimates ({describe_error(error)})")

    @staticmethod
    def _remember_spreads(table: Any) -> None:
        """The spreads of the table's paired differences, for ``--plan``'s power advice of later sweeps
        (``ablate.seed_spreads``); advisory, as the step times are."""
        from ablate.report.rounds import comparison_spreads
        from ablate.seed_spreads import remember

        if table is None:
            return
        try:
            remember(comparison_spreads(table))
        except Exception as error:  # noqa: BLE001
            from ablate.console import describe_error

            print(f"[ablate] note: this sweep's seed spreads were not kept for later power advice "
                  f"({describe_error(error)})")

    def _say_wall_time(self, records: list[Record]) -> None:
        from collections import Counter

        from ablate.console import duration_text

        started = getattr(self, "_started", None)
        if started is None:
            return
        counts = Counter(r.status for r in records)
        print(f"[ablate] the sweep took {duration_text(time.monotonic() - started)}"
              + (f" ({', '.join(f'{n} {status}' for status, n in counts.items())})" if counts else ""))
