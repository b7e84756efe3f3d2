"""Config validation: one pass over a composed config, before anything trains.

Hydra already rejects an unknown option of a group (``qkv_sharing=foo``) and an unknown key
(``model.foo=1``) with the valid choices. This pass checks the rest, through one mechanism for
built-in and user components alike (``ablate.components``):

* the ``model`` node against :class:`ablate.model.ModelSettings` (types and ranges), and the run's
  plain nodes against theirs (``ablate.settings``, ``ablate.optim``, ``ablate.measure``);
* each of the run's ``callbacks`` (Lightning callbacks by ``_target_``) against its class's
  signature, then built, which must give a ``pytorch_lightning.Callback``;
* every component group through the contract of its kind (``CONTRACTS``: one explicit dict), which
  checks the option's settings against its class's signature, runs the class's own ``problems``,
  and builds and calls it on the meta device (no memory, no compute);
* the whole model, assembled, initialised and run once on the meta device.

Whatever goes wrong inside a check is reported as a problem naming the group and the class,
never raised: :func:`validate` raises one ``ConfigError`` listing every problem.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Mapping

from omegaconf import DictConfig, OmegaConf

from ablate.heap import imports_untraced
from ablate.paths import user_cache
from ablate.components import (ComponentError, Context, call_problems, import_target, label, label_problems,
                               merge_problems, own_problems, qualname, resolve, settings_problems, target_path,
                               type_problems, value_problem)

with imports_untraced():  # torch and the model: most of what `ablate` and a job process import (ablate.heap)
    from ablate import data
    from ablate.model import (MODEL_GROUPS, ModelSettings, assemble, parametrize_mup, attention, ffn, init, norms,
                              patterns, positions)
    from ablate.model.seq2seq import SEQ2SEQ_ARCHS, Seq2SeqLayout, resolved_arch
from ablate.settings import (AUTO_SEED, OPTIMIZED_METRICS, BudgetSettings, CheckpointSettings, EvalSettings, ExperimentSettings,
                             FinetuneSettings, LoggerSettings, Seed, StatsSettings, TuneSettings)

#: every config group (a ``defaults`` entry of conf/config.yaml, an option per YAML): the model's
#: components in build order, then the run's; ``ablate --list`` shows them in this order
CONFIG_GROUPS = (*MODEL_GROUPS, "task", "optim", "trainer", "logger", "callbacks", "experiment")
#: the top-level keys of a composed config; any other is refused (a key nothing reads)
ROOT_KEYS = ("seed", "smoke", "optimized_metric", "model", "eval", "budget", "tune", "checkpoint", "measure", *CONFIG_GROUPS)
#: top-level keys a config may leave out (a config tree from before them)
OPTIONAL_ROOT_KEYS = ("finetune", "stats")


class ConfigError(ValueError):
    """A config that cannot train; the message lists every problem found."""


def _attention(target: Any, settings: dict, context: Context, cfg: Mapping[str, Any]) -> list[str]:
    model = ModelSettings.from_node(cfg["model"])
    return attention.check(target, settings, context, model.dropout, model.bias)


def _norm(target: Any, settings: dict, context: Context, cfg: Mapping[str, Any]) -> list[str]:
    settings = dict(settings)
    placement = settings.pop("placement", "pre")
    if value_problem(placement, norms.Placement):  # reported already; the class's own settings still count
        return settings_problems("norm", target, settings, {"d_model": context.d_model})
    return norms.check(target, settings, context, placement)


def _pattern(target: Any, settings: dict, context: Context, cfg: Mapping[str, Any]) -> list[str]:
    """The pattern's contract, and what of the model's other choices it must express: an additive
    position bias (a ``pos_enc`` class that overrides ``Position.bias``) and ``mask_self``."""
    pos, sharing = cfg.get("pos_enc"), cfg.get("qkv_sharing")
    pos, sharing = (pos if isinstance(pos, Mapping) else {}), (sharing if isinstance(sharing, Mapping) else {})
    try:
        pos_target = import_target(target_path(pos) or "")
        pos_bias = any(getattr(pos_target, hook, None) not in (None, getattr(positions.Position, hook))
                       for hook in ("bias", "score_bias"))
    except Exception:  # noqa: BLE001 - an unimportable pos_enc is named by its own check
        pos_bias = False
    return patterns.check(target, settings, context, pos_enc=label(pos, "?"), pos_bias=pos_bias,
                          qkv_sharing=label(sharing, "?"), mask_self=sharing.get("mask_self") is True,
                          name=label(cfg.get("attention") or {}))


#: group -> the check of its kind's contract: (target, settings, model context, root config) -> problems
CONTRACTS: dict[str, Callable[[Any, dict, Context, Mapping[str, Any]], list[str]]] = {
    "qkv_sharing": _attention,
    "attention": _pattern,
    "pos_enc": lambda target, settings, context, cfg: positions.check(target, settings, context),
    "norm": _norm,
    "ffn": lambda target, settings, context, cfg: ffn.check(target, settings, context),
}


def _resolved(group: str, node: Any, problems: list[str]) -> tuple[Any, dict] | None:
    problems += label_problems(group, node)
    if group == "norm":  # the block's key: checkable whatever the norm class
        problem = value_problem(node.get("placement", "pre"), norms.Placement)
        if problem:
            problems.append(f"norm.placement={node.get('placement')!r} {problem}")
    try:
        target, settings = resolve(group, node)
    except ComponentError as error:
        problems.append(str(error))
        return None
    if "name" in settings and not isinstance(settings["name"], str):  # a target that takes its name
        settings = {k: v for k, v in settings.items() if k != "name"}
    return target, settings


def _max_len(task: Mapping[str, Any]) -> int:
    lengths = task.get("eval_lengths") or []
    lengths = [task.get("seq_len"), *(lengths if isinstance(lengths, (list, tuple)) else [])]
    return max([x for x in lengths if isinstance(x, int) and not isinstance(x, bool) and x > 0] or [1])


def _guarded(what: str, check: Callable[[], list[str]]) -> list[str]:
    """Run one check; if the check itself breaks on a hostile value, that is a problem of ``what``."""
    try:
        return list(check())
    except Exception as error:  # noqa: BLE001 - validation never crashes: it reports
        return [f"{what}: this config cannot be checked ({type(error).__name__}: {error}); "
                f"look at the values under {what}"]


def _schema(name: str, schema: Any, node: Any, passed: Mapping[str, Any] | None = None) -> list[str]:
    """A config node against a settings class: its signature, type hints and own ``problems``."""
    if not isinstance(node, Mapping):
        return [f"{name} must be a mapping of settings, got {node!r}"]
    return merge_problems(settings_problems(name, schema, node, passed),
                          own_problems(name, schema, node, None))


def _trainer_problems(trainer: Mapping[str, Any]) -> list[str]:
    """The trainer node's problems; a node Lightning accepted before on this installation and
    hardware (:func:`_accepted_trainers`) is not checked again, so a refusal of another key or a
    sweep's launcher needs no import of Lightning (seconds at every start)."""
    key = _trainer_key(trainer)
    if key in _accepted_trainers():
        return []
    problems = _checked_trainer(trainer)
    if not problems:
        _remember_trainer(key)
    return problems


