"""One job's record, from start to end: validate, skip if done, start wandb, train, write ``result.json``.

Where the job runs is ``ablate.job``'s; what training does is ``ablate.train``'s. Whatever happens inside training, the job ends with a ``result.json`` whose status is ``ok``,
``diverged`` (non-finite loss; the step is recorded) or ``failed`` (the exception is recorded),
and with its wandb run finished (non-zero exit code unless ``ok``). A job whose record already
says ``ok`` for the same overrides is skipped, so relaunching a sweep resumes it.
"""

from __future__ import annotations

import shutil
import signal
import time
import traceback
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ablate.config import ConfigError, apply_smoke, validate
from ablate.job import Job, sweep_group, sweeper_refusal
from ablate.results import read_record, write_record
from ablate.sweep import design_labels, job_signature


def _wandb_config(cfg: dict[str, Any], job: Job) -> dict[str, Any]:
    """The resolved config, with one key per group holding the option chosen (for dashboard grouping)
    and that option's settings under ``<group>_cfg``."""
    out = {k: v for k, v in cfg.items() if k not in job.choices}
    for group, choice in job.choices.items():
        out[group] = choice
        out[f"{group}_cfg"] = cfg.get(group)
    out["variant"] = job.variant
    return out


class _InterruptWatch:
    """Notes a Ctrl-C (SIGINT) during training, then lets it act as before (KeyboardInterrupt),
    so the record can say ``interrupted`` rather than ``failed``: a relaunch reruns the job and
    tables do not count it as a failure."""

    def __init__(self) -> None:
        self.seen = False
        self._previous: Any = None

    def _handler(self, signum: int, frame: Any) -> None:
        if self._previous == signal.SIG_IGN:
            return
        self.seen = True
        if callable(self._previous):
            self._previous(signum, frame)
        raise KeyboardInterrupt

    def __enter__(self) -> "_InterruptWatch":
        previous = signal.getsignal(signal.SIGINT)
        try:
            signal.signal(signal.SIGINT, self._handler)
            self._previous = previous
        except (ValueError, TypeError):  # not the main thread: signals cannot be watched here
            self._previous = None
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


def run_job(cfg: DictConfig, job: Job) -> dict[str, Any]:
    """Train one job and return its record (also written to ``job.dir/result.json`` on rank 0)."""
    validation_started = time.perf_counter()
    apply_smoke(cfg)
    validate(cfg)
    if cfg.tune.lr and job.sweep_dir is None:
        raise ConfigError(f"tune.lr={list(cfg.tune.lr)} tunes the learning rate across the runs of a sweep; "
                          "run it as one: ablate -m tune.lr=... (and the variants to compare)")
    if job.sweeper not in (None, "ablate"):  # the sweep-start check refuses these; a safety net
        refusal = sweeper_refusal(cfg, job.sweeper)
        if refusal:
            raise ConfigError(refusal)
    previous = read_record(job.dir)
    done = previous is not None and previous.get("status") == "ok"
    if done and job_signature(previous.get("overrides")) == job_signature(job.overrides):  # in any order
        print(f"[ablate] {job.name}: already ok in {job.dir}, skipped")
        return previous

    resolved = OmegaConf.to_container(cfg, resolve=True)
    group = sweep_group(cfg, job.sweep_dir)
    record: dict[str, Any] = {
        "status": "failed", "overrides": job.overrides, "choices": job.choices,
        "experiment": _experiment_entry(resolved["experiment"]), "config": resolved, "metrics": {}, "error": None,
        "diverged_step": None, "wandb": None, "budget": _budget_entry(cfg, job),
        "job": job.record_fields(),
    }
    # Lightning (seconds to import) only once the config is valid: a refused one is refused at once
    from ablate.lit import Checkpointer, Diverged, Preempted, checkpoint_state
    from ablate.train import train

    checkpointer = Checkpointer(job.dir / CHECKPOINT, int(cfg.checkpoint.every_n_steps), bool(cfg.checkpoint.keep))
    resume = checkpoint_state(checkpointer.path) if checkpointer.path.is_file() else None
    run = None
    wandb_started = time.perf_counter()
    if _rank() == 0:  # a resumed job continues its wandb run
        run = _start_wandb(cfg, job, resolved, group, (resume or {}).get("wandb_run_id"))
    record["metrics"]["time_s"] = {"validate": wandb_started - validation_started,
                                   "wandb_init": time.perf_counter() - wandb_started}
    if run is not None:
        from ablate.tracking import run_dir

        record["wandb"] = {"project": run.project, "group": group, "name": job.name, "dir": run_dir(run),
                           "id": run.id}
        checkpointer.wandb_run_id = run.id
    started = time.perf_counter()
    interrupt, stop = _InterruptWatch(), _StopSignals(checkpointer)
    try:
        with interrupt, stop:
            train(cfg, job, run, record["metrics"], checkpointer, resume)
        record["status"] = "ok"
        if not cfg.checkpoint.keep:
            shutil.rmtree(checkpointer.path.parent, ignore_errors=True)
    except BaseException as error:  # noqa: BLE001 - every failure is recorded, then handled below
        if isinstance(error, Diverged):
            record["status"], record["diverged_step"] = "diverged", error.step
        elif isinstance(error, (KeyboardInterrupt, Preempted)) or interrupt.seen:
            # Ctrl-C (Lightning turns it into SystemExit(1) after its own shutdown), or a stop signal
            # after its checkpoint: a relaunch resumes the job
            record["status"] = "interrupted"
        record["error"] = "".join(traceback.format_exception_only(type(error), error)).strip()
        record["traceback"] = traceback.format_exc()
        if not isinstance(error, Exception):  # KeyboardInterrupt/SystemExit: record, then stop
            _finish(record, run, job)
            raise
        if isinstance(error, Preempted):  # then do what the signal asked: requeue (submitit) or stop
            _finish(record, run, job)
            stop.pass_on(error.signum)
    record["metrics"]["wall_time_s"] = time.perf_counter() - started
    _finish(record, run, job)
    return record


