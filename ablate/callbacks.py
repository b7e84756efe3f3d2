"""Hydra callbacks around a multirun: check every job before the first trains; end with the table.

Configured in ``conf/config.yaml`` under ``hydra.callbacks``, so they run with every launcher
(basic, joblib, submitit) in the process that launched the sweep. The sweep's jobs and
``sweep.json`` are ``ablate.sweep``'s; the table is ``ablate.report``'s.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from ablate.config import apply_smoke, config_problems
from ablate.sweep import PLAN_ENV, REDEFINE_ENV, job_signature, launcher_kind, read_sweep_definition, same_jobs
from ablate.sweeper import job_config, plan_sweep


def job_problems(config: DictConfig, overrides: list[str]) -> list[str]:
    try:
        job_cfg = job_config(config, overrides)
    except Exception as error:  # noqa: BLE001 - a composition error is a problem of this job
        return [str(error)]
    problems = config_problems(OmegaConf.masked_copy(job_cfg, [k for k in job_cfg if k != "hydra"]))
    launcher = launcher_kind(str(config.hydra.launcher.get("_target_", "")))
    if str(job_cfg.trainer.get("strategy", "auto")).startswith("ddp") and launcher != "submitit_slurm":
        # Lightning starts DDP ranks by re-running the command line: in a local multirun every rank
        # would re-launch the whole sweep. SLURM starts the ranks itself (one task per GPU).
        problems.append(f"trainer.strategy={job_cfg.trainer.strategy} in a multirun needs "
                        "hydra/launcher=submitit_slurm with hydra.launcher.tasks_per_node=<GPUs>; "
                        "or run the job alone: ablate trainer=ddp ...")
    return problems


def _refuse(lines: list[str]) -> None:
    print("\n".join(lines), file=sys.stderr)
    sys.exit(2)


def _check_directory(sweep_dir: Path, jobs: list[list[str]], planning: bool = False) -> str | None:
    """A sweep directory belongs to one sweep definition: relaunching the same command resumes it;
    another set of jobs there is refused unless asked for (``ablate --redefine``). When only
    planning, the refusal to come is returned as a note instead."""
    previous = read_sweep_definition(sweep_dir)
    if previous is None or same_jobs(previous, jobs) or os.environ.get(REDEFINE_ENV):
        return None
    if planning:
        return (f"{sweep_dir} holds another sweep ({len(previous)} jobs): launching this one there would be "
                "refused; add --redefine, or pick another hydra.sweep.dir")
    _refuse([f"ablate: {sweep_dir} holds another sweep ({len(previous)} jobs, e.g. "
             f"{' '.join(previous[0]) or '(defaults)'}); this command defines {len(jobs)} other jobs "
             f"(e.g. {' '.join(jobs[0]) or '(defaults)'}). Nothing was trained.",
             "  Relaunch the same overrides to resume that sweep, pick another hydra.sweep.dir, or add "
             "--redefine to run this definition there (its table then uses only its own jobs)."])


class SweepCallbacks(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Validate every job's composed config (exit 2 before any training if one is invalid),
        and record the sweep's jobs and the keys it varies (a job's variant, its wandb job_type).
        This check cannot be skipped: if it cannot run at all, nothing trains either (Hydra would
        only warn about an exception raised by a callback)."""
        try:
            self._check_and_record(config)
        except Exception as error:  # noqa: BLE001 - SystemExit (a refusal) passes through
            _refuse([f"ablate: the check of this sweep's jobs could not run ({type(error).__name__}: "
                     f"{error}); nothing was trained"])

    def _check_and_record(self, config: DictConfig) -> None:
        if config.hydra.sweeper.get("_target_", "").split(".")[-1] not in ("AblateSweeper", "BasicSweeper"):
            return  # other sweepers (e.g. optimisers) choose their jobs as they go

        def load(overrides: list[str]) -> DictConfig:
            cfg = job_config(config, overrides)
            cfg = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
            apply_smoke(cfg)
            return cfg

        try:
            plan = plan_sweep(config)  # its jobs at their own steps: a budget only changes how many
        except ValueError as error:
            _refuse([f"ablate: this sweep cannot run: {error}. Nothing was trained."])
        bad = {}
        first = {job_signature(job) for job in plan.first}
        later = [job for job in plan.definition if job_signature(job) not in first]  # a tuned sweep's final runs
        for overrides in plan.first + later:
            problems = job_problems(config, overrides)
            if problems:
                bad[" ".join(overrides) or "(defaults)"] = problems
        if bad:
            lines = [f"ablate: {len(bad)} job(s) of this sweep have an invalid config; nothing was trained:"]
            for job, problems in bad.items():
                lines += [f"  {job}:"] + [f"    - {p}" for p in problems]
            _refuse(lines)
        plan = plan_sweep(config, load)  # with each job's budget
        planning = bool(os.environ.get(PLAN_ENV))
        note = _check_directory(Path(config.hydra.sweep.dir), plan.definition, planning)
        if planning:
            from ablate.plan import show_plan

            show_plan(Path(config.hydra.sweep.dir), plan.first, load, plan.swept, note,
                      later=plan.definition if plan.tune else [])
            sys.exit(0)
        plan.record(config.hydra.sweep.dir, plan.first)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Print, save and log the sweep's table; exit 1 if any job failed."""
        from ablate.report import build_table, log_to_wandb, render, save_outputs
        from ablate.sweep import load_sweep_records

        sweep_dir = Path(config.hydra.sweep.dir)
        records = load_sweep_records(sweep_dir)
        if not records:
            return
        table = build_table(records)
        print(render(table, "terminal"))
        paths = save_outputs(table, sweep_dir)
        print(f"[ablate] table saved: {', '.join(str(p) for p in paths.values())}")
        if config.logger.name == "wandb":
            log_to_wandb(table, sweep_dir, paths.get("png"))
        failed = [r for r in records if r.get("status") == "failed"]
        if failed:
            print(f"ablate: {len(failed)} job(s) failed: "
                  + "; ".join(f"{r['job']['dir']}: {r['error']}" for r in failed), file=sys.stderr)
            sys.exit(1)