#: the trainer nodes Lightning accepted, by :func:`_trainer_key`, in the per-user cache (at most this many)
ACCEPTED_TRAINERS, MAX_ACCEPTED = "trainer_checks.json", 512


def _trainer_key(trainer: Mapping[str, Any]) -> str:
    """What Lightning's verdict on a trainer node depends on: the node, the versions of Lightning and
    torch, the platform and the CUDA devices visible."""
    import hashlib
    import json

    what = {"trainer": trainer, **_installation()}
    return hashlib.sha1(json.dumps(what, sort_keys=True, default=repr).encode()).hexdigest()


@functools.cache
def _installation() -> dict[str, Any]:
    """The versions of Lightning and torch, the platform and the CUDA devices visible: read once per
    process (the installed package's metadata is a file read and a parse, at every validation)."""
    import platform
    import sys
    from importlib.metadata import version

    import torch

    return {"lightning": version("pytorch_lightning"), "torch": torch.__version__,
            "platform": [sys.platform, platform.machine()], "cuda": torch.cuda.device_count() if torch.cuda.is_available() else 0}


def _accepted_trainers() -> list[str]:
    import json

    try:
        keys = json.loads((user_cache() / ACCEPTED_TRAINERS).read_text())
    except (OSError, ValueError):  # none yet, or unreadable: check again
        return []
    return [k for k in keys if isinstance(k, str)] if isinstance(keys, list) else []


