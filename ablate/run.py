"""One job's record, from start to end: validate, skip if done, start wandb, train, write ``result.json``.

Where the job runs is ``ablate.job``'s; what training does is ``ablate.train``'s. Whatever happens inside training, the job ends with a ``result.json`` whose status is ``ok``,
``diverged`` (non-finite loss; the step is recorded) or ``failed`` (the exception is recorded),
and with its wandb run finished (non-zero exit code unless ``ok``). A job whose record already
says ``ok`` for the same overrides is skipped, so relaunching a sweep resumes it; so is a job that
another process is training (its lock is held: ``Job.claim``), so no job trains twice at once.

A stop (Ctrl-C, or a stop signal: SIGTERM, SIGHUP, SIGUSR1/2) ends the job with ``interrupted``:
during set-up at once, during training at the end of the step (with a checkpoint), during the
final evaluation once the job is recorded. A further signal while the record is written waits
for it. A process that was stopped starts no other job (a joblib worker runs job after job).
"""

from __future__ import annotations

import os
import shutil
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ablate.config import ConfigError, validate
from ablate.console import print_job_line
from ablate.job import JOB_LOCK, Job, launcher_gone, lock_holder
from ablate.launchers import sweeper_refusal
from ablate.settings import RunSettings, apply_smoke
from ablate.heap import imports_untraced
from ablate.finetune import PRETRAINED, pretrained_problem, pretraining_dir, stage
from ablate.record import BudgetEntry, FinetuneEntry, Record, TuneEntry, WandbEntry, read_record
from ablate.stops import InterruptWatch, Preempted, StopSignals
from ablate.loggers import sweep_group, uses_wandb
from ablate.sweep import design_labels, job_signature


def _wandb_config(cfg: dict[str, Any], job: Job) -> dict[str, Any]:
    """The resolved config, with one key per group holding the option chosen (for dashboard grouping)
    and that option's settings under ``<group>_cfg``, the job's ``variant`` and the ``code_version``."""
    from ablate.code_version import code_version

    out = {k: v for k, v in cfg.items() if k not in job.choices}
    for group, choice in job.choices.items():
        out[group] = choice
        out[f"{group}_cfg"] = cfg.get(group)
    out["variant"] = job.variant  # group the dashboard's runs by this key (job_type is the run's role: train)
    out["code_version"] = code_version()
    return out


#: set to the exit code once a stop ended a job in this process: it starts no other job
_stopped: list[int] = []


def run_job(cfg: DictConfig, job: Job) -> Record:
    """Train one job and return its record (also written to ``job.dir/result.json`` on rank 0)."""
    validation_started = time.perf_counter()
    apply_smoke(cfg)
    validate(cfg)
    settings = RunSettings.of(cfg)  # read once: the job, its training and its record take these
    if settings.finetune.tasks and job.sweep_dir is None:
        raise ConfigError(f"finetune.tasks={list(settings.finetune.tasks)} pretrains, then fine-tunes each pretrained "
                          "model, across the jobs of a sweep; run it as one: ablate -m finetune.tasks=... "
                          "(and the variants to compare)")
    if settings.tune.lr and job.sweep_dir is None:
        raise ConfigError(f"tune.lr={list(settings.tune.lr)} tunes the learning rate across the runs of a sweep; "
                          "run it as one: ablate -m tune.lr=... (and the variants to compare)")
    if job.sweeper not in (None, "ablate"):  # the sweep-start check refuses these; a safety net
        refusal = sweeper_refusal(cfg, job.sweeper)
        if refusal:
            raise ConfigError(refusal)
    if _stopped:  # this process was asked to stop while it ran an earlier job
        print(f"[ablate] {job.name}: not started: this process was stopped", file=sys.stderr)
        raise SystemExit(_stopped[0])
    done = _done_already(job, cfg)
    if done is not None:
        return done
    if _rank() == 0 and not job.claim():
        return _running_elsewhere(job)
    try:
        done = _done_already(job, cfg, say=False)  # again, under the lock: another process may have finished it meanwhile
        return done if done is not None else _train_job(cfg, settings, job, validation_started)
    finally:
        job.release()


