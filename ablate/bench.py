"""``ablate-bench``: time every variant of an experiment interleaved, in one process.

Runs of a sweep land on a shared machine at different times, so their tokens/s carry the noise of
whatever else ran then. Here every variant is built once, then their training steps alternate
(A B C A B C ...) after a warm-up, so a slow spell hits all variants alike and the ratios hold.

    ablate-bench experiment=qkv_sharing                  # variants and baseline from the experiment
    ablate-bench experiment=pos_enc --rounds 30 --out bench.json
    ablate-table SWEEP_DIR --bench                       # the same for a finished sweep's variants
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from omegaconf import DictConfig, OmegaConf

from ablate.paths import CONF_DIR
from ablate.results import write_json_atomic
from ablate.sweep import expand_sweep, group_by_variant, job_variant, load_sweep_records, override_key, swept_keys


class _Variant:
    """One variant ready to step: model, optimizer and an endless batch stream, as `ablate` builds them."""

    def __init__(self, cfg: DictConfig) -> None:
        from ablate.lit import make_optimizer
        from ablate.run import build

        data, self.model, _ = build(cfg)
        self.device = bench_device(cfg)
        self.model.to(self.device)
        self.optimizer = make_optimizer(self.model.parameters(), cfg.optim)
        self.clip = cfg.trainer.get("gradient_clip_val")
        self._loader = data.train_dataloader
        self.batches: Iterator[Any] = iter(self._loader())
        self.times: list[float] = []
        self.tokens_per_step = 0

    def _next_batch(self) -> Any:
        try:
            return next(self.batches)
        except StopIteration:  # finite (file-based) tasks: start another epoch
            self.batches = iter(self._loader())
            return next(self.batches)

    def step(self, timed: bool) -> None:
        from ablate.lit import train_step
        from ablate.measure import time_call

        batch = tuple(t.to(self.device, non_blocking=True) for t in self._next_batch())
        # Synchronised at both ends: on CUDA the step's kernels run inside the interval, the
        # previous variant's do not (a no-op on the CPU).
        seconds = time_call(lambda: train_step(self.model, self.optimizer, batch, self.clip), self.device)
        if timed:
            self.times.append(seconds)
            self.tokens_per_step = batch[0].numel()


def bench_device(cfg: DictConfig) -> torch.device:
    """The device a job of ``cfg`` trains on, as Lightning picks it from ``trainer.accelerator``
    (``gpu``/``cuda``: the first CUDA device; ``auto``: CUDA when there is one; else the CPU)."""
    accelerator = str(cfg.trainer.get("accelerator", "cpu")).lower()
    if accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available()):
        return torch.device("cuda", 0)
    if accelerator == "mps":
        return torch.device("mps")
    return torch.device("cpu")


def interleaved(configs: dict[str, DictConfig], rounds: int = 20, steps_per_round: int = 5,
                warmup_rounds: int = 2, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Time ``configs`` (variant key -> config) round-robin; per-variant min/median/max tokens/s."""
    variants = {key: _Variant(cfg) for key, cfg in configs.items()}
    for r in range(warmup_rounds + rounds):
        for variant in variants.values():
            for _ in range(steps_per_round):
                variant.step(timed=r >= warmup_rounds)
        if progress:
            progress(f"round {r + 1}/{warmup_rounds + rounds}")
    return {"rounds": rounds, "steps_per_round": steps_per_round,
            "variants": {key: _tokens_per_s(v.times, v.tokens_per_step) for key, v in variants.items()}}


def _tokens_per_s(times: list[float], tokens_per_step: int) -> dict[str, Any]:
    """bench.json's per-variant entry: tokens/s min/median/max over the timed steps."""
    from ablate.measure import summarize_times

    s = summarize_times(times, tokens_per_step)
    return {"tokens_per_s": {"min": tokens_per_step / s["step_time_s"]["max"], "median": s["tokens_per_s"],
                             "max": tokens_per_step / s["step_time_s"]["min"]}, "timed_steps": s["timed_steps"]}


def experiment_configs(overrides: list[str]) -> tuple[dict[str, DictConfig], str | None]:
    """The variants of the sweep that ``ablate -m OVERRIDES`` would run, each composed once with
    ``seed=0``, keyed by their variant (``ablate.sweep``: the key the table looks them up by)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cli = OverridesParser.create().parse_overrides(overrides)
        fixed = [o.input_line for o in cli if not o.is_sweep_override()]
        base = compose(config_name="config", overrides=fixed, return_hydra_config=True)
        params = [f"{k}={v}" for k, v in (base.hydra.sweeper.params or {}).items()]
        jobs = expand_sweep(params + list(overrides))
        swept = swept_keys(jobs)
        configs = {}
        for job in jobs:
            key = job_variant(job, swept)
            if key not in configs:  # the first seed of each variant; the benchmark sets seed=0
                job = [o for o in job if override_key(o) != "seed"]
                configs[key] = compose(config_name="config", overrides=[*job, "seed=0"])
        return configs, base.experiment.baseline


def bench_sweep(sweep_dir: str | Path, rounds: int = 20) -> dict[str, Any]:
    """Interleaved benchmark of the variants of a (finished or partial) sweep, from its records."""
    groups = group_by_variant(load_sweep_records(Path(sweep_dir)))
    configs = {key: OmegaConf.create(runs[0]["config"]) for key, runs in groups.items()}
    baseline = next((r["experiment"]["baseline"] for runs in groups.values() for r in runs
                     if (r.get("experiment") or {}).get("baseline")), None)
    result = interleaved(configs, rounds=rounds)
    result["baseline"] = baseline
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="ablate-bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. experiment=qkv_sharing")
    parser.add_argument("--rounds", type=int, default=20, help="timed rounds (each: every variant in turn)")
    parser.add_argument("--steps-per-round", type=int, default=5)
    parser.add_argument("--out", type=Path, help="write the figures as JSON (ablate-table reads bench.json)")
    args = parser.parse_args(argv)

    configs, baseline = experiment_configs(args.overrides)
    result = interleaved(configs, rounds=args.rounds, steps_per_round=args.steps_per_round,
                         progress=lambda s: print(f"\r[ablate-bench] {s}", end="", flush=True))
    print()
    result["baseline"] = baseline
    base = result["variants"].get(baseline or "", next(iter(result["variants"].values())))["tokens_per_s"]
    print(f"{'variant':40s} {'min':>10s} {'median':>10s} {'max':>10s}  ratio to {baseline or 'the first'}")
    for key, v in result["variants"].items():
        s = v["tokens_per_s"]
        print(f"{key:40s} {s['min']:10.0f} {s['median']:10.0f} {s['max']:10.0f}  {s['median'] / base['median']:.3f}x")
    if args.out:
        write_json_atomic(args.out, result)
        print(f"[ablate-bench] wrote {args.out}")


if __name__ == "__main__":
    main()
