"""The learning curve: the model evaluated on the validation split at points during training
(``eval.every``), and the Lightning callbacks a user watches it with (``EarlyStopping``,
``ModelCheckpoint`` on ``val/*``), which Lightning would run at the end of a validation loop that
ablate does not use during ``fit``: they check at the curve's points instead.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import pytorch_lightning as pl
import torch
from torch import Tensor

from ablate.record import CurvePoint


def curve_steps(max_steps: int, every: int, early_fraction: float = 0.25) -> list[int]:
    """The steps a learning curve evaluates at: every ``every`` steps (0: none), ``early_fraction``
    of the way (where "early loss" is read: ``eval.early_fraction``) and the last step."""
    steps = {max(1, round(early_fraction * max_steps)), max_steps}
    if every > 0:
        steps |= set(range(every, max_steps + 1, every))
    return sorted(steps)


class LearningCurve(pl.Callback):
    """Evaluates the model on the validation split at ``steps`` (:func:`curve_steps`) during
    training, outside the timed steps (``meters.SpeedMeter`` stops its clock first): ``history``
    holds ``{step, tokens, flops, loss, accuracy}`` per point, ``tokens`` and ``flops`` being what
    training had consumed by then. Each point goes to the trainer's loggers as ``val/*`` against the
    step; ``on_point`` (if given) sees each as well."""

    def __init__(self, batches: Sequence[tuple[Tensor, Tensor]], steps: Sequence[int], tokens_per_step: int,
                 flops_per_token: float, on_point: Callable[[CurvePoint], None] | None = None) -> None:
        self.batches, self.steps = list(batches), set(steps)
        self.tokens_per_step, self.flops_per_token = tokens_per_step, flops_per_token
        self.on_point = on_point
        self.history: list[CurvePoint] = []

    def state_dict(self) -> dict[str, Any]:
        return {"history": [asdict(point) for point in self.history]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history[:] = [CurvePoint(**point) for point in state.get("history", [])]  # in place: the record holds this list

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        step = trainer.global_step
        if step not in self.steps or (self.history and self.history[-1].step == step):
            return
        result = pl_module.evaluate(self.batches)
        tokens = step * self.tokens_per_step * trainer.world_size
        point = CurvePoint(step=step, tokens=tokens, flops=tokens * self.flops_per_token, loss=result["loss"],
                           accuracy=result["accuracy"])
        self.history.append(point)
        for logger in trainer.loggers:  # every logger of the run (logger=[wandb,tensorboard]), not the first only
            logger.log_metrics({f"val/{k}": v for k, v in asdict(point).items() if k != "step"}, step=step)
        # what a Lightning validation would leave: val/* in callback_metrics, then the callbacks that
        # watch them (EarlyStopping, ModelCheckpoint) check, as at a validation's end
        trainer.callback_metrics.update({"val/loss": torch.tensor(float(point.loss)),
                                         "val/accuracy": torch.tensor(float(point.accuracy))})
        check_monitors(trainer, pl_module)
        if self.on_point is not None:
            self.on_point(point)


#: what a Lightning callback can monitor in an ablate run, and which way is better: ``val/*`` from each
#: learning-curve point (``eval.every``), ``train/loss`` from each step (checked at the curve's points)
MONITORS = {"val/loss": "min", "val/accuracy": "max", "train/loss": "min"}
#: where a ``ModelCheckpoint`` without a ``dirpath`` saves, in the job's directory (ablate's own
#: ``checkpoints/last.ckpt``, which a relaunch resumes from, stays ablate's)
MODEL_CHECKPOINTS = "model_checkpoints"


def check_monitors(trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
    """Run the checks of the run's ``EarlyStopping`` and ``ModelCheckpoint`` callbacks now (a
    learning-curve point: ablate's validation). Lightning runs them at the end of its validation
    loop, which ablate does not use during ``fit``; :func:`prepare_callbacks` turns off their own
    end-of-epoch checks, so these points are the only ones."""
    from pytorch_lightning.callbacks import EarlyStopping, ModelCheckpoint

    for callback in trainer.callbacks:
        if isinstance(callback, EarlyStopping):
            callback._run_early_stopping_check(trainer)  # what its on_validation_end runs
        elif isinstance(callback, ModelCheckpoint):
            callback.on_validation_end(trainer, pl_module)


def checkpoint_dir(dirpath: str | None, job_dir: str | Path) -> str:
    """Where a ``ModelCheckpoint`` of a job saves: ``job_dir/model_checkpoints`` (``dirpath`` unset),
    ``job_dir/<dirpath>`` (a relative one: each job of a sweep its own), or an absolute ``dirpath`` as
    given. Raises ValueError for ablate's own ``job_dir/checkpoints``, which a relaunch resumes from."""
    where = Path(dirpath) if dirpath else Path(MODEL_CHECKPOINTS)
    where = (where if where.is_absolute() else Path(job_dir) / where).resolve()
    own = (Path(job_dir) / "checkpoints").resolve()
    if where == own or own in where.parents:
        raise ValueError(f"ModelCheckpoint(dirpath={dirpath!r}) would save into {own}, where ablate keeps the "
                         f"checkpoint a relaunch resumes from; use another dirpath (null: {MODEL_CHECKPOINTS})")
    return str(where)


