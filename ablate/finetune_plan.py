"""A sweep's fine-tune stage, planned (``finetune.tasks``): what the planner adds to the pretraining
jobs, the checks of every fine-tune against its pretraining, and the stage's jobs that the sweeper
launches and ``--plan`` shows (:func:`finetune_stage`, one list for both, as ``ablate.tuning`` is
for a tuned sweep). What a fine-tune job is and how it loads its body: ``ablate.finetune``.
"""

from __future__ import annotations

import re
from dataclasses import asdict, replace
from typing import Any, Callable

from omegaconf import DictConfig, OmegaConf

from ablate.finetune import downstream_problems, finetune_jobs, pretraining_codec
from ablate.settings import FinetuneSettings
from ablate.sweep import FineTune, SweepPlan, override_key, override_value
from ablate.tuning import CHOSEN, LR_KEY, final_jobs

#: a job's config from its overrides (the planner's cached composition)
Compose = Callable[[list[str]], DictConfig]


def plan_finetune(settings: FinetuneSettings, compose: Compose, definition: list[list[str]],
                  swept: list[str]) -> tuple[list[list[str]], FineTune | None, Any]:
    """``finetune.tasks``: the definition's jobs pretrain (their task given the special tokens the
    fine-tunes need), the fine-tune stage's settings and the pretraining's vocabulary (a
    ``TextCodec``); ``(definition, None, None)`` without a fine-tune stage. Raises ValueError, one line."""
    if not settings.tasks:
        return definition, None, None
    problems = FinetuneSettings.problems(asdict(settings))  # the stage is laid out from these
    if problems:
        raise ValueError("; ".join(problems))
    task_keys = [k for k in swept if k == "task" or k.startswith("task.")]
    if task_keys:
        raise ValueError(f"finetune.tasks fine-tunes every pretraining job on the same downstream tasks, so "
                         f"the pretraining task cannot vary, but this sweep sweeps {', '.join(task_keys)}; sweep "
                         "the architecture under one pretraining task (one sweep per pretraining task)")
    first = compose(definition[0])
    codec = pretraining_codec(first)
    if not codec.specials:
        if first.task.get("special_tokens") is False:
            raise ValueError("task.special_tokens=false, but a fine-tune stage needs PAD, CLS and SEP in the "
                             "pretrained vocabulary from the first step; leave task.special_tokens unset (the "
                             "fine-tune stage sets it) or set it true")
        definition = [job + ["task.special_tokens=true"] for job in definition]
        codec = replace(codec, specials=True)
    stage = FineTune(tasks=[str(t) for t in settings.tasks], seeds=[int(s) for s in settings.seeds],
                     steps=int(settings.steps), lr=float(settings.lr), lrs=[float(lr) for lr in settings.tune_lr],
                     mode=settings.mode,
                     causal=bool(first.model.causal),
                     per_task={str(task): dict(keys) for task, keys in (settings.per_task or {}).items()})
    stage.task_overrides = {task: _task_overrides(settings, compose, codec, task, stage, definition[0])
                            for task in stage.tasks}
    return definition, stage, codec


def _task_overrides(settings: FinetuneSettings, compose: Compose, codec: Any, task: str, stage: FineTune,
                    pretraining: list[str]) -> list[str]:
    """What the fine-tunes on ``task`` add: the batch size and length of ``finetune``, the task's
    ``finetune.settings``, and the pretraining's tokenizer where the task reads one."""
    options = task_options()
    if options and task not in options:
        raise ValueError(f"finetune.tasks: {task!r} is not a task option; valid: {', '.join(options)}")
    own = dict(settings.settings.get(task) or {})
    out = [f"task.batch_size={settings.batch_size}"] if settings.batch_size else []
    out += [f"task.seq_len={settings.seq_len}"] if settings.seq_len else []
    out += [f"task.{key}={_value_text(value)}" for key, value in own.items()]
    probe = finetune_jobs(replace(stage, tasks=[task], seeds=stage.seeds[:1], task_overrides={task: out}),
                          [pretraining])[0]
    try:
        node = compose(probe).task
    except Exception as error:  # noqa: BLE001 - Hydra's composition names what is wrong
        raise ValueError(f"the fine-tunes on task={task} cannot be composed: {str(error).splitlines()[0]}") \
            from error
    if "tokenizer" in node and "tokenizer" not in own and node.tokenizer != codec.tokenizer:
        out.insert(0, f"task.tokenizer={_value_text(codec.tokenizer)}")
    return out


def check_finetune(compose: Compose, codec: Any, definition: list[list[str]], stage: FineTune) -> list[str]:
    """Every fine-tune against its pretraining: the vocabulary shared, the length within the
    pretrained positions. Returns the notes to say (positions that extrapolate); raises ValueError
    naming every problem, joined by ``; ``."""
    problems: dict[str, None] = {}
    notes: dict[str, None] = {}
    seen: set[tuple[str, ...]] = set()
    for job in definition:
        pretraining = compose(job)
        for tuned in finetune_jobs(stage, [job]):
            try:
                cfg = compose(tuned)
            except Exception:  # noqa: BLE001 - the job's validation names it
                continue
            key = tuple(OmegaConf.to_yaml(n) for n in (pretraining.model, pretraining.pos_enc,
                                                       pretraining.task, cfg.task))
            if key in seen:
                continue
            seen.add(key)
            found, said = downstream_problems(pretraining, codec, cfg)
            problems |= dict.fromkeys(found)
            notes |= dict.fromkeys(said)
    if problems:
        raise ValueError("; ".join(problems))
    return list(notes)


def task_options() -> list[str]:
    """The options of the ``task`` group (Hydra's, with a ``--config-dir``'s own; else the package's)."""
    try:
        from hydra.core.global_hydra import GlobalHydra

        if GlobalHydra.instance().is_initialized():
            return sorted(GlobalHydra.instance().config_loader().get_group_options("task"))
    except Exception:  # noqa: BLE001 - no Hydra state: the package's options
        pass
    from ablate.paths import CONF_DIR

    return sorted(p.stem for p in (CONF_DIR / "task").glob("*.yaml"))


def _value_text(value: object) -> str:
    """A value as override text, quoted where Hydra's grammar would split or misread it (a path)."""
    text = override_value(value)
    return text if re.fullmatch(r"[\w./~+-]+", text) else "'" + text.replace("'", "\\'") + "'"


def finetune_stage(plan: SweepPlan, chosen: dict[str, float] | None = None) -> list[list[str]]:
    """The jobs a sweep with a fine-tune stage launches after its pretraining: every pretraining job
    (the definition; a tuned sweep's final runs at the rates ``chosen``, or in ``--plan`` at
    ``optim.lr=<chosen>``) fine-tuned on each task and fine-tune seed. The one list the sweep and
    ``--plan`` use; empty without a fine-tune stage."""
    if plan.finetune is None:
        return []
    if plan.tune is None:
        return finetune_jobs(plan.finetune, plan.definition)
    rates = chosen if chosen is not None else {plan.variant(job): plan.tune.lr[0] for job in plan.definition}
    pretraining = final_jobs(plan, rates)
    if chosen is None:
        pretraining = [[o for o in job if override_key(o) != LR_KEY] + [f"{LR_KEY}={CHOSEN}"] for job in pretraining]
    return finetune_jobs(plan.finetune, pretraining)