def nothing_to_do(cfg: DictConfig, job: Job) -> str | None:
    """The line the job would print, and do nothing else, if it started now: it is done already (as
    :func:`run_job` finds it) or another process is training it (its lock is held); None where it
    would train. For a sweeper that would otherwise start a process only to hear this."""
    if _finished(job, cfg, say=False) is not None:
        return _done_line(job)
    if lock_holder(job.dir) is not None:
        return _elsewhere_line(job)
    return None


def _done_already(job: Job, cfg: DictConfig, say: bool = True) -> Record | None:
    """The job's record when it says ``ok`` for the same overrides (in any order): nothing to do. A
    pretraining whose weights for its fine-tunes are missing or corrupt is trained again (one line says why)."""
    previous = _finished(job, cfg, say)
    if previous is not None:
        print(_done_line(job))
    return previous


def _done_line(job: Job) -> str:
    return f"[ablate] {job.name}: already ok in {job.dir}, skipped"


def _finished(job: Job, cfg: DictConfig, say: bool) -> Record | None:
    """:func:`_done_already`'s record, without its line."""
    previous = read_record(job.dir)  # None for an implausible record too (ablate.record): not trusted, run again
    if previous is None or not previous.ok or job_signature(previous.overrides) != job_signature(job.overrides):
        return None
    if stage(cfg) == "pretrain":
        problem = pretrained_problem(job.dir, previous.finetune.sha256 if previous.finetune else None)
        if problem is not None:
            if say:
                print(f"[ablate] {job.name}: finished, but its weights for the fine-tunes cannot be used ({problem}); "
                      "training it again")
            return None
    if stage(cfg) == "finetune":  # fine-tuned from weights its pretraining has since replaced: again
        pretraining = read_record(pretraining_dir(cfg, job.sweep_dir))
        now = pretraining.finetune.sha256 if pretraining is not None and pretraining.finetune else None
        if previous.finetune is None or now != previous.finetune.sha256:
            if say:
                print(f"[ablate] {job.name}: finished, but from pretrained weights its pretraining has replaced since; "
                      "fine-tuning it again")
            return None
    return previous


def _running_elsewhere(job: Job) -> Record:
    """What a job that another process is training returns here: nothing is written."""
    print(_elsewhere_line(job))
    return Record(status="running", overrides=job.overrides, choices=job.choices, job=job.record_fields())


def _elsewhere_line(job: Job) -> str:
    holder = lock_holder(job.dir)
    who = f"process {holder[0]}" if holder and holder[0] else "another process"
    return f"[ablate] {job.name}: being trained by {who} (it holds {job.dir / JOB_LOCK}); skipped here"


