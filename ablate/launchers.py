"""Which sweeper and launcher a sweep runs under, and what each of them may run.

ablate's own sweeper (``hydra/sweeper=ablate``, the default) plans design rows, matched budgets
and tuning stages before it launches anything; Hydra's basic sweeper launches the plain product of
the swept values, and an optimiser sweeper (optuna...) chooses its jobs as it goes. Settings that
only ablate's sweeper can honour are refused under the others (:func:`sweeper_refusal`): by the
planner, the sweep-start callback and, as a safety net, the job itself.
"""

from __future__ import annotations

from omegaconf import DictConfig

from ablate.settings import AUTO_SEED, RunSettings

#: the launchers a sweep may name, by the end of their ``hydra.launcher._target_``
LAUNCHERS = (("BasicLauncher", "basic"), ("JoblibLauncher", "joblib"),
             ("submitit_launcher.LocalLauncher", "submitit_local"), ("SlurmLauncher", "submitit_slurm"))


def launcher_kind(target: str) -> str:
    """The launcher a ``hydra.launcher._target_`` names: ``basic``, ``joblib``, ``submitit_local``,
    ``submitit_slurm``, or another launcher's class name."""
    return next((kind for suffix, kind in LAUNCHERS if target.endswith(suffix)),
                target.rsplit(".", 1)[-1] or "unknown")


def sweeper_kind(target: str) -> str:
    """The sweeper a ``hydra.sweeper._target_`` names: ``ablate`` (ablate's own, which plans
    designs, budgets and tuning), ``basic`` (Hydra's), or another sweeper's class name."""
    name = target.rsplit(".", 1)[-1]
    return {"AblateSweeper": "ablate", "BasicSweeper": "basic"}.get(name, name or "unknown")


def ablate_sweeper_settings(cfg: DictConfig) -> list[str]:
    """The settings of ``cfg`` that only ablate's sweeper can honour, as ``key=value``: rows
    generated from a design, steps matched to a budget, a learning rate tuned per variant, a fine-tune
    stage after the pretraining. Another
    sweeper would launch each job as if they were not there."""
    settings = RunSettings.of(cfg)
    found = ["experiment.design"] if settings.experiment.design is not None else []
    if settings.budget.match != "steps":
        found.append(f"budget.match={settings.budget.match}")
    if settings.tune.lr:
        found.append(f"tune.lr={list(settings.tune.lr)}")
    if settings.finetune.tasks:
        found.append(f"finetune.tasks={list(settings.finetune.tasks)}")
    if cfg.get("seed") == AUTO_SEED:
        found.append(f"seed={AUTO_SEED}")
    return found


def sweeper_refusal(cfg: DictConfig, sweeper: str) -> str | None:
    """Why a sweep under ``sweeper`` (not ablate's) cannot run ``cfg``, or None when it can."""
    found = ablate_sweeper_settings(cfg)
    if not found:
        return None
    return (f"{', '.join(found)}: only ablate's sweeper can run this (it plans design rows, budgets, "
            f"tuning, fine-tune stages and seed rounds before launching); drop hydra/sweeper={sweeper} to use it (hydra/sweeper=ablate, "
            "the default), or remove these settings")
