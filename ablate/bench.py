"""``ablate-bench``: time every variant of an experiment interleaved, in one process.

Runs of a sweep land on a shared machine at different times, so their tokens/s carry the noise of
whatever else ran then. Here every variant is built once, then their training steps alternate
(A B C A B C ...) after a warm-up, so a slow spell hits all variants alike and the ratios hold
(``ablate.timing``). The variants are exactly those the sweep would run: the same planner
(``ablate.planner``) makes them, designs included.

    ablate-bench experiment=qkv_sharing                  # variants and baseline from the experiment
    ablate-bench experiment=pos_enc --rounds 30 --out bench.json
    ablate-table SWEEP_DIR --bench                       # the same for a finished sweep's variants

Each ratio to the baseline is also taken round by round (the variants' steps of one round ran
within a second of each other): their quartiles and min-max are shown, and one line warns when
the rounds disagree, i.e. when the middle half of a variant's per-round ratios spans more than
:data:`DISAGREE` of its median ratio (the machine's load changed within rounds, so the median
ratio cannot be trusted to that precision).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ablate.planner import Planner, SweepError, variant_configs
from ablate.record import Record
from ablate.report.stats import ROUNDS_DISAGREE, RoundRatios, round_ratios
from ablate.results import write_json_atomic
from ablate.sweep import group_by_variant, override_key
from ablate.timing import interleaved


#: (kept here for its readers) the rounds' disagreement threshold: ``ablate.report.stats.ROUNDS_DISAGREE``
DISAGREE = ROUNDS_DISAGREE


def round_spread(result: dict[str, Any], baseline: str | None = None) -> dict[str, dict[str, float]]:
    """Per variant: the quartiles and min-max of its tokens/s over the baseline's, round by round
    (``interleaved``'s ``round_tokens_per_s``; the baseline: ``baseline`` or the first variant):
    ``ablate.report.stats.round_ratios``, the statistic the table's speed column shows."""
    variants = result["variants"]
    base = variants.get(baseline or "", next(iter(variants.values())))
    out = {}
    for key, entry in variants.items():
        spread = round_ratios(entry.get("round_tokens_per_s") or [], base.get("round_tokens_per_s") or [])
        if spread is not None:
            out[key] = asdict(spread)
    return out


def spread_lines(result: dict[str, Any], baseline: str | None = None) -> list[str]:
    """The per-round ratios in words, one line per variant, and a warning line when the rounds disagree."""
    spread = round_spread(result, baseline)
    lines = [f"{key:40s} ratio per round: median {s['median']:.3f}x, IQR {s['q25']:.3f}-{s['q75']:.3f}, "
             f"min-max {s['min']:.3f}-{s['max']:.3f} ({s['rounds']} rounds)" for key, s in spread.items()]
    loose = [key for key, s in spread.items() if RoundRatios(**s).disagree]
    if loose:
        lines.append(f"warning: the rounds disagree by more than {DISAGREE:.0%} (IQR of the per-round ratios) for "
                     f"{', '.join(loose)}: the machine's load changed while timing; rerun with more --rounds "
                     "on a quieter machine before reading speed-ups smaller than that")
    return lines


def experiment_configs(overrides: list[str]) -> tuple[dict[str, DictConfig], str | None]:
    """The variants of the sweep that ``ablate -m OVERRIDES`` would run (planned and validated as
    the sweeper plans them: design rows included), each composed once with ``seed=0``, keyed by
    their variant (``ablate.sweep``: the key the table looks them up by). Raises SweepError."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from ablate.compose import compose, hydra_initialized

    with hydra_initialized():  # the planner parses the sweep with Hydra's config loader
        cli = OverridesParser.create().parse_overrides(overrides)
        fixed = [o.input_line for o in cli if not o.is_sweep_override()]
        base = compose(fixed, hydra_config=True)

        def compose_job(job: list[str]) -> DictConfig:
            cfg = compose(job)
            return OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])

        planner = Planner(base, compose_job, arguments=list(overrides))
        plan = planner.plan()
        seed0 = {plan.variant(job): [o for o in job if override_key(o) != "seed"] + ["seed=0"]
                 for job in plan.definition}  # the first seed of each variant; the benchmark sets seed=0
        return variant_configs(planner, plan, list(seed0.values())), base.experiment.baseline


def bench_sweep(records: list[Record], rounds: int = 20) -> dict[str, Any]:
    """Interleaved benchmark of the variants of a (finished or partial) sweep, from its records
    (``ablate-table --bench``: the records it has loaded). In a sweep with a fine-tune stage, the
    pretraining's: the table's speed column is its (a fine-tune record shares its variant's name)."""
    groups = group_by_variant([r for r in records if r.stage != "finetune"])
    configs = {key: OmegaConf.create(runs[0].config) for key, runs in groups.items()}
    baseline = next((r.experiment["baseline"] for runs in groups.values() for r in runs
                     if r.experiment.get("baseline")), None)
    result = interleaved(configs, rounds=rounds)
    result["baseline"] = baseline
    result["round_spread"] = round_spread(result, baseline)
    for line in spread_lines(result, baseline):  # ablate-table prints the table to stdout
        print(f"[ablate-bench] {line}", file=sys.stderr)
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="ablate-bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. experiment=qkv_sharing")
    parser.add_argument("--rounds", type=int, default=20, help="timed rounds (each: every variant in turn)")
    parser.add_argument("--steps-per-round", type=int, default=5)
    parser.add_argument("--out", type=Path, help="write the figures as JSON (ablate-table reads bench.json)")
    args = parser.parse_args(argv)

    from hydra.errors import HydraException

    try:
        configs, baseline = experiment_configs(args.overrides)
    except (SweepError, HydraException) as error:  # an invalid sweep; an option or key that does not exist
        print(f"ablate-bench: {error}", file=sys.stderr)
        sys.exit(2)
    result = interleaved(configs, rounds=args.rounds, steps_per_round=args.steps_per_round,
                         progress=lambda s: print(f"\r[ablate-bench] {s}", end="", flush=True))
    print()
    result["baseline"] = baseline
    result["round_spread"] = spread = round_spread(result, baseline)
    # the ratio column is the table's statistic: the median over rounds of each round's ratio
    print(f"{'variant':40s} {'min':>10s} {'median':>10s} {'max':>10s}  ratio to {baseline or 'the first'} "
          "(median per round)")
    for key, v in result["variants"].items():
        s = v["tokens_per_s"]
        ratio = f"{spread[key]['median']:.3f}x" if key in spread else "-"
        print(f"{key:40s} {s['min']:10.0f} {s['median']:10.0f} {s['max']:10.0f}  {ratio}")
    print("\n".join(spread_lines(result, baseline)))
    if args.out:
        write_json_atomic(args.out, result)
        print(f"[ablate-bench] wrote {args.out}")


if __name__ == "__main__":
    main()
