"""One job: validate the config, train, evaluate, measure, and write the record.

Whatever happens inside training, the job ends with a ``result.json`` whose status is ``ok``,
``diverged`` (non-finite loss; the step is recorded) or ``failed`` (the exception is recorded),
and with its wandb run finished (non-zero exit code unless ``ok``). A job whose record already
says ``ok`` for the same overrides is skipped, so relaunching a sweep resumes it.
"""

from __future__ import annotations

import functools
import math
import os
import shutil
import signal
import time
import traceback
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.utilities import rank_zero_only

from ablate.config import apply_smoke, validate
from ablate.model import MODEL_GROUPS
from ablate.results import read_record, write_record
from ablate.sweep import (design_labels, job_variant, launcher_kind, override_key, read_sweep_budget,
                          read_sweep_jobs, read_sweep_keys)

CHOICE_GROUPS = (*MODEL_GROUPS, "task", "optim", "trainer", "logger", "experiment")


def sweep_group(cfg: DictConfig, sweep_dir: str | None) -> str:
    """The wandb group: one per sweep (stable when the sweep is relaunched into its directory)."""
    name = cfg.experiment.name or "sweep"
    if sweep_dir is None:
        return name if cfg.experiment.name else "single-runs"
    return f"{name}-{'_'.join(Path(sweep_dir).parts[-2:])}"


def cpu_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # macOS
        return os.cpu_count() or 1


