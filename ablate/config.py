"""Config validation: one pass over a composed config, before anything trains.

Hydra already rejects an unknown option of a group (``qkv_sharing=foo``) and an unknown key
(``model.foo=1``) with the valid choices. This pass checks the rest, through one mechanism for
built-in and user components alike (``ablate.components``):

* the ``model`` node against :class:`ablate.model.ModelSettings` (types and ranges);
* every component group through the contract of its kind (``CONTRACTS``: one explicit dict), which
  checks the option's settings against its class's signature, runs the class's own ``problems``,
  and builds and calls it on the meta device (no memory, no compute);
* the whole model, assembled, initialised and run once on the meta device.

Whatever goes wrong inside a check is reported as a problem naming the group and the class,
never raised: :func:`validate` raises one ``ConfigError`` listing every problem.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from omegaconf import DictConfig, OmegaConf

from ablate import data
from ablate.components import ComponentError, Context, call_problems, resolve, settings_problems
from ablate.model import ModelSettings, assemble, attention, ffn, init, norms, positions

LOGGERS = ("wandb", "csv", "none")


class ConfigError(ValueError):
    """A config that cannot train; the message lists every problem found."""


def _attention(target: Any, settings: dict, context: Context, cfg: Mapping[str, Any]) -> list[str]:
    model = cfg["model"]
    return attention.check(target, settings, context, model.get("dropout", 0.0), model.get("bias", True))


def _norm(target: Any, settings: dict, context: Context, cfg: Mapping[str, Any]) -> list[str]:
    settings = dict(settings)
    placement = settings.pop("placement", "pre")
    return norms.check(target, settings, context, placement)


#: group -> the check of its kind's contract: (target, settings, model context, root config) -> problems
CONTRACTS: dict[str, Callable[[Any, dict, Context, Mapping[str, Any]], list[str]]] = {
    "qkv_sharing": _attention,
    "pos_enc": lambda target, settings, context, cfg: positions.check(target, settings, context),
    "norm": _norm,
    "ffn": lambda target, settings, context, cfg: ffn.check(target, settings, context),
}


def _positive(problems: list[str], node: Mapping[str, Any], prefix: str, keys: tuple[str, ...]) -> None:
    for key in keys:
        value = node.get(key)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
            problems.append(f"{prefix}.{key}={value!r} must be a positive number")


def _resolved(group: str, node: Any, problems: list[str]) -> tuple[Any, dict] | None:
    if not isinstance(node, Mapping):
        problems.append(f"{group} must be a config group (a mapping with _target_), got {node!r}")
        return None
    try:
        return resolve(group, node)
    except ComponentError as error:
        problems.append(str(error))
        return None


def _max_len(task: Mapping[str, Any]) -> int:
    lengths = [task.get("seq_len"), *(task.get("eval_lengths") or [])]
    return max([x for x in lengths if isinstance(x, int) and not isinstance(x, bool)] or [1])


def config_problems(cfg: DictConfig | Mapping[str, Any]) -> list[str]:
    """Every problem of a composed config, as human-readable lines (empty when it is valid)."""
    if isinstance(cfg, DictConfig):
        cfg = OmegaConf.to_container(cfg, resolve=True)
    problems: list[str] = []

    logger = (cfg.get("logger") or {}).get("name")
    if logger not in LOGGERS:
        problems.append(f"logger={logger!r} is not a valid choice; valid: {', '.join(LOGGERS)}")
    _positive(problems, cfg["optim"], "optim", ("lr",))
    _positive(problems, cfg["trainer"], "trainer", ("max_steps",))
    if cfg["optim"].get("warmup_steps", 0) < 0:
        problems.append(f"optim.warmup_steps={cfg['optim']['warmup_steps']!r} must be >= 0")
    if cfg["trainer"].get("accelerator") in ("gpu", "cuda"):
        import torch

        if not torch.cuda.is_available():
            problems.append(f"trainer.accelerator={cfg['trainer']['accelerator']} but no CUDA device is "
                            "visible; valid here: trainer=cpu or trainer=debug")

    task = cfg["task"]
    resolved = _resolved("task", task, problems)
    if resolved:
        problems += data.check(*resolved)

    model = cfg["model"]
    model_problems = settings_problems("model", ModelSettings, model)
    if not model_problems and model["d_model"] % model["n_heads"]:
        model_problems.append(f"model.d_model={model['d_model']} is not divisible by "
                              f"model.n_heads={model['n_heads']}")
    problems += model_problems
    if model_problems:
        return problems
    context = Context(d_model=model["d_model"], n_heads=model["n_heads"], n_layers=model["n_layers"],
                      causal=model["causal"], max_len=_max_len(task))
    component_problems: list[str] = []
    for group, contract in CONTRACTS.items():
        resolved = _resolved(group, cfg[group], component_problems)
        if resolved:
            component_problems += contract(*resolved, context, cfg)
    resolved = _resolved("init", cfg["init"], component_problems)
    problems += component_problems
    if not component_problems and resolved:
        problems += _dry_run(cfg, context, *resolved)
    return problems


def _dry_run(cfg: Mapping[str, Any], context: Context, init_target: Any, init_settings: dict) -> list[str]:
    """Assemble the model on the meta device, apply its init scheme, run it once at the longest
    length: catches what only the assembled model shows."""
    import torch

    with torch.device("meta"):
        model, problems = call_problems("model", assemble, lambda: assemble(cfg, 2, 2, context.max_len))
        if problems:
            return problems
        problems = init.check(init_target, init_settings, model)
        if problems:
            return problems
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