def _train_job(cfg: DictConfig, settings: RunSettings, job: Job, validation_started: float) -> Record:
    resolved = OmegaConf.to_container(cfg, resolve=True)
    group = sweep_group(cfg, job.sweep_dir)
    record = Record(status="failed", overrides=job.overrides, choices=job.choices,
                    experiment=_experiment_entry(resolved["experiment"]), config=resolved,
                    # a fine-tune trains finetune.steps at finetune.lr: no budget matched, no rate tuned
                    budget=_budget_entry(cfg, settings, job) if stage(cfg) != "finetune" else
                    BudgetEntry(match="steps", steps=int(cfg.trainer.max_steps)),
                    tune=_tune_entry(job) if stage(cfg) != "finetune" else None, stage=stage(cfg),
                    finetune=_finetune_entry(cfg, settings, job), job=job.record_fields())
    run = None
    started = time.perf_counter()
    stop = StopSignals()
    interrupt = InterruptWatch(stop)
    ended_by: BaseException | None = None  # what ends this process's run of jobs once the record is written
    # The stop handlers cover the whole set-up (Lightning's import, the checkpoint's load, wandb's start:
    # up to ~20 s), so a stop there is recorded too, and the wandb run, if it started, finished
    with interrupt, stop:
        try:
            # Lightning (seconds to import) only once the config is valid: a refused one is refused at once
            with imports_untraced():
                from ablate.lit import Checkpointer, checkpoint_state
                from ablate.train import train

            checkpointer = Checkpointer(job.dir / CHECKPOINT, settings.checkpoint.every_n_steps,
                                        settings.checkpoint.keep)
            stop.checkpointer = checkpointer
            resume = checkpoint_state(checkpointer.path) if checkpointer.path.is_file() else None
            wandb_started = time.perf_counter()
            if _rank() == 0:  # a resumed job continues its wandb run
                # a stop while wandb starts waits for it (seconds at most): raised inside wandb.init it
                # would be taken for wandb's own failure, or leave its run half made
                stop.holding = True
                try:
                    run = _start_wandb(cfg, job, resolved, group, (resume or {}).get("wandb_run_id"))
                finally:
                    stop.holding = False
            record.metrics.time_s.update(validate=wandb_started - validation_started,
                                         wandb_init=time.perf_counter() - wandb_started)
            if run is not None:
                from ablate.tracking import carry_over_attempts, run_dir

                record.wandb = WandbEntry(project=run.project, group=group, name=job.name, dir=run_dir(run), id=run.id)
                checkpointer.wandb_run_id = run.id
                carry_over_attempts(run, job.dir, int((resume or {}).get("step") or 0))  # one folder per job
            interrupt.act_on_held()
            stop.act_on_held()
            started = time.perf_counter()
            train(cfg, job, run, record.metrics, checkpointer, resume, settings.eval, record.finetune)
            record.status = "ok"
            if not settings.checkpoint.keep:
                shutil.rmtree(checkpointer.path.parent, ignore_errors=True)
        except BaseException as error:  # noqa: BLE001 - every failure is recorded, then handled below
            stop.settle()
            lit = sys.modules.get("ablate.lit")  # loaded if it raised Diverged; a stop may have cut its import short
            if lit is not None and isinstance(error, getattr(lit, "Diverged", ())):
                record.status, record.diverged_step = "diverged", error.step
            elif isinstance(error, (KeyboardInterrupt, Preempted)) or interrupt.seen:
                # Ctrl-C (Lightning turns it into SystemExit(1) after its own shutdown), or a stop signal
                # (during set-up, or after its checkpoint): a relaunch resumes the job
                record.status = "interrupted"
            if record.status == "interrupted" and interrupt.seen:
                saved = isinstance(error, Preempted) and error.saved
                record.error = "interrupted by Ctrl-C (SIGINT)" + (f" at step {error.step}; checkpoint saved"
                                                                   if saved else "")
            else:
                record.error = "".join(traceback.format_exception_only(type(error), error)).strip()
            if record.status == "failed":  # a stop or a divergence is its own explanation
                record.traceback = traceback.format_exc()
            if not isinstance(error, Exception) or isinstance(error, Preempted):
                ended_by = error
        stop.settle()  # from here on a signal waits until the record is written
        record.metrics.wall_time_s = time.perf_counter() - started
        _end(record, run, job)
    if interrupt.seen:  # Ctrl-C, whatever Lightning made of it: the CLI and the sweeper exit 130
        ended_by = KeyboardInterrupt()
    signum = ended_by.signum if isinstance(ended_by, Preempted) else stop.received
    if ended_by is None and signum is None:
        return record
    code = 130 if isinstance(ended_by, KeyboardInterrupt) else 128 + signum if signum else 1
    _stopped.append(code)
    if launcher_gone():  # a joblib worker whose sweep was killed: nobody waits for its result
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    if signum is not None and not isinstance(ended_by, KeyboardInterrupt):
        stop.pass_on(signum)  # do what the signal asked: requeue (submitit) or stop
    raise ended_by if ended_by is not None else SystemExit(code)


def _end(record: Record, run: Any, job: Job) -> None:
    """Write the record and finish the wandb run (``_finish``). Where the record cannot be written
    (a full disk), the job and both errors are named on the terminal instead."""
    try:
        _finish(record, run, job)
    except OSError as error:
        what = record.status + (f" ({record.error})" if record.error else "")
        print(f"ablate: {job.name}: {what}; its record could not be written in {job.dir} "
              f"({type(error).__name__}: {error}); a relaunch runs it again", file=sys.stderr)
        if run is not None:
            try:
                run.finish(exit_code=1)
            except Exception:  # noqa: BLE001 - wandb cannot write either: the message above stands
                pass