def _remember_trainer(key: str) -> None:
    import json
    import os

    path = user_cache() / ACCEPTED_TRAINERS
    keys = [k for k in _accepted_trainers() if k != key][-(MAX_ACCEPTED - 1):] + [key]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(keys))
        os.replace(tmp, path)
    except OSError:  # a read-only cache: the check simply runs every time
        pass


def _checked_trainer(trainer: Mapping[str, Any]) -> list[str]:
    import pytorch_lightning as pl

    passed = {"logger": None, "callbacks": None, "default_root_dir": None}  # set by each job
    problems = _schema("trainer", pl.Trainer, trainer, passed)
    named = {p.split("=")[0].split()[0].removeprefix("trainer.") for p in problems}
    steps = trainer.get("max_steps")
    if "max_steps" not in named and not (isinstance(steps, int) and steps > 0):
        problems.append(f"trainer.max_steps={steps!r} must be a positive integer (the run's length)")
    if trainer.get("accelerator") in ("gpu", "cuda"):
        import torch

        if not torch.cuda.is_available():  # and a GPU Trainer cannot be dry-built here
            problems.append(f"trainer.accelerator={trainer['accelerator']} but no CUDA device is "
                            "visible; valid here: trainer=cpu or trainer=debug")
            return problems
    return problems + _trainer_dry_build({k: v for k, v in trainer.items() if k not in named})


def _trainer_dry_build(trainer: Mapping[str, Any]) -> list[str]:
    """Construct the Trainer once (cheap, nothing runs): Lightning's own checks of devices,
    accelerator, strategy and precision names, before any job starts."""
    import logging
    import tempfile
    import warnings

    import pytorch_lightning as pl

    quiet = [logging.getLogger(name) for name in ("pytorch_lightning", "lightning.pytorch", "lightning.fabric")]
    levels = [log.level for log in quiet]
    try:
        for log in quiet:
            log.setLevel(logging.ERROR)
        with warnings.catch_warnings(), tempfile.TemporaryDirectory() as root:
            warnings.simplefilter("ignore")
            pl.Trainer(**trainer, logger=False, callbacks=[], default_root_dir=root)
    except Exception as error:  # noqa: BLE001 - Lightning's refusal is the problem to report
        return [f"trainer: Lightning refuses these settings: {type(error).__name__}: {error}"]
    finally:
        for log, level in zip(quiet, levels):
            log.setLevel(level)
    return []


#: Lightning callbacks (of ``pytorch_lightning.callbacks``) that refuse, once training starts, a
#: Trainer without a logger
NEEDS_A_LOGGER = ("LearningRateMonitor", "DeviceStatsMonitor")


