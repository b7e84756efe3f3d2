"""``ablate-coord-check``: μP's coordinate check (Yang et al. 2022, "Tensor Programs V", §J.1 and
Fig. 5; microsoft/mup's ``coord_check``), for any model ``ablate`` builds.

For each parametrization and width, a model is built as a run would build it (``model.d_model`` set
to the width, everything else from the overrides), trained for a few AdamW steps at a constant
learning rate on the task's own batches, and at every step the RMS of each layer's output is
recorded during the forward pass: the token embeddings plus positions, each block's attention and
FFN output, each block's output, and the logits. A parametrization whose updates are scaled right
for width keeps these flat across widths (μP); under the standard parametrization they grow with
width once training moves the weights, the logits fastest. The log-log slope of the RMS against the
width, per kind of layer, says which (``slopes``).

    ablate-coord-check                                   # the default model, widths 32..256
    ablate-coord-check pos_enc=rope ffn=swiglu --widths 64,128,256,512 --out coord_check.png

The base width (``model.mup_base_width``) is the narrowest width unless the overrides set it.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any, Iterable

import torch
import torch.nn as nn


KINDS = ("embedding", "attention", "ffn", "block", "logits")
DEFAULT_WIDTHS = (32, 64, 128, 256)


def _hooks(model: nn.Module, seen: dict[str, float]) -> list[Any]:
    """Forward hooks that record each layer's output RMS into ``seen`` (name -> RMS)."""
    def record(name: str):
        def hook(module: nn.Module, args: Any, out: torch.Tensor) -> None:
            seen[name] = float(out.detach().float().pow(2).mean().sqrt())
        return hook

    layers = {"embedding": model.drop, "logits": model.head}
    for i, block in enumerate(model.blocks):
        layers |= {f"attention.{i}": block.attn, f"ffn.{i}": block.ffn, f"block.{i}": block}
    return [module.register_forward_hook(record(name)) for name, module in layers.items()]


def _run(cfg: Any, steps: int, lr: float) -> list[dict[str, float]]:
    """Per step, each layer's output RMS for the model of ``cfg`` trained at a constant ``lr``."""
    from ablate.data import AblateDataModule
    from ablate.lit import masked_loss
    from ablate.model import build_model
    from ablate.optim import make_optimizer

    torch.manual_seed(cfg.seed)
    data = AblateDataModule(cfg.task, seed=cfg.seed)
    data.setup("fit")
    model = build_model(cfg, data.vocab_size, data.n_classes, data.max_len, data.pad_id, data.layout).train()
    optimizer = make_optimizer(model.parameters(), {**cfg.optim, "lr": lr})
    batches = iter(data.train_dataloader())
    seen: dict[str, float] = {}
    handles = _hooks(model, seen)
    per_step = []
    try:
        for _ in range(steps):
            tokens, targets = next(batches)
            loss = masked_loss(model(tokens), targets)
            per_step.append(dict(seen))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    finally:
        for handle in handles:
            handle.remove()
    return per_step


def coord_check(overrides: Iterable[str] = (), widths: Iterable[int] = DEFAULT_WIDTHS, steps: int = 4,
                seeds: Iterable[int] = (0, 1), lr: float = 1e-2,
                parametrizations: Iterable[str] = ("standard", "mup")) -> list[dict[str, Any]]:
    """One row per (parametrization, width, seed, step, layer): its output RMS (``rms``). Raises
    ``ablate.config.ConfigError`` naming every problem of a config before anything trains."""
    from ablate.compose import compose
    from ablate.config import validate

    widths, overrides = sorted(int(w) for w in widths), list(overrides)
    base = [] if any(o.split("=")[0].lstrip("+") == "model.mup_base_width" for o in overrides) \
        else [f"model.mup_base_width={widths[0]}"]
    configs = []
    for parametrization in parametrizations:
        for width in widths:
            for seed in seeds:
                cfg = compose([*overrides, *base, f"model.d_model={width}", f"model.parametrization={parametrization}",
                               f"seed={seed}"])
                validate(cfg)
                configs.append((parametrization, width, seed, cfg))
    rows = []
    for parametrization, width, seed, cfg in configs:
        for step, seen in enumerate(_run(cfg, steps, lr), start=1):
            rows += [{"parametrization": parametrization, "width": width, "seed": seed, "step": step,
                      "layer": layer, "rms": rms} for layer, rms in seen.items()]
    return rows


def kind(layer: str) -> str:
    return layer.split(".")[0]


