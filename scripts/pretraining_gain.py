"""Does masked-LM pretraining help a downstream task here? The calibration behind the offline
suite's settings (docs/finetune.md, "Does pretraining help here?").

One masked-LM pretraining of the shipped fine-tune experiment's model (the default model, 64 tokens,
batches of 32), then each task fine-tuned from it and from scratch with the same seed (same head,
same batches, same steps), single-threaded in one process, so the figures repeat. Prints each pair's
test-split scores and their difference. ``--pretraining span_corruption --arch encoder_decoder``
asks the same of T5's objective and another family (prefix_lm, decoder too); its fine-tunes take
the pretrained model's layout (``task.causal``), as the fine-tune stage's do.

    .venv/bin/python scripts/pretraining_gain.py                                 # the suite, 300 steps
    .venv/bin/python scripts/pretraining_gain.py --tasks py_continues --steps 200 --lr 5e-4 --seeds 2
    .venv/bin/python scripts/pretraining_gain.py --tasks py_docstring --set task.label=match --lr 1e-3
    .venv/bin/python scripts/pretraining_gain.py --pretraining span_corruption --arch encoder_decoder --tasks py_module
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch

from ablate.compose import compose
from ablate.finetune import load_pretrained, save_pretrained
from ablate.lit import train_steps
from ablate.optim import make_optimizer
from ablate.train import build

#: the shipped experiment's pretraining (experiment=qkv_sharing_finetune), one variant, without its task
PRETRAINING = ["task.seq_len=64", "task.batch_size=32", "logger=none", "finetune.tasks=[py_module]"]


def pretrain(steps: int, overrides: list[str], job_dir: str, objective: str = "mlm"):
    """The pretrained weights of ``steps`` steps of ``task=objective`` (as a fine-tune job loads them)."""
    cfg = compose([f"task={objective}", *PRETRAINING, f"trainer.max_steps={steps}", *overrides])
    data, model, _ = build(cfg)
    train_steps(model, make_optimizer(model.parameters(), cfg.optim), data.train_dataloader(), steps,
                float(cfg.optim.lr))
    return load_pretrained(save_pretrained(job_dir, model, data.task.codec())[0])


def fine_tune_score(task: str, seed: int, steps: int, lr: float, start, overrides: list[str]) -> float:
    """The test-split score of ``task`` after ``steps`` fine-tune steps from ``start`` (None: scratch)."""
    cfg = compose([f"task={task}", "task.seq_len=64", "task.batch_size=32", "logger=none", f"seed={seed}",
                   "finetune.from_job=x", *overrides])
    data, model, module = build(cfg, start)
    train_steps(model, make_optimizer(model.parameters(), cfg.optim), data.train_dataloader(), steps, lr)
    return float(module.evaluate(data.eval_batches(64, "test"))["accuracy"])  # the headline metric


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default="py_module,py_continues,py_tokens", help="comma-separated task options")
    parser.add_argument("--pretrain-steps", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=300, help="fine-tune steps")
    parser.add_argument("--lr", type=float, default=2e-3, help="fine-tune learning rate")
    parser.add_argument("--seeds", type=int, default=2, help="fine-tune seeds 0..N-1")
    parser.add_argument("--set", action="append", default=[], help="an override of each fine-tune (task.label=match)")
    parser.add_argument("--pretraining", default="mlm", choices=["mlm", "span_corruption"],
                        help="the pretraining task")
    parser.add_argument("--arch", default=None, help="model.arch of both stages (default: the task's family)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    started = time.perf_counter()
    model = [f"model.arch={args.arch}"] if args.arch else []
    with tempfile.TemporaryDirectory() as job_dir:
        pretrained = pretrain(args.pretrain_steps, model, job_dir, args.pretraining)
        print(f"pretrained: {args.pretrain_steps} {args.pretraining} steps{f' ({args.arch})' if args.arch else ''}, "
              f"{time.perf_counter() - started:.0f} s", flush=True)
        fine_tune = [*model, f"task.causal={str(pretrained.causal).lower()}", *args.set]  # the stage's layout
        for task in args.tasks.split(","):
            for seed in range(args.seeds):
                pre, scratch = (fine_tune_score(task, seed, args.steps, args.lr, start, fine_tune)
                                for start in (pretrained, None))
                print(f"{task} seed {seed}, {args.steps} steps at lr {args.lr:g}: pretrained {pre:.3f}, "
                      f"scratch {scratch:.3f}, gain {pre - scratch:+.3f}", flush=True)


if __name__ == "__main__":
    main()