def _callback_problems(callbacks: Any, logger: Any) -> list[str]:
    """The ``callbacks`` node (name -> ``{_target_: ..., settings}``): each class imported, its
    settings checked against its signature and its own ``problems``, then built (cheap, nothing
    runs) and required to be a ``pytorch_lightning.Callback``."""
    if isinstance(callbacks, Mapping) and not callbacks:
        return []
    import pytorch_lightning as pl

    if not isinstance(callbacks, Mapping):
        return [f"callbacks must map a name to each callback ({{name: {{_target_: ..., setting: value}}}}), "
                f"got {callbacks!r}"]
    needs_a_logger = tuple(getattr(pl.callbacks, name) for name in NEEDS_A_LOGGER)
    from ablate.curve import callback_problems
    from ablate.loggers import logger_names

    no_logger = isinstance(logger, Mapping) and not logger_names(logger)
    problems: list[str] = []
    for name, node in callbacks.items():
        group = f"callbacks.{name}"
        if not isinstance(node, Mapping):
            problems.append(f"{group} must be a callback node with a _target_ (e.g. {{_target_: "
                            f"pytorch_lightning.callbacks.LearningRateMonitor}}), got {node!r}")
            continue
        resolved = _resolved(group, node, problems)
        if resolved is None:
            continue
        target, settings = resolved
        found = merge_problems(settings_problems(group, target, settings), own_problems(group, target, settings, None))
        if found:
            problems += found
            continue
        callback, found = call_problems(group, target, lambda: target(**settings))
        if found:
            problems += found
        elif not isinstance(callback, pl.Callback):
            problems.append(f"{group}: {qualname(target)} must build a pytorch_lightning.Callback, got "
                            f"{type(callback).__name__}")
        elif no_logger and isinstance(callback, needs_a_logger):
            problems.append(f"{group}: {qualname(target)} logs through the run's logger, and logger=none has "
                            "none; valid here: logger=wandb or logger=csv")
        else:
            problems += callback_problems(group, callback, settings)
    return problems


def _node_problems(cfg: Mapping[str, Any]) -> list[str]:
    """The plain (non-component) nodes: every leaf key type- and range-checked."""
    from ablate.optim import OptimSettings
    from ablate.measure import MeasureSettings

    problems = [f"{key}: not a key of the config; valid top-level keys: {', '.join(ROOT_KEYS + OPTIONAL_ROOT_KEYS)}"
                for key in cfg if key not in ROOT_KEYS + OPTIONAL_ROOT_KEYS and key != "hydra"]
    problems += [f"{key} is missing from the config" for key in ROOT_KEYS if key not in cfg]
    seed = value_problem(cfg.get("seed"), Seed)
    if cfg.get("seed") == AUTO_SEED:
        problems.append(f"seed={AUTO_SEED} runs a sweep's seeds in rounds, deciding each comparison with its baseline "
                        "(stats.*); it needs a sweep of variants: ablate -m <key>=<a>,<b> seed=auto stats.mde=1.0")
    elif seed:
        problems.append(f"seed={cfg.get('seed')!r} {seed}")
    if not isinstance(cfg.get("smoke", False), bool):
        problems.append(f"smoke={cfg.get('smoke')!r} must be true or false")
    if "optimized_metric" in cfg and cfg["optimized_metric"] not in OPTIMIZED_METRICS:
        problems.append(f"optimized_metric={cfg['optimized_metric']!r}; valid choices: {', '.join(OPTIMIZED_METRICS)}")
    for name, schema in (("model", ModelSettings), ("optim", OptimSettings), ("measure", MeasureSettings),
                         ("logger", LoggerSettings), ("experiment", ExperimentSettings), ("eval", EvalSettings),
                         ("budget", BudgetSettings), ("tune", TuneSettings), ("checkpoint", CheckpointSettings),
                         ("finetune", FinetuneSettings), ("stats", StatsSettings)):
        if name in cfg:
            problems += _guarded(name, lambda: _schema(name, schema, cfg[name]))
    if "trainer" in cfg:
        problems += _guarded("trainer", lambda: _trainer_problems(cfg["trainer"]))
    if "callbacks" in cfg:
        problems += _guarded("callbacks", lambda: _callback_problems(cfg["callbacks"], cfg.get("logger")))
    model = cfg.get("model")
    if isinstance(model, Mapping) and not [p for p in problems if p.startswith("model")]:
        if model["d_model"] % model["n_heads"]:
            problems.append(f"model.d_model={model['d_model']} is not divisible by model.n_heads={model['n_heads']}")
    return problems


