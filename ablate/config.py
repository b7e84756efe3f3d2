"""Config validation, in one place: every check a composed config must pass before training.

Hydra already rejects an unknown option of a group (``qkv_sharing=foo``) and an unknown key
(``model.foo=1``) with the valid choices. This module checks what Hydra cannot see: names set
through a key (``qkv_sharing.name=foo``), sizes, and combinations that only fail deep inside
a model (rope with an odd head dimension, gqa groups that do not divide the heads, learned
positions asked to evaluate beyond their table, a missing ``task.path``).
"""

from __future__ import annotations

from typing import Any, Mapping

from omegaconf import DictConfig, OmegaConf

LOGGERS = ("wandb", "csv", "none")
ROTARY = ("rope", "xpos")


class ConfigError(ValueError):
    """A config that cannot train; the message lists every problem found."""


def _choice(problems: list[str], key: str, value: Any, valid: Any) -> bool:
    if value in valid:
        return True
    problems.append(f"{key}={value!r} is not a valid choice; valid: {', '.join(sorted(valid))}")
    return False


def _positive(problems: list[str], node: Mapping[str, Any], prefix: str, keys: tuple[str, ...]) -> None:
    for key in keys:
        value = node.get(key)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
            problems.append(f"{prefix}.{key}={value!r} must be a positive number")


def config_problems(cfg: DictConfig | Mapping[str, Any]) -> list[str]:
    """Every problem of a composed config, as human-readable lines (empty when it is valid)."""
    from ablate.data import task_problems
    from ablate.model.attention import ATTENTIONS
    from ablate.model.ffn import FFNS
    from ablate.model.init import INITS
    from ablate.model.norms import NORMS, PLACEMENTS
    from ablate.model.positions import POSITIONS

    if isinstance(cfg, DictConfig):
        cfg = OmegaConf.to_container(cfg, resolve=True)
    problems: list[str] = []
    model, qkv, pos, norm, ffn = cfg["model"], cfg["qkv_sharing"], cfg["pos_enc"], cfg["norm"], cfg["ffn"]

    _choice(problems, "qkv_sharing", qkv.get("name"), ATTENTIONS)
    pos_ok = _choice(problems, "pos_enc", pos.get("name"), POSITIONS)
    _choice(problems, "norm", norm.get("name"), NORMS)
    _choice(problems, "norm.placement", norm.get("placement"), PLACEMENTS)
    _choice(problems, "ffn", ffn.get("name"), FFNS)
    _choice(problems, "init", cfg["init"].get("name"), INITS)
    _choice(problems, "logger", cfg["logger"].get("name"), LOGGERS)

    _positive(problems, model, "model", ("d_model", "n_heads", "n_layers"))
    _positive(problems, ffn, "ffn", ("mult",))
    _positive(problems, cfg["optim"], "optim", ("lr",))
    _positive(problems, cfg["trainer"], "trainer", ("max_steps",))
    if not 0 <= model.get("dropout", 0) < 1:
        problems.append(f"model.dropout={model['dropout']!r} must be in [0, 1)")
    if cfg["optim"].get("warmup_steps", 0) < 0:
        problems.append(f"optim.warmup_steps={cfg['optim']['warmup_steps']!r} must be >= 0")

    d_model, n_heads = model.get("d_model"), model.get("n_heads")
    if isinstance(d_model, int) and isinstance(n_heads, int) and n_heads > 0 and d_model > 0:
        if d_model % n_heads:
            problems.append(f"model.d_model={d_model} is not divisible by model.n_heads={n_heads}")
        elif pos_ok and pos["name"] in ROTARY and (d_model // n_heads) % 2:
            problems.append(f"pos_enc={pos['name']} needs an even head dimension; "
                            f"model.d_model/model.n_heads = {d_model}/{n_heads} = {d_model // n_heads}")
        if qkv.get("name") == "gqa":
            kv_heads = qkv.get("kv_heads")
            if not isinstance(kv_heads, int) or kv_heads <= 0 or n_heads % kv_heads:
                problems.append(f"qkv_sharing.kv_heads={kv_heads!r} must divide model.n_heads={n_heads} "
                                f"(valid: {', '.join(str(k) for k in range(1, n_heads + 1) if n_heads % k == 0)})")

    if cfg["trainer"].get("accelerator") in ("gpu", "cuda"):
        import torch

        if not torch.cuda.is_available():
            problems.append(f"trainer.accelerator={cfg['trainer']['accelerator']} but no CUDA device is "
                            "visible; valid here: trainer=cpu or trainer=debug")

    task = cfg["task"]
    problems += task_problems(task)
    if pos_ok and pos["name"] == "learned":
        lengths = [task.get("seq_len") or 0, *(task.get("eval_lengths") or [])]
        if max(lengths) > pos.get("max_len", 0):
            problems.append(f"pos_enc=learned has a table of pos_enc.max_len={pos.get('max_len')} positions "
                            f"but the task runs at length {max(lengths)} (task.seq_len/task.eval_lengths); "
                            "learned positions cannot extrapolate: raise pos_enc.max_len or pick another pos_enc")
    if not problems:
        problems += _build_problems(cfg, max([task.get("seq_len") or 1, *(task.get("eval_lengths") or [])]))
    return problems


def _build_problems(cfg: Mapping[str, Any], max_len: int) -> list[str]:
    """Build the model on the meta device (no memory, no data): catches what only a class can
    know, such as a key its constructor does not take or deepnorm at a placement other than post."""
    import torch

    from ablate.model.transformer import build_model

    try:
        with torch.device("meta"):
            build_model(cfg, vocab_size=2, n_outputs=2, max_len=max_len, pad_id=None)
    except (TypeError, ValueError) as error:
        return [f"model: {error}"]
    return []


def validate(cfg: DictConfig | Mapping[str, Any]) -> None:
    """Raise ConfigError naming every problem of ``cfg``; return quietly when it can train."""
    problems = config_problems(cfg)
    if problems:
        raise ConfigError("invalid config:\n  - " + "\n  - ".join(problems))
