"""Training one config: build its data, model and Lightning module; fit; evaluate; measure.

:func:`build` is the one place a job's pieces are made (``ablate-bench`` and ``--plan``'s timing
use it too); :func:`train` fills a job's metrics as it goes, so a run that diverges or fails keeps what was known by then.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from omegaconf import DictConfig, OmegaConf

from ablate.finetune import (PRETRAINED, Pretrained, PretrainedError, finetune_model, load_pretrained, pretraining_dir,
                             run_seed, save_pretrained, stage)
from ablate.job import Job
from ablate.measure import accumulated_batches, cpu_model, flops_per_token, load_average
from ablate.record import FinetuneEntry, Metrics, Sample, Score
from ablate.settings import EvalSettings, read_settings


def _loggers(cfg: DictConfig, job: Job, run: Any) -> list[Any]:
    """The job's Lightning loggers (``tracking.make_loggers``): those its ``logger`` node names."""
    from ablate.loggers import LoggerPlace, make_loggers, sweep_group

    place = LoggerPlace(home=Path(job.sweep_dir) if job.sweep_dir else Path(job.dir),
                        group=sweep_group(cfg, job.sweep_dir), variant=job.variant, seed=int(cfg.seed))
    hparams = {**job.choices, "seed": int(cfg.seed), "lr": float(cfg.optim.lr), "max_steps": int(cfg.trainer.max_steps)}
    return make_loggers(OmegaConf.to_container(cfg.logger, resolve=True), place, Path(job.dir), run, hparams)


def quiet_lightning() -> None:
    """Keep a run's terminal to its progress bar and final metrics: Lightning's banner lines and
    warnings that do not apply here (we validate after fit, on purpose) go."""
    import logging
    import warnings

    logging.getLogger("pytorch_lightning.utilities.rank_zero").setLevel(logging.WARNING)
    for message in (".*no `val_dataloader`.*", ".*LeafSpec.*", ".*does not have many workers.*",
                    ".*litlogger.*", ".*IterableDataset.*has `__len__`.*", ".*`srun` command is available.*",
                    ".*all_gather is deprecated.*", ".*when logging on epoch level in distributed.*"):
        warnings.filterwarnings("ignore", message=message)


def build(cfg: DictConfig, pretrained: Pretrained | None = None) -> tuple[Any, Any, Any]:
    """Data, model and Lightning module for ``cfg``: the one place a job's pieces are made. A fine-tune
    (``pretrained``: its pretraining's weights) starts from the pretrained body, with a new head
    (``ablate.finetune.finetune_model``), its data order and head from its own seed."""
    from ablate.data import AblateDataModule
    from ablate.lit import AblateModule
    from ablate.model.transformer import build_model

    seed = int(cfg.seed) if pretrained is None else run_seed(cfg.seed, cfg.finetune.seed)
    pl.seed_everything(seed, workers=True, verbose=False)
    data = AblateDataModule(cfg.task, seed=seed)
    data.setup("fit")
    if pretrained is None:
        model = build_model(cfg, data.vocab_size, data.n_classes, data.max_len, data.pad_id, data.layout)
    else:
        model = finetune_model(cfg, pretrained, data)
    module = AblateModule(model, cfg.optim, cfg.trainer.max_steps, data.val_lengths, data.metric, data.n_classes,
                          data.max_decode, data.detokenize)
    return data, model, module


def configured_callbacks(cfg: DictConfig, job_dir: str | Path | None = None) -> list[pl.Callback]:
    """The run's ``callbacks`` group (Lightning callbacks by ``_target_``, validated before anything
    trains by ``ablate.config``), built with their settings; they run after ablate's own. A
    ``ModelCheckpoint`` saves inside ``job_dir`` (``lit.checkpoint_dir``); ``EarlyStopping`` and
    ``ModelCheckpoint`` check at the learning curve's points (``lit.prepare_callbacks``)."""
    from pytorch_lightning.callbacks import ModelCheckpoint

    from ablate.components import resolve
    from ablate.curve import checkpoint_dir, prepare_callbacks

    node = cfg.get("callbacks")
    nodes = OmegaConf.to_container(node, resolve=True) if node is not None else {}
    callbacks = []
    for name, callback in nodes.items():
        target, settings = resolve(f"callbacks.{name}", callback)
        if job_dir is not None and isinstance(target, type) and issubclass(target, ModelCheckpoint):
            settings = {**settings, "dirpath": checkpoint_dir(settings.get("dirpath"), job_dir)}
        callbacks.append(target(**settings))
    prepare_callbacks(callbacks)
    return callbacks