def config_problems(cfg: DictConfig | Mapping[str, Any]) -> list[str]:
    """Every problem of a composed config, as human-readable lines (empty when it is valid).
    Never raises: a check that breaks on a hostile value is itself reported as a problem."""
    try:
        if isinstance(cfg, DictConfig):
            cfg = OmegaConf.to_container(cfg, resolve=True)
    except Exception as error:  # noqa: BLE001 - e.g. an interpolation to a missing key
        return [f"the config cannot be resolved: {error}"]
    problems = _guarded("config", lambda: _node_problems(cfg))
    task = cfg.get("task")
    resolved = _resolved("task", task, problems) if isinstance(task, Mapping) else None
    if not isinstance(task, Mapping):
        problems.append(f"task must be a config group (a mapping with _target_), got {task!r}")
    if resolved:
        problems += _guarded("task", lambda: data.check(*resolved))
    seq2seq = bool(resolved and getattr(resolved[0], "seq2seq", False))
    model = cfg.get("model")
    model_ok = isinstance(model, Mapping) and not any(p.startswith("model") for p in problems)
    if model_ok and resolved:
        problems += _guarded("model", lambda: _arch_problems(cfg, resolved[0]))
        model_ok = not any(p.startswith("model") for p in problems)
    context = Context(d_model=model["d_model"], n_heads=model["n_heads"], n_layers=model["n_layers"],
                      causal=resolved_arch(model.get("arch", "auto"), model["causal"]) == "decoder",
                      max_len=_max_len(task if isinstance(task, Mapping) else {})) \
        if model_ok else None
    for group, contract in CONTRACTS.items():
        node = cfg.get(group)
        if not isinstance(node, Mapping):
            problems.append(f"{group} must be a config group (a mapping with _target_), got {node!r}")
            continue
        resolved = _resolved(group, node, problems)
        if resolved and context is not None:  # the whole contract, built against this model
            problems += _guarded(group, lambda: contract(*resolved, context, cfg))
        elif resolved:  # the model's shape is broken: the settings' types only
            problems += _guarded(group, lambda: type_problems(group, *resolved))
    node = cfg.get("init")
    resolved = _resolved("init", node, problems) if isinstance(node, Mapping) else None
    if not isinstance(node, Mapping):
        problems.append(f"init must be a config group (a mapping with _target_), got {node!r}")
    if resolved and context is not None and not problems:
        problems += _guarded("model", lambda: _dry_run(cfg, context, seq2seq, *resolved))
    elif resolved:
        problems += _guarded("init", lambda: type_problems("init", *resolved))
    return problems