class Job:
    """What a job needs to know about where it runs; built from Hydra's runtime config."""

    def __init__(self, job_dir: Path, overrides: list[str], choices: dict[str, str],
                 sweep_dir: str | None, num: int | None, parallel_jobs: int | None = 1,
                 torch_threads: int | None = None, launcher: str | None = None) -> None:
        self.dir, self.overrides, self.choices = job_dir, overrides, choices
        self.sweep_dir, self.num = sweep_dir, num
        self.parallel_jobs = parallel_jobs  # jobs of this sweep that may run at once on this job's cores (None: unknown)
        self.torch_threads = torch_threads  # this job's share of the cores (None: torch's default)
        self.launcher = launcher            # basic | joblib | submitit_local | submitit_slurm | ... (None: single run)
        self.cores = cpu_cores()
        self.started_at, self.slot_wait_s = time.time(), 0.0
        self.process_started_at = process_start_time()
        self._slot: Any = None              # the lock file of the machine's job slot this job holds

    @classmethod
    def from_hydra(cls) -> "Job":
        """The job Hydra is running. In a multirun its torch threads follow its share of the cores:
        joblib's ``n_jobs`` processes share the machine; a submitit job gets ``cpus_per_task``
        (``SLURM_CPUS_PER_TASK`` under SLURM); submitit's local executor starts every job at once,
        so a local job first waits for one of the machine's ``cores // cpus_per_task`` job slots."""
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hc = HydraConfig.get()
        multirun = hc.mode == RunMode.MULTIRUN
        choices = {g: hc.runtime.choices.get(g) for g in CHOICE_GROUPS if g in hc.runtime.choices}
        launcher, parallel, threads, slots = None, 1, None, 0
        if multirun:
            launcher, parallel, threads, slots = cls._cpu_share(hc.launcher, hc.sweep.dir)
        job = cls(Path(hc.runtime.output_dir), list(hc.overrides.task), choices,
                  hc.sweep.dir if multirun else None, hc.job.num if multirun else None, parallel, threads, launcher)
        if slots:
            job._hold_slot(slots)
        return job

    @staticmethod
    def _cpu_share(launcher: Any, sweep_dir: str) -> tuple[str, int | None, int | None, int]:
        """``(launcher, parallel jobs, torch threads, job slots)`` of a multirun job: its launcher's
        name, how many of the sweep's jobs may run at once on its cores, its torch threads (None:
        torch's default) and how many job slots the machine has for it to wait for (0: no waiting)."""
        kind = launcher_kind(str(launcher.get("_target_", "")))
        cores = cpu_cores()
        n_jobs_swept = len(read_sweep_jobs(sweep_dir) or []) or cores * 1024  # unknown: no cap

        if kind == "joblib":
            n_jobs = int(launcher.get("n_jobs") or 1)
            parallel = min(n_jobs_swept, max(1, cores + 1 + n_jobs) if n_jobs < 0 else n_jobs)  # joblib's rule
            return kind, parallel, max(1, cores // parallel) if parallel > 1 else None, 0
        if kind == "submitit_local":
            cpus = launcher.get("cpus_per_task")
            if cpus:  # the user's share per job: cores // cpus_per_task jobs at once
                threads = min(int(cpus), cores)
                slots = max(1, cores // threads)
                return kind, min(slots, n_jobs_swept), threads, slots
            parallel = min(cores, n_jobs_swept)  # default: one core per job, the jobs' share if fewer
            return kind, parallel, max(1, cores // parallel), cores
        if kind == "submitit_slurm":  # SLURM allocates each job its own cpus_per_task cores
            cpus = os.environ.get("SLURM_CPUS_PER_TASK") or launcher.get("cpus_per_task")
            return kind, 1, int(cpus) if cpus else None, 0
        if kind == "basic":  # one job after the other, in this process
            return kind, 1, None, 0
        return kind, None, None, 0

    def _hold_slot(self, slots: int, poll_s: float = 0.2) -> None:
        """Wait until one of the sweep's ``slots`` job slots on this machine is free, then hold it
        until this job ends (an ``flock`` on ``<sweep>/.submitit/slots/<i>.lock``, released when
        the process exits however it ends)."""
        try:
            import fcntl
        except ImportError:  # no flock (Windows, where submitit does not run either)
            return
        folder = Path(str(self.sweep_dir)) / ".submitit" / "slots"
        folder.mkdir(parents=True, exist_ok=True)
        waiting = time.monotonic()
        while True:
            for i in range(slots):
                lock = open(folder / f"{i}.lock", "a")  # noqa: SIM115 - held open while the job runs
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    lock.close()
                    continue
                self._slot, self.slot_wait_s, self.started_at = lock, time.monotonic() - waiting, time.time()
                return
            time.sleep(poll_s)

    def release_slot(self) -> None:
        """Give this job's slot back (the process's exit would, but only after the interpreter's
        teardown: about a second with torch and Lightning loaded)."""
        if self._slot is not None:
            self._slot.close()  # closing the file releases its flock
            self._slot = None

    def record_fields(self) -> dict[str, Any]:
        """The record's ``job`` entry: where and how this job ran."""
        return {"num": self.num, "dir": str(self.dir), "sweep_dir": self.sweep_dir, "launcher": self.launcher,
                "started_at": self.started_at, "slot_wait_s": round(self.slot_wait_s, 3),
                "process_started_at": self.process_started_at, "slurm": slurm_fields()}


    @property
    def name(self) -> str:
        return ",".join(o for o in self.overrides if override_key(o) != "experiment") or "defaults"

    @functools.cached_property
    def variant(self) -> str:
        """This job's variant (``ablate.sweep``), e.g. ``qkv_sharing=qk_shared``: the name its table
        row and its ``bench.json`` entry have too. The swept keys come from the sweep's
        ``sweep.json``; a single run's variant is all its overrides but the seed and experiment."""
        swept = read_sweep_keys(self.sweep_dir) if self.sweep_dir is not None else None
        return job_variant(self.overrides, swept) or "defaults"


def process_start_time() -> float | None:
    """When this process started (seconds since the epoch; None where the OS does not say): a
    job's ``started_at`` minus this is its start-up (interpreter, imports, Hydra) in a process of
    its own (submitit, SLURM), and includes the earlier jobs where a process runs several."""
    try:
        stat = Path(f"/proc/{os.getpid()}/stat").read_text()
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22: start time, clock ticks after boot
        booted = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                      if line.startswith("btime "))
        return booted + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):  # not Linux
        return None


def slurm_fields() -> dict[str, Any] | None:
    """The SLURM job this process runs in (None outside SLURM): ids, node, CPUs, partition, requeues."""
    env = os.environ
    if "SLURM_JOB_ID" not in env:
        return None
    return {"job_id": env["SLURM_JOB_ID"], "array_job_id": env.get("SLURM_ARRAY_JOB_ID"),
            "array_task_id": env.get("SLURM_ARRAY_TASK_ID"), "node": env.get("SLURMD_NODENAME"),
            "partition": env.get("SLURM_JOB_PARTITION"),
            "cpus_per_task": int(env["SLURM_CPUS_PER_TASK"]) if "SLURM_CPUS_PER_TASK" in env else None,
            "restart_count": int(env.get("SLURM_RESTART_COUNT", 0))}  # unset until the first requeue

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
        from ablate.config import ConfigError

        raise ConfigError(f"tune.lr={list(cfg.tune.lr)} tunes the learning rate across the runs of a sweep; "
                          "run it as one: ablate -m tune.lr=... (and the variants to compare)")
    previous = read_record(job.dir)
    if previous and previous.get("status") == "ok" and previous.get("overrides") == job.overrides:
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
    from ablate.lit import Checkpointer, Diverged, Preempted, checkpoint_state

    checkpointer = Checkpointer(job.dir / CHECKPOINT, int(cfg.checkpoint.every_n_steps), bool(cfg.checkpoint.keep))
    resume = checkpoint_state(checkpointer.path) if checkpointer.path.is_file() else None
    run = None
    wandb_started = time.perf_counter()
    if rank_zero_only.rank == 0:  # a resumed job continues its wandb run
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
        self.checkpointer.stop_signal = signum

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
    budget = read_sweep_budget(job.sweep_dir) if job.sweep_dir is not None else None
    baseline = (budget or {}).get("baseline_of", {}).get(job.variant)
    return {"match": str(cfg.budget.match), "steps": int(cfg.trainer.max_steps), "baseline": baseline}


def _start_wandb(cfg: DictConfig, job: Job, resolved: dict[str, Any], group: str, run_id: str | None = None) -> Any:
    if cfg.logger.name != "wandb":
        return None
    from ablate.tracking import init_run

    return init_run(name=job.name, group=group, job_type=job.variant[:128], project=cfg.logger.project,
                    config=_wandb_config(resolved, job), dir=job.dir, run_id=run_id)


def _finish(record: dict[str, Any], run: Any, job: Job) -> None:
    if rank_zero_only.rank != 0:
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


def _loggers(cfg: DictConfig, job: Job, run: Any) -> Any:
    if cfg.logger.name == "csv":
        from pytorch_lightning.loggers import CSVLogger

        return CSVLogger(save_dir=str(job.dir), name="", version="")
    if run is not None:
        from pytorch_lightning.loggers import WandbLogger

        return WandbLogger(experiment=run)
    return False


def _quiet_lightning() -> None:
    """Keep a run's terminal to its progress bar and final metrics: Lightning's banner lines and
    warnings that do not apply here (we validate after fit, on purpose) go."""
    import logging
    import warnings

    logging.getLogger("pytorch_lightning.utilities.rank_zero").setLevel(logging.WARNING)
    for message in (".*no `val_dataloader`.*", ".*LeafSpec.*", ".*does not have many workers.*",
                    ".*litlogger.*", ".*IterableDataset.*has `__len__`.*", ".*`srun` command is available.*",
                    ".*all_gather is deprecated.*", ".*when logging on epoch level in distributed.*"):
        warnings.filterwarnings("ignore", message=message)


def build(cfg: DictConfig) -> tuple[Any, Any, Any]:
    """Data, model and Lightning module for ``cfg``: the one place a job's pieces are made."""
    from ablate.data import AblateDataModule
    from ablate.lit import AblateModule
    from ablate.model.transformer import build_model

    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    data = AblateDataModule(cfg.task, seed=cfg.seed)
    data.setup("fit")
    model = build_model(cfg, data.vocab_size, data.n_classes, data.max_len, data.pad_id)
    module = AblateModule(model, cfg.optim, cfg.trainer.max_steps, data.val_lengths, data.metric, data.n_classes)
    return data, model, module


def make_trainer(cfg: DictConfig, logger: Any = False, callbacks: list[Any] | None = None,
                 root_dir: str | Path | None = None) -> pl.Trainer:
    return pl.Trainer(**OmegaConf.to_container(cfg.trainer, resolve=True), logger=logger,
                      callbacks=callbacks or [], default_root_dir=str(root_dir) if root_dir else None)


def flops_per_token(model: Any, seq_len: int, batch_size: int) -> float:
    """Training FLOPs per input token of ``model`` at ``seq_len`` in batches of ``batch_size``
    sequences (docs/measurements.md, "FLOPs")."""
    return float(model.flops_per_token(seq_len, batch_size))


def job_cost(cfg: DictConfig) -> dict[str, float]:
    """What one training step of ``cfg`` costs, without data or weights (the task's sizes, the model
    on the meta device): ``{max_steps, tokens_per_step, flops_per_token}``. A budget's unit."""
    from ablate.data import build_task
    from ablate.model.transformer import assemble

    task = build_task(cfg.task)
    with torch.device("meta"):
        model = assemble(cfg, int(task.vocab_size), int(task.n_classes), int(task.max_len), task.pad_id)
    return {"max_steps": int(cfg.trainer.max_steps), "tokens_per_step": task.batch_size * task.seq_len,
            "flops_per_token": flops_per_token(model, task.seq_len, task.batch_size)}


def train(cfg: DictConfig, job: Job, run: Any, metrics: dict[str, Any], checkpointer: Any = None,
          resume: dict[str, Any] | None = None) -> None:
    """Build data, model and trainer from ``cfg``; fit (with a learning curve on the validation
    split); evaluate on the test split at every length; measure.

    Fills ``metrics`` as it goes, so a run that diverges or fails keeps what was known by then."""
    from ablate.lit import LearningCurve, curve_steps, make_optimizer, masked_loss
    from ablate.measure import SpeedMeter, measure_training_memory

    clock = time.perf_counter()
    time_s = metrics.setdefault("time_s", {})  # where the job's time went (docs/internals.md)
    _quiet_lightning()
    if job.torch_threads:  # jobs that run at once share the cores instead of each taking all of them
        torch.set_num_threads(job.torch_threads)
    data, model, module = build(cfg)
    resumed_step = int(resume["step"]) if resume else 0
    accumulate = int(cfg.trainer.get("accumulate_grad_batches") or 1)
    train_loader = data.train_dataloader(skip=resumed_step * accumulate)
    fpt = flops_per_token(model, data.seq_len, data.batch_size)
    metrics.update(metric=data.metric, params=model.num_params(), flops_per_token=fpt, lr=float(cfg.optim.lr),
                   torch_threads=torch.get_num_threads(), concurrent_jobs=job.parallel_jobs, cpu_cores=job.cores)
    speed = SpeedMeter(cfg.measure.warmup_steps)
    curve = LearningCurve(data.eval_batches(data.seq_len, "validation"),
                          curve_steps(int(cfg.trainer.max_steps), int(cfg.eval.every)), data.tokens_per_batch, fpt)
    metrics["history"] = curve.history
    if run is not None:  # the dashboard draws val/* against the step: grouped runs get a mean and a band
        run.define_metric("trainer/global_step")
        run.define_metric("val/*", step_metric="trainer/global_step")
    callbacks = [speed, curve] + ([checkpointer] if checkpointer is not None else [])
    trainer = make_trainer(cfg, _loggers(cfg, job, run), callbacks, job.dir)
    cuda = trainer.strategy.root_device.type == "cuda"
    if cfg.measure.memory and not cuda:  # on CUDA the allocator's own peak is the figure
        started = time.perf_counter()
        batch = next(iter(train_loader))
        memory = measure_training_memory(model, lambda p: make_optimizer(p, cfg.optim), batch,
                                         lambda m, b: masked_loss(m(b[0]), b[1]))
        metrics.update(memory=memory, peak_memory_bytes=memory["peak"], memory_source="cpu-accounting")
        time_s["memory"] = time.perf_counter() - started
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    if resume:
        metrics["resumed_from_step"] = resumed_step
    time_s["setup"] = time.perf_counter() - clock - time_s.get("memory", 0.0)
    started = time.perf_counter()
    trainer.fit(module, train_dataloaders=train_loader, ckpt_path=str(checkpointer.path) if resume else None)
    time_s.update(fit=time.perf_counter() - started, steps=sum(speed.step_times))
    if cuda:
        metrics.update(peak_memory_bytes=torch.cuda.max_memory_allocated(), memory_source="cuda-allocator")
    tokens = trainer.global_step * data.tokens_per_batch * trainer.world_size
    metrics.update(speed.summary(), steps=trainer.global_step, tokens=tokens, train_flops=tokens * fpt)
    if cuda:  # model FLOPs utilisation of one device: its tokens/s x FLOPs per token over its peak
        from ablate.measure import peak_flops

        device = torch.cuda.get_device_name(trainer.strategy.root_device)
        peak = peak_flops(device, str(cfg.trainer.precision), cfg.measure.get("peak_flops"))
        metrics.update(device=device, peak_flops=peak,
                       mfu=metrics["tokens_per_s"] * fpt / peak if peak else None)
    if curve.history:
        early = min(curve.history, key=lambda p: abs(p["step"] - 0.25 * trainer.global_step))
        last = curve.history[-1]
        metrics.update(val={"loss": last["loss"], "accuracy": last["accuracy"]},
                       early_loss=early["loss"], final_loss=last["loss"])

    module.eval_split = "test"
    started = time.perf_counter()
    trainer.validate(module, dataloaders=data.test_dataloader(), verbose=False)
    time_s["test"] = time.perf_counter() - started
    evals = module.eval_results()
    metrics["eval"] = evals
    first = evals[str(data.val_lengths[0])]
    metrics["accuracy"], metrics["loss"] = first["accuracy"], first["loss"]
    bytes_per_token = getattr(data.task, "bytes_per_token", None)  # text tasks: to compare tokenizers
    if bytes_per_token:
        metrics.update(bytes_per_token=bytes_per_token,
                       bits_per_byte=first["loss"] / math.log(2) / bytes_per_token)
    for length, e in evals.items():
        metrics[f"accuracy@{length}"], metrics[f"loss@{length}"] = e["accuracy"], e["loss"]