#: where a job keeps its training state while it runs (removed when it ends ok, unless checkpoint.keep)
CHECKPOINT = Path("checkpoints") / "last.ckpt"
def _experiment_entry(experiment: dict[str, Any]) -> dict[str, Any]:
    """The record's ``experiment``: a design's rows get their labels, and its base is the baseline
    unless the experiment names another."""
    design = experiment.get("design")
    if not design:
        return experiment
    labels = design_labels(design)
    return {**experiment, "labels": {**labels, **(experiment.get("labels") or {})},
            "baseline": experiment.get("baseline") or next(iter(labels), None)}


def _budget_entry(cfg: DictConfig, settings: RunSettings, job: Job) -> BudgetEntry:
    """The record's ``budget``: what was matched, the steps this job was given, its baseline and, for
    a budget matched to a baseline's tokens or FLOPs, that baseline's totals (the caption says them)."""
    plan = job.sweep.budget if job.sweep is not None else None
    entry = BudgetEntry(match=settings.budget.match, steps=int(cfg.trainer.max_steps))
    if plan is not None:
        entry.baseline = plan.baseline_of.get(job.variant)
        entry.baseline_tokens = plan.baseline_tokens.get(job.variant)
        entry.baseline_train_flops = plan.baseline_train_flops.get(job.variant)
        entry.tokens_per_param = plan.tokens_per_param
    return entry


def _tune_entry(job: Job) -> TuneEntry | None:
    """The record's ``tune`` in a tuned sweep: where this job's learning rate was chosen (``tuned_on``:
    its own variant, or under ``tune.rungs=smallest`` the smallest rung's variant whose rate it reuses)."""
    tune = job.sweep.tune if job.sweep is not None else None
    if tune is None:
        return None
    return TuneEntry(rungs=tune.rungs, tuned_on=tune.transfer.get(job.variant, job.variant))


def pretrained_artifact(run_id: str) -> str:
    """The wandb artifact a pretraining run logs its weights as (its fine-tunes use its ``:latest``)."""
    return f"pretrained-{run_id}"


def _log_pretrained(record: Record, run: Any, job: Job, about: dict) -> None:
    """A pretraining's weights as its artifact; a fine-tune names the one it started from in its run's
    config, and uses it where wandb can (online: the lineage in the dashboard; offline wandb refuses
    ``use_artifact``, so the config and the record's ``finetune.artifact`` name it)."""
    from ablate.tracking import log_files

    entry = record.finetune
    if entry is None or not entry.artifact:
        return
    if record.stage == "pretrain":
        weights = job.dir / PRETRAINED
        if record.ok and weights.is_file():
            log_files(run, entry.artifact, "pretrained-model", {PRETRAINED: weights},
                      {**about, "sha256": entry.sha256, "steps": record.metrics.steps}, copy=False)
        return
    run.config.update({"finetune_artifact": entry.artifact}, allow_val_change=True)
    if not run.offline:
        run.use_artifact(entry.artifact)


def _finetune_entry(cfg: DictConfig, settings: RunSettings, job: Job) -> FinetuneEntry | None:
    """The record's ``finetune`` in a sweep with a fine-tune stage: a fine-tune's task, mode, seed and
    pretraining job (training adds the weights file it loaded and their hash); a pretraining's weights
    file (training adds its hash once written). None in other sweeps."""
    which = stage(cfg)
    if which is None:
        return None
    if which == "pretrain":
        return FinetuneEntry(checkpoint=str(job.dir / PRETRAINED))
    ft = settings.finetune
    pretraining = pretraining_dir(cfg, job.sweep_dir)
    previous = read_record(pretraining)
    logged = previous.wandb.id if previous and previous.wandb else None
    return FinetuneEntry(task=str(cfg.task.get("name")), mode=ft.mode, seed=int(ft.seed), from_job=str(pretraining),
                         from_variant=job.variant, from_seed=int(previous.seed) if previous and previous.seed is not None
                         else int(cfg.seed), checkpoint=str(pretraining / PRETRAINED),
                         artifact=f"{pretrained_artifact(logged)}:latest" if logged else None)


