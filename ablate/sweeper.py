"""``hydra/sweeper=ablate`` (the default of every ``ablate -m``): the one owner of a sweep.

``run_sweep`` is the sweeper's ``sweep``. In this order, in the process that launched the sweep:

1. plan once (``ablate.planner.Planner``): the product of the swept values, design rows, budget
   steps, tuning stages; every job composed and validated;
2. ``hydra.sweeper.plan=true`` (``ablate --plan``): print the plan (``ablate.preview``) and stop;
3. check the sweep directory: another definition there is refused unless
   ``hydra.sweeper.redefine=true`` (``ablate --redefine``);
4. record the plan (``sweep.json``) and launch it through whichever launcher is configured: the
   tuning runs as a first stage, then, once each variant's learning rate is chosen on the
   validation split, the final runs.

A sweep that cannot run exits 2 naming why, before anything is written or trained. Why a sweeper
and not a callback: only a sweeper may launch jobs, only it sees the first stage end before the
second starts (with every launcher), and its errors propagate (Hydra turns a callback's into a
warning). A relaunch into the same directory resumes: finished jobs are skipped by the jobs
themselves (``ablate.run``), so the tuning runs are not repeated and the same rates are chosen.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from ablate.job import launcher_kind
from ablate.planner import Planner, SweepError, choose_lr, final_jobs, launcher_compose, lr_text
from ablate.results import load_records
from ablate.sweep import SweepPlan, job_signature


def run_sweep(sweeper: Any, arguments: list[str]) -> list[Any]:
    """``Sweeper.sweep`` of ``hydra/sweeper=ablate`` (``hydra_plugins.ablate_sweeper``)."""
    config = sweeper.config
    sweep_dir = Path(config.hydra.sweep.dir)
    planner = Planner(config, launcher_compose(config), arguments=list(arguments))
    try:
        plan = planner.plan()
        if sweeper.plan:
            from ablate.preview import preview, render

            print(render(preview(planner, plan, sweep_dir)))
            return []
        planner.check_directory(sweep_dir, plan, redefine=sweeper.redefine)
        _record(sweep_dir, config, plan)
    except SweepError as error:
        print(f"ablate: {error}", file=sys.stderr)
        sys.exit(2)
    launcher = launcher_kind(str(config.hydra.launcher.get("_target_", "")))
    if config.logger.name == "wandb" and launcher in ("joblib", "submitit_local"):
        from ablate.tracking import share_service

        share_service()  # the job processes on this machine log through this process's wandb service
    returns = [_launch(sweeper, plan.jobs, 0)]
    if plan.tune is None:
        return returns
    chosen, scores = choose_lr(load_records(sweep_dir), plan)
    first = list(plan.jobs)
    done = {job_signature(job) for job in first}
    todo = [job for job in final_jobs(plan, chosen) if job_signature(job) not in done]
    plan.jobs = first + todo
    plan.tune.chosen, plan.tune.scores = chosen, scores
    plan.write(sweep_dir)
    print("[ablate] learning rate chosen per variant on the validation split: "
          + "; ".join(f"{variant or 'defaults'}: {lr_text(lr)}" for variant, lr in chosen.items()))
    if todo:
        returns.append(_launch(sweeper, todo, len(first)))
    return returns


def _record(sweep_dir: Path, config: Any, plan: SweepPlan) -> None:
    """The sweep directory, its ``multirun.yaml`` and ``sweep.json``, before any job starts."""
    try:
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(config, sweep_dir / "multirun.yaml")
        plan.write(sweep_dir)
    except OSError as error:
        raise SweepError(f"the sweep could not run: cannot write its plan in {sweep_dir} "
                         f"({type(error).__name__}: {error}); nothing was trained") from error


def _launch(sweeper: Any, jobs: list[list[str]], first_index: int) -> Any:
    """One stage through the configured launcher (``hydra.sweeper.max_batch_size`` splits it)."""
    results: list[Any] = []
    # No ``validate_batch_is_legal`` (the basic sweeper's composition of every job, one more per job
    # before any starts): the planner has composed and validated each of them already.
    for batch in sweeper.split_overrides_to_chunks(jobs, sweeper.max_batch_size):  # the basic sweeper's own
        results += list(sweeper.launcher.launch(batch, initial_job_idx=first_index + len(results)))
    for result in results:
        _ = result.return_value  # raises for a job that raised (Hydra's basic sweeper does the same)
    return results