def make_trainer(cfg: DictConfig, logger: Any = False, callbacks: list[Any] | None = None,
                 root_dir: str | Path | None = None) -> pl.Trainer:
    from pytorch_lightning.callbacks import ModelCheckpoint

    trainer = OmegaConf.to_container(cfg.trainer, resolve=True)
    if any(isinstance(c, ModelCheckpoint) for c in callbacks or []):  # the user's own (callbacks group)
        trainer["enable_checkpointing"] = True
    # the test split's evaluation under torch.no_grad, as the learning curve's points and Lightning's own
    # validation while fitting: under inference mode a compiled model (model.compile) would compile a
    # third graph for it, at the run's end
    trainer.setdefault("inference_mode", False)
    return pl.Trainer(**trainer, logger=logger or False, callbacks=callbacks or [],
                      default_root_dir=str(root_dir) if root_dir else None)


def train(cfg: DictConfig, job: Job, run: Any, metrics: Metrics, checkpointer: Any = None,
          resume: dict[str, Any] | None = None, evaluation: EvalSettings | None = None,
          finetune: FinetuneEntry | None = None) -> None:
    """Build data, model and trainer from ``cfg``; fit (with a learning curve on the validation
    split); evaluate on the test split at every length; measure.

    Fills ``metrics`` as it goes, so a run that diverges or fails keeps what was known by then. In a
    sweep with a fine-tune stage (``finetune``: the record's entry, filled here): a fine-tune starts
    from its pretraining's weights; a pretraining leaves its weights for its fine-tunes after fitting."""
    from pytorch_lightning.callbacks import ProgressBar

    from ablate.curve import LearningCurve, curve_steps, early_stop_entry, model_checkpoint_entry
    from ablate.lit import StepProgressBar, masked_loss
    from ablate.meters import SpeedMeter
    from ablate.memory import measure_training_memory
    from ablate.optim import make_optimizer

    clock = time.perf_counter()
    evaluation = evaluation or read_settings(EvalSettings, cfg.get("eval"))
    time_s = metrics.time_s  # where the job's time went (docs/internals.md)
    quiet_lightning()
    if job.torch_threads:  # jobs that run at once share the cores instead of each taking all of them
        torch.set_num_threads(job.torch_threads)
    pretrained = _pretrained(cfg, job, finetune) if stage(cfg) == "finetune" else None
    data, model, module = build(cfg, pretrained)
    resumed_step = int(resume["step"]) if resume else 0
    accumulate = accumulated_batches(cfg)
    tokens_per_step = data.tokens_per_batch * accumulate  # one optimizer step, on one device
    train_loader = data.train_dataloader(skip=resumed_step * accumulate)
    fpt = flops_per_token(model, data.seq_len, data.batch_size)
    metrics.update(metric=data.metric, params=model.num_params(), flops_per_token=fpt, lr=float(cfg.optim.lr),
                   torch_threads=torch.get_num_threads(), concurrent_jobs=job.parallel_jobs, cpu_cores=job.cores)
    speed = SpeedMeter(cfg.measure.warmup_steps)
    pace = _pace_check(cfg, job, speed)
    curve = LearningCurve(data.eval_batches(data.seq_len, "validation"),
                          curve_steps(int(cfg.trainer.max_steps), evaluation.every, evaluation.early_fraction),
                          tokens_per_step, fpt)
    metrics.history = curve.history  # the same list: a run that fails keeps the points it reached
    if run is not None:  # the dashboard draws val/* against the step: grouped runs get a mean and a band
        run.define_metric("trainer/global_step")
        run.define_metric("val/*", step_metric="trainer/global_step")
    callbacks = [speed, curve] + ([pace] if pace else []) + ([checkpointer] if checkpointer is not None else []) + configured_callbacks(cfg, job.dir)
    if cfg.trainer.get("enable_progress_bar", True) and not any(isinstance(c, ProgressBar) for c in callbacks):
        callbacks.append(StepProgressBar())  # one of the user's own (callbacks group) wins
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
        metrics.resumed_from_step = resumed_step
    time_s["setup"] = time.perf_counter() - clock - time_s.get("memory", 0.0)
    started = time.perf_counter()
    trainer.fit(module, train_dataloaders=train_loader, ckpt_path=str(checkpointer.path) if resume else None)
    time_s.update(fit=time.perf_counter() - started, steps=sum(speed.step_times))
    if stage(cfg) == "pretrain" and trainer.is_global_zero:  # before testing: the fine-tunes need these weights
        _, digest = save_pretrained(job.dir, model, data.task.codec())
        if finetune is not None:
            finetune.sha256 = digest
    if cuda:
        metrics.update(peak_memory_bytes=torch.cuda.max_memory_allocated(), memory_source="cuda-allocator")
    tokens = trainer.global_step * tokens_per_step * trainer.world_size
    stopped = early_stop_entry(trainer.callbacks, trainer.global_step, int(cfg.trainer.max_steps))
    if stopped is not None:  # an EarlyStopping callback ended training before max_steps
        metrics.early_stopped = stopped
    kept = model_checkpoint_entry(trainer.callbacks)
    if kept is not None:  # the user's ModelCheckpoint: where its best weights are
        metrics.model_checkpoint = kept
    metrics.update(**speed.summary(), steps=trainer.global_step, tokens=tokens, train_flops=tokens * fpt,
                   load_1m=load_average(), cpu_model=cpu_model())
    if cuda:  # model FLOPs utilisation of one device: its tokens/s x FLOPs per token over its peak
        from ablate.measure import utilisation
        from ablate.model.flops import recomputed_flops

        device = torch.cuda.get_device_name(trainer.strategy.root_device)
        metrics.update(**utilisation(device, str(cfg.trainer.precision), metrics.tokens_per_s, fpt,
                                   cfg.measure.get("peak_flops"),
                                   recomputes=recomputed_flops(model, data.seq_len, data.batch_size) > 0))
    if curve.history:
        early_step = max(1, round(evaluation.early_fraction * trainer.global_step))
        early = min(curve.history, key=lambda p: abs(p.step - early_step))
        last = curve.history[-1]
        metrics.update(val=Score(loss=last.loss, accuracy=last.accuracy),
                       early_loss=early.loss, early_loss_step=early.step, final_loss=last.loss)

    module.eval_split = "test"
    started = time.perf_counter()
    trainer.validate(module, dataloaders=data.test_dataloader(), verbose=False)
    if hasattr(data.task, "extra_test_sets"):  # dev sets scored beside the test split (MNLI mismatched)
        metrics.eval_extra = {name: Score(**module.evaluate(batches))
                              for name, batches in data.task.extra_test_sets().items()}
    time_s["test"] = time.perf_counter() - started
    evals = module.eval_results()
    first = evals[str(data.val_lengths[0])]
    metrics.update(accuracy=first["accuracy"], loss=first["loss"])
    if hasattr(data.task, "add_bits_per_byte"):  # text tasks, to compare tokenizers: over the scored targets' bytes
        data.task.add_bits_per_byte(evals, lambda length: data.eval_batches(length, "test"))
        metrics.update(**{k: first[k] for k in ("bytes_per_token", "bits_per_byte") if k in first})
    metrics.eval = {length: Score(**e) for length, e in evals.items()}
    if data.layout is not None:
        metrics.samples = decoded_samples(model, data)