def _rank() -> int:
    """This process's global rank (0 outside distributed training), as Lightning reads it; before
    Lightning is loaded (a stop cut its import short: importing it again could fail) from the
    environment variables Lightning reads it from."""
    rank_zero = sys.modules.get("pytorch_lightning.utilities.rank_zero")
    if rank_zero is not None and hasattr(rank_zero, "rank_zero_only"):
        return int(getattr(rank_zero.rank_zero_only, "rank", 0))
    for key in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK"):
        if os.environ.get(key, "").isdigit():
            return int(os.environ[key])
    return 0


def _start_wandb(cfg: DictConfig, job: Job, resolved: dict[str, Any], group: str, run_id: str | None = None) -> Any:
    """The job's wandb run: the id this job directory keeps (``tracking.job_run_id``; ``run_id``, a
    checkpoint's, for a directory from before it kept one), tagged and with the job's command line
    as notes. None with another logger, ``WANDB_MODE=disabled``, or when wandb cannot start at all:
    the job trains without it (a warning says why) and its record's ``wandb`` is null."""
    if not uses_wandb(cfg.logger):
        return None
    import warnings

    from ablate.tracking import define_metrics, init_run, job_notes, job_run_id, job_tags, wants_system_metrics

    try:
        run = init_run(name=job.name, group=group, job_type="finetune" if stage(cfg) == "finetune" else "train",
                       project=cfg.logger.project,
                       entity=cfg.logger.get("entity"), config=_wandb_config(resolved, job), dir=job.dir,
                       tags=job_tags(cfg.logger.get("tags") or [], cfg.experiment.name, cfg.smoke is True),
                       notes=job_notes(cfg.logger.get("notes"), job.overrides), run_id=job_run_id(job.dir, run_id),
                       system_metrics=wants_system_metrics(cfg.trainer))
        if run is not None:
            define_metrics(run)
        return run
    except Exception as error:  # noqa: BLE001 - wandb is never a reason not to train
        warnings.warn(f"wandb: this job's run could not start ({type(error).__name__}: {error}); "
                      "training without it", stacklevel=2)
        return None


def _finish(record: Record, run: Any, job: Job) -> None:
    if _rank() != 0:  # rank 0 writes the record; another rank's failure is said here, since rank 0's
        if record.status == "failed":  # record only says that its peer closed the connection
            print(f"[ablate] {job.name}: rank {_rank()} failed: {record.error}\n{record.traceback or ''}",
                  file=sys.stderr, flush=True)
        return
    if run is not None and record.stage == "pretrain" and record.finetune is not None:
        record.finetune.artifact = pretrained_artifact(run.id)
    record.write(job.dir)
    if run is not None:
        run.summary.update({**record.metrics.flat(), "status": record.status, "error": record.error or ""})
        _log_artifacts(record, run, job)
        run.finish(exit_code=0 if record.ok else 1)
    print_job_line(record, job.name)


def _log_artifacts(record: Record, run: Any, job: Job) -> None:
    """The job's record as the artifact ``record-<run id>`` (what the sweep's table summarises:
    README, "wandb"), and with ``checkpoint.keep=true`` the trained weights as ``model-<run id>``."""
    import warnings

    from ablate.record import RESULT_FILE
    from ablate.tracking import log_files

    about = {"variant": job.variant, "status": record.status, "overrides": job.overrides}
    checkpoint = job.dir / CHECKPOINT
    try:
        log_files(run, f"record-{run.id}", "job-record", {RESULT_FILE: job.dir / RESULT_FILE}, about)
        _log_pretrained(record, run, job, about)
        if record.ok and (record.config.get("checkpoint") or {}).get("keep") and checkpoint.is_file():
            log_files(run, f"model-{run.id}", "model", {checkpoint.name: checkpoint},
                      {**about, "steps": record.metrics.steps, "params": record.metrics.params},
                      copy=False)  # weights can be large: read in place when synced, not staged twice
    except Exception as error:  # noqa: BLE001 - the record is written; wandb only misses its copy
        warnings.warn(f"wandb: could not log this job's artifacts: {type(error).__name__}: {error}", stacklevel=2)