def prepare_callbacks(callbacks: Sequence[pl.Callback]) -> None:
    """Fit the user's ``EarlyStopping`` and ``ModelCheckpoint`` to a run without a validation loop:
    they check at the learning curve's points only (:func:`check_monitors`), not at the end of the
    training epoch (whose metrics would be those of the last point again)."""
    from pytorch_lightning.callbacks import EarlyStopping, ModelCheckpoint

    for callback in callbacks:
        if isinstance(callback, EarlyStopping):
            callback._check_on_train_epoch_end = False
        elif isinstance(callback, ModelCheckpoint):
            callback._save_on_train_epoch_end = False


def early_stop_entry(callbacks: Sequence[pl.Callback], step: int, max_steps: int) -> dict[str, Any] | None:
    """The record's ``metrics.early_stopped`` when an ``EarlyStopping`` stopped the run: ``{step,
    max_steps, monitor, best, reason}`` (the step it stopped at, of the ``max_steps`` it was given;
    what it watched, the best value seen, Lightning's message). None when none stopped it."""
    from pytorch_lightning.callbacks import EarlyStopping

    for callback in callbacks:
        if isinstance(callback, EarlyStopping) and callback.stopping_reason_message:
            best = callback.best_score
            return {"step": int(step), "max_steps": int(max_steps), "monitor": callback.monitor,
                    "best": float(best) if torch.isfinite(best) else None,
                    "reason": callback.stopping_reason_message}
    return None


def model_checkpoint_entry(callbacks: Sequence[pl.Callback]) -> dict[str, Any] | None:
    """The record's ``metrics.model_checkpoint`` for the run's (first) ``ModelCheckpoint``: ``{dir,
    monitor, best_model_path, best_model_score, last_model_path}``. None without one."""
    from pytorch_lightning.callbacks import ModelCheckpoint

    for c in callbacks:
        if isinstance(c, ModelCheckpoint):
            score = c.best_model_score
            return {"dir": c.dirpath, "monitor": c.monitor, "best_model_path": c.best_model_path or None,
                    "best_model_score": float(score) if score is not None else None,
                    "last_model_path": c.last_model_path or None}
    return None


def callback_problems(group: str, callback: pl.Callback, settings: Mapping[str, Any]) -> list[str]:
    """What ablate refuses of a built Lightning callback before training: an ``EarlyStopping`` or a
    ``ModelCheckpoint`` monitoring a metric no callback sees here (:data:`MONITORS`) or the wrong way,
    a ``ModelCheckpoint`` saving into ablate's own ``checkpoints`` directory."""
    from pytorch_lightning.callbacks import EarlyStopping, ModelCheckpoint

    if not isinstance(callback, (EarlyStopping, ModelCheckpoint)):
        return []
    out = []
    monitor, mode = callback.monitor, getattr(callback, "mode", None)
    if monitor is not None and monitor not in MONITORS:
        out.append(f"{group}.monitor={monitor!r} is not a metric a callback sees in an ablate run; valid: "
                   f"{', '.join(MONITORS)} (val/*: at each learning-curve point, eval.every)")
    elif monitor is not None and mode != MONITORS[monitor]:
        out.append(f"{group}.mode={mode!r} with monitor={monitor}, where {'lower' if MONITORS[monitor] == 'min' else 'higher'}"
                   f" is better; valid here: mode={MONITORS[monitor]}")
    dirpath = settings.get("dirpath")
    if isinstance(callback, ModelCheckpoint) and dirpath and not Path(str(dirpath)).is_absolute() \
            and Path(str(dirpath)).parts[:1] == ("checkpoints",):
        out.append(f"{group}.dirpath={dirpath!r} is ablate's own checkpoints directory in the job's directory "
                   f"(checkpoints/last.ckpt, which a relaunch resumes from); valid: null (<job dir>/"
                   f"{MODEL_CHECKPOINTS}) or another directory (a relative one is inside each job's directory)")
    return out