#: test rows a seq2seq run keeps as decoded (``metrics.samples``; the report shows them)
SAMPLES = 4


def decoded_samples(model: Any, data: Any, n: int = SAMPLES) -> list[Sample]:
    """The first ``n`` test rows at the training length, as the model decodes them greedily: source,
    target and decoding as text (the task's ``detokenize``)."""
    from ablate.data.base import IGNORE
    from ablate.model.generate import greedy

    tokens, targets = data.eval_batches(data.seq_len, "test")[0]
    tokens, targets = tokens[:n], targets[:n]
    S = data.layout.source_len(tokens.shape[1])
    decoded = greedy(model, tokens.to(next(model.parameters()).device), data.max_decode).cpu()
    text = data.task.detokenize
    out = []
    for row, target, dec in zip(tokens.tolist(), targets.tolist(), decoded.tolist()):
        source = [t for t in row[:S - 1] if t != data.pad_id]
        reference = [t for t in target[S - 1:] if t != IGNORE]
        cut = dec[:dec.index(data.layout.eos_id) + 1] if data.layout.eos_id in dec else dec
        out.append(Sample(source=text(source), target=text(reference), decoded=text(cut)))
    return out


def _pace_check(cfg: DictConfig, job: Job, meter: Any) -> Any:
    """The check of this job's steps against its sweep's first estimate (``ablate.pace``); None for a
    single run, and where the sweep started without an estimate of this job's steps."""
    if job.sweep_dir is None:
        return None
    from ablate.meters import PaceCheck
    from ablate.step_times import device_name, step_time_key

    key = step_time_key(cfg, torch.get_num_threads(), job.parallel_jobs or 1, device_name(cfg))  # as its record's
    check = PaceCheck(meter, job.sweep_dir, key)
    return check if check.active else None


def _pretrained(cfg: DictConfig, job: Job, entry: FinetuneEntry | None) -> Pretrained:
    """A fine-tune's pretrained weights: its pretraining job's (``finetune.from_job`` in its sweep), which
    must have ended ok; the file must be the one that job recorded (its SHA-256)."""
    from ablate.record import read_record

    pretraining = pretraining_dir(cfg, job.sweep_dir)
    record = read_record(pretraining)
    if record is None or not record.ok:
        raise PretrainedError(f"the pretraining job {pretraining} has not finished ok "
                              f"({'no record' if record is None else record.status}): nothing to fine-tune from")
    pretrained = load_pretrained(pretraining / PRETRAINED, record.finetune.sha256 if record.finetune else None)
    if entry is not None:
        entry.checkpoint, entry.sha256 = str(pretrained.path), pretrained.sha256
    return pretrained