def _arch_problems(cfg: Mapping[str, Any], task: Any) -> list[str]:
    """``model.arch`` against the task (which family reads which rows) and the other groups."""
    model = cfg["model"]
    arch = resolved_arch(model.get("arch", "auto"), model.get("causal"))
    seq2seq, name = bool(getattr(task, "seq2seq", False)), label(cfg["task"], getattr(task, "name", None))
    finetune = cfg.get("finetune") or {}
    if arch in SEQ2SEQ_ARCHS and not seq2seq and not finetune.get("from_job"):
        return [f"model.arch={arch} reads a source and a target: it needs a sequence-to-sequence task (task=add, "
                f"dedup, span_corruption or seq2seq_file, or a Seq2SeqTask of yours); task={name} has none; valid "
                "with it: auto, decoder, encoder (its fine-tune stage reads a downstream task's whole row: "
                "docs/finetune.md)"]
    if seq2seq and arch == "encoder":
        how = "model.arch=encoder" if model.get("arch") == "encoder" else "model.arch=auto with model.causal=false"
        return [f"{how} on task={name}: an encoder sees the target token it is to predict; valid: decoder, "
                "prefix_lm, encoder_decoder"]
    objective = cfg["task"].get("objective") if not seq2seq else None  # lm and mlm's (ablate.data.text)
    if objective == "clm" and arch == "encoder":
        return [f"model.arch=encoder on task={name} (causal LM): an encoder sees the next token it is to predict; "
                "valid: auto, decoder (prefix_lm and encoder_decoder need a seq2seq task: task=span_corruption is "
                "T5's objective on the same corpus)"]
    if objective == "mlm" and model.get("arch") == "decoder":  # under auto, the task's causal=false rules
        return [f"model.arch=decoder on task={name} (masked LM): a masked token is predicted from both sides, which "
                "a decoder cannot read; valid: auto, encoder"]
    if model.get("tie_embeddings") is True and (finetune.get("tasks") or finetune.get("from_job")):
        return ["model.tie_embeddings=true with a fine-tune stage (finetune.tasks): a downstream task's head "
                "predicts its classes, not tokens, so it cannot be the token table; valid: model.tie_embeddings=false"]
    if arch in SEQ2SEQ_ARCHS and objective == "clm":  # a fine-tune job: its encoder side reads the whole row
        return [f"model.arch={arch} fine-tuned on task={name} (causal LM): it reads the whole row bidirectionally, "
                "so it sees the next token it is to predict; valid: auto, decoder"]
    node = cfg.get("attention") or {}
    pattern = import_target(node["_target_"]) if node.get("_target_") else patterns.Softmax
    if arch == "prefix_lm" and not (isinstance(pattern, type) and issubclass(pattern, patterns.Softmax)):
        return [f"model.arch=prefix_lm masks softmax attention (bidirectional over the source, causal after it); "
                f"attention={label(node)} has no such mask; valid: attention=softmax"]
    return []


def _dry_run(cfg: Mapping[str, Any], context: Context, seq2seq: bool, init_target: Any,
             init_settings: dict) -> list[str]:
    """Assemble the model on the meta device, apply its init scheme, run it once at the longest
    length: catches what only the assembled model shows. A seq2seq family on a ``seq2seq`` task
    splits a nominal row in two; on another task (a fine-tune) it reads the whole row."""
    import torch

    with torch.device("meta"):
        arch = resolved_arch(cfg["model"].get("arch", "auto"), cfg["model"].get("causal"))
        layout = (Seq2SeqLayout(1, 1, {context.max_len: max(2, context.max_len // 2)})
                  if arch in SEQ2SEQ_ARCHS and seq2seq else None)
        model, problems = call_problems("model", assemble, lambda: assemble(cfg, 2, 2, context.max_len, None, layout))
        if problems:
            return problems
        problems = init.check(init_target, init_settings, model)
        if problems:
            return problems
        settings = ModelSettings.from_node(cfg["model"])
        if settings.parametrization == "mup":
            try:
                parametrize_mup(model, settings, cfg, init_target, context.max_len)
            except Exception as error:  # noqa: BLE001 - reported, never raised
                return [str(error)]
        tokens = torch.zeros(2, context.max_len, dtype=torch.long)
        out, problems = call_problems("model", assemble, lambda: model(tokens))
    if problems:
        return problems
    if tuple(out.shape) != (2, context.max_len, 2):
        return [f"model: the assembled model returned shape {tuple(out.shape)} for tokens of shape "
                f"{(2, context.max_len)}; expected {(2, context.max_len, 2)}"]
    return []


def validate(cfg: DictConfig | Mapping[str, Any]) -> None:
    """Raise ConfigError naming every problem of ``cfg``; return quietly when it can train."""
    problems = config_problems(cfg)
    if problems:
        raise ConfigError("invalid config:\n  - " + "\n  - ".join(problems))