#: where a job keeps its training state while it runs (removed when it ends ok, unless checkpoint.keep)
CHECKPOINT = Path("checkpoints") / "last.ckpt"
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGUSR1", "SIGUSR2") if hasattr(signal, name))


class _StopSignals:
    """SIGTERM (a scheduler stopping the job: ``scancel``, ``scontrol requeue``, preemption) and
    SIGUSR1/SIGUSR2 (SLURM's warning before a time-out; submitit's preemption signal) ask the
    job to stop: training finishes its step, saves a checkpoint and stops (``lit.Preempted``), the
    record says ``interrupted``, and then the signal gets what it was sent for
    (:meth:`pass_on`): submitit's own handler requeues the job, otherwise the process exits."""

    def __init__(self, checkpointer: Any) -> None:
        self.checkpointer = checkpointer
        self._previous: dict[int, Any] = {}

    def _handler(self, signum: int, frame: Any) -> None:
        self.checkpointer.request_stop(signum)

    def __enter__(self) -> "_StopSignals":
        for signum in STOP_SIGNALS:
            try:
                self._previous[signum] = signal.signal(signum, self._handler)
            except (ValueError, OSError):  # not the main thread: the scheduler's defaults stand
                break
        return self

    def __exit__(self, *exc: Any) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)

    def pass_on(self, signum: int) -> None:
        previous = self._previous.get(signum)
        if callable(previous) and getattr(previous, "__name__", "") != "bypass":
            previous(signum, None)  # e.g. submitit's checkpoint_and_try_requeue: requeues, exits
        raise SystemExit(128 + signum)


def _experiment_entry(experiment: dict[str, Any]) -> dict[str, Any]:
    """The record's ``experiment``: a design's rows get their labels, and its base is the baseline
    unless the experiment names another."""
    design = experiment.get("design")
    if not design:
        return experiment
    labels = design_labels(design)
    return {**experiment, "labels": {**labels, **(experiment.get("labels") or {})},
            "baseline": experiment.get("baseline") or next(iter(labels), None)}


def _budget_entry(cfg: DictConfig, job: Job) -> dict[str, Any]:
    """The record's ``budget``: what was matched, the steps this job was given, and its baseline."""
    budget = job.sweep.budget if job.sweep is not None else None
    baseline = budget.baseline_of.get(job.variant) if budget is not None else None
    entry = {"match": str(cfg.budget.match), "steps": int(cfg.trainer.max_steps), "baseline": baseline}
    if entry["match"] == "tokens_per_param":
        entry["tokens_per_param"] = float(cfg.budget.tokens_per_param)
    return entry


def _rank() -> int:
    """This process's global rank (0 outside distributed training), as Lightning reads it."""
    from pytorch_lightning.utilities import rank_zero_only

    return int(rank_zero_only.rank)


def _start_wandb(cfg: DictConfig, job: Job, resolved: dict[str, Any], group: str, run_id: str | None = None) -> Any:
    if cfg.logger.name != "wandb":
        return None
    from ablate.tracking import init_run

    return init_run(name=job.name, group=group, job_type=job.variant[:128], project=cfg.logger.project,
                    config=_wandb_config(resolved, job), dir=job.dir, run_id=run_id)


def _finish(record: dict[str, Any], run: Any, job: Job) -> None:
    if _rank() != 0:
        return
    write_record(job.dir, record)
    if run is not None:
        summary = {k: v for k, v in record["metrics"].items() if isinstance(v, (int, float, str))}
        run.summary.update({**summary, "status": record["status"], "error": record["error"] or ""})
        run.finish(exit_code=0 if record["status"] == "ok" else 1)
    _print_summary(record, job)


def _print_summary(record: dict[str, Any], job: Job) -> None:
    from rich.console import Console
    from rich.markup import escape

    m = record["metrics"]
    console = Console(highlight=False, soft_wrap=True)
    if record["status"] != "ok":
        console.print(f"[bold red]{escape(job.name)}: {record['status']}[/] - {escape(record['error'])}")
        return
    parts = [f"{m['metric']}@{length} {e['accuracy']:.4f}" for length, e in m["eval"].items()]
    parts += [f"loss {m['loss']:.4f}", f"{m['tokens_per_s']:,.0f} tokens/s"]
    if "peak_memory_bytes" in m:
        parts.append(f"peak memory {m['peak_memory_bytes'] / 2**20:.2f} MiB")
    parts.append(f"params {m['params']:,}")
    console.print(f"[bold green]{escape(job.name)}[/]: {escape('  '.join(parts))}  ({escape(str(job.dir / 'result.json'))})")
