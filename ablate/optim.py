"""The optimizer: its settings (the ``optim`` node), AdamW's parameter groups and the learning-rate
schedule. Plain torch: validating a config needs these settings without importing Lightning."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Mapping

import torch

from ablate.components import NonNegativeFloat, NonNegativeInt, PositiveFloat, Range

Beta = Annotated[float, Range(0, 1, high_open=True)]


@dataclass
class OptimSettings:
    """The ``optim`` node: AdamW (Loshchilov & Hutter 2019) with linear warm-up, then cosine decay."""

    name: Literal["adamw"]
    lr: PositiveFloat
    weight_decay: NonNegativeFloat = 0.01
    betas: tuple[Beta, ...] = (0.9, 0.98)
    warmup_steps: NonNegativeInt = 100
    min_lr_ratio: Annotated[float, Range(0, 1)] = 0.1

    @classmethod
    def problems(cls, settings: Mapping[str, Any], context: Any = None) -> list[str]:
        betas = settings.get("betas", cls.betas)
        if isinstance(betas, (list, tuple)) and len(betas) != 2:
            return [f"optim.betas={list(betas)!r} must hold two numbers (beta1, beta2)"]
        return []


def make_optimizer(params: Any, optim: Mapping[str, Any]) -> torch.optim.Optimizer:
    """AdamW; weight decay on matrices only (not on norms, biases or gains), as in GPT-2.

    A parameter's ``lr_scale`` attribute (μP's 1/width multiplier of hidden matrices, set by
    ``ablate.model.mup``) scales its learning rate and divides its weight decay, so lr·wd, the decay
    per step of PyTorch's AdamW, is unchanged (microsoft/mup's MuAdamW does the same). Parameters
    without it (every one under the standard parametrization) form the two groups above."""
    groups: dict[tuple[bool, float], list] = {(True, 1.0): [], (False, 1.0): []}
    for p in params:
        if p.requires_grad:
            groups.setdefault((p.dim() >= 2, float(getattr(p, "lr_scale", 1.0))), []).append(p)
    order = sorted(groups, key=lambda key: (not key[0], key[1] != 1.0, key[1]))  # decay first, unscaled first
    return torch.optim.AdamW(
        [{"params": groups[decay, scale], "lr": optim["lr"] * scale,
          "weight_decay": optim["weight_decay"] / scale if decay else 0.0} for decay, scale in order],
        lr=optim["lr"], betas=tuple(optim["betas"]))


def warmup_cosine(step: int, warmup_steps: int, total_steps: int, min_ratio: float) -> float:
    """LR multiplier: linear warm-up to 1, then cosine decay to ``min_ratio``."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