def mean_rms(rows: list[dict], parametrization: str, step: int, layer_kind: str | None = None,
             layer: str | None = None) -> dict[int, float]:
    """width -> the mean RMS over seeds and over the layers of one kind (or the one ``layer``), at one step."""
    sums: dict[int, list[float]] = {}
    for r in rows:
        if r["parametrization"] == parametrization and r["step"] == step and (
                r["layer"] == layer if layer is not None else kind(r["layer"]) == layer_kind):
            sums.setdefault(r["width"], []).append(r["rms"])
    return {w: sum(v) / len(v) for w, v in sorted(sums.items())}


def slope(points: dict[int, float]) -> float:
    """The least-squares slope of log RMS against log width: 0 flat, 1 proportional to width."""
    xs, ys = [math.log(w) for w in points], [math.log(v) for v in points.values()]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def slopes(rows: list[dict], step: int | None = None) -> dict[str, dict[str, float]]:
    """parametrization -> layer kind -> the slope at ``step`` (default: the last)."""
    step = step or max(r["step"] for r in rows)
    out: dict[str, dict[str, float]] = {}
    for p in dict.fromkeys(r["parametrization"] for r in rows):
        out[p] = {k: slope(mean_rms(rows, p, step, k)) for k in KINDS}
    return out


def plot(rows: list[dict], path: str | Path) -> Path:
    """``coord_check.png``: a panel per parametrization (rows) and step (columns), each layer's RMS
    against width on log-log axes, coloured by kind of layer."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    params = list(dict.fromkeys(r["parametrization"] for r in rows))
    steps = sorted({r["step"] for r in rows})
    colours = dict(zip(KINDS, plt.get_cmap("tab10").colors))
    fig, axes = plt.subplots(len(params), len(steps), figsize=(3.2 * len(steps), 3.0 * len(params)),
                             sharex=True, sharey="row", squeeze=False)
    for i, p in enumerate(params):
        for j, step in enumerate(steps):
            ax = axes[i][j]
            for layer in dict.fromkeys(r["layer"] for r in rows):
                points = mean_rms(rows, p, step, layer=layer)
                ax.plot(list(points), list(points.values()), marker="o", markersize=3,
                        color=colours[kind(layer)], alpha=0.8, linewidth=1)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"{p}, step {step}", fontsize=9)
            if i == len(params) - 1:
                ax.set_xlabel("width (d_model)")
            if j == 0:
                ax.set_ylabel("activation RMS")
    handles = [plt.Line2D([], [], color=colours[k], marker="o", label=k) for k in KINDS]
    fig.legend(handles=handles, loc="upper center", ncol=len(KINDS), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="ablate-coord-check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides of the model and task, e.g. pos_enc=rope")
    parser.add_argument("--widths", default=",".join(map(str, DEFAULT_WIDTHS)), help="comma-separated d_model values")
    parser.add_argument("--steps", type=int, default=4, help="AdamW steps (each recorded before its update)")
    parser.add_argument("--seeds", type=int, default=2, help="seeds per width (the RMS is averaged over them)")
    parser.add_argument("--lr", type=float, default=1e-2, help="the constant learning rate")
    parser.add_argument("--out", type=Path, default=Path("coord_check.png"), help="the plot")
    args = parser.parse_args(argv)

    from hydra.errors import HydraException

    from ablate.config import ConfigError

    try:
        widths = [int(w) for w in args.widths.split(",") if w.strip()]
    except ValueError:
        parser.error(f"--widths={args.widths!r}: give comma-separated integers, e.g. 32,64,128,256")
    if len(widths) < 2 or min(widths) < 1:
        parser.error(f"--widths={args.widths!r}: give at least two positive widths")
    try:
        rows = coord_check(args.overrides, widths, args.steps, range(args.seeds), args.lr)
    except (ConfigError, HydraException) as error:
        print(f"ablate-coord-check: {error}", file=sys.stderr)
        sys.exit(2)
    print(f"log-log slope of activation RMS against width at step {args.steps} "
          "(0: flat, as μP should be; 1: grows with width)")
    print(f"{'':10s}" + "".join(f"{k:>11s}" for k in KINDS))
    for p, by_kind in slopes(rows).items():
        print(f"{p:10s}" + "".join(f"{by_kind[k]:11.2f}" for k in KINDS))
    print(f"[ablate-coord-check] wrote {plot(rows, args.out)}")


if __name__ == "__main__":
    main()
