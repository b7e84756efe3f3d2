"""A tuned sweep's runs (``sweep.json``'s ``tune`` block): which of its records a table summarises.

A tuned sweep trains every variant at every lr of a grid with the tuning seeds, then each variant
at its chosen lr with the sweep's seeds. Its table shows each variant's runs at its chosen lr, with
that lr, and a second Δ: the same comparison between the runs at the shared default lr (the tuning
runs there), which is what an untuned sweep would have shown. A variant whose lr is not chosen yet
shows its default-lr runs.
"""

from __future__ import annotations

import math
from typing import Any

from ablate.record import Record
from ablate.report.record_fields import lr_of, seed_of
from ablate.report.rows import Row, accuracy_by_seed
from ablate.report.stats import finite
from ablate.sweep import Tuning, group_by_variant, job_variant


def final_runs(records: list[Record], swept: set[str], tune: Tuning | None) -> tuple[list[Record], list[Record]]:
    """The runs the rows summarise, and a tuned sweep's runs at the shared default lr (for its
    second Δ). Untuned: every record, and none at the default lr."""
    if tune is None:
        return records, []
    final, at_default = _chosen_lr_runs(records, swept, tune)
    if not final:
        raise ValueError("no records at the chosen (or default) lr of this tuned sweep")
    return final, at_default


def _chosen_lr_runs(records: list[Record], swept: set[str], tune: Tuning) -> tuple[list[Record], list[Record]]:
    """A tuned sweep's records -> (the final runs: each variant's at its chosen lr and the sweep's
    seeds; the runs at the shared default lr and the tuning seeds)."""
    chosen, default = tune.chosen, tune.default_lr
    final_seeds = tune.final_seeds  # when the sweep records them; else every seed at the chosen lr
    tuning_seeds = tune.seeds or None
    final, at_default = [], []
    for r in records:
        lr, seed = lr_of(r), seed_of(r)
        key = job_variant(r.overrides, swept)
        if key in chosen:
            if _same_lr(lr, chosen[key]) and (not isinstance(final_seeds, list) or seed in final_seeds):
                final.append(r)
        elif _same_lr(lr, default):  # tuning not finished for this variant: its default-lr runs
            final.append(r)
        if _same_lr(lr, default) and (not isinstance(tuning_seeds, list) or seed in tuning_seeds):
            at_default.append(r)
    return final, at_default


def _same_lr(a: float | None, b: Any) -> bool:
    try:
        return a is not None and math.isclose(a, float(b), rel_tol=1e-6)
    except (TypeError, ValueError):
        return False


def add_default_lr_runs(flat: list[Row], at_default: list[Record], swept: set[str], tune: Tuning) -> None:
    """A tuned sweep's rows: each one's chosen lr (None until chosen) and its ok runs' accuracies
    at the shared default lr, which the second Δ compares."""
    chosen = tune.chosen
    default_runs = group_by_variant(at_default, swept) if at_default else {}
    for row in flat:
        ok = [r for r in default_runs.get(row.key, []) if r.ok]
        row.lr = float(chosen[row.key]) if row.key in chosen else None
        row.by_seed_default = accuracy_by_seed(ok)
        row.accuracies_default = finite(r.metrics.accuracy for r in ok)


def lr_transfer(tune: Tuning | None, size_keys: tuple[str, ...]) -> list[tuple[str, list[tuple[str, float]], int]]:
    """How far each variant's chosen lr moves across model sizes, for a tuned sweep that sweeps a
    size key (``model.d_model``, ``model.size``, ...): per group of variants that differ only in their
    size, ``(the group's other settings, [(size, chosen lr)] from small to large, the spread in grid
    steps)``, the spread being the distance between the largest and the smallest chosen lr's places
    on the grid (0: the same lr at every size). Empty without tuning or without a size key."""
    from ablate.sweep import SIZE_PRESETS, split_override_string, variant_key

    if tune is None or not tune.chosen:
        return []
    grid = sorted(tune.lr)
    groups: dict[str, list[tuple[str, float]]] = {}
    for variant, lr in tune.chosen.items():
        overrides = split_override_string(variant) if variant else {}
        size = {k: v for k, v in overrides.items() if k in size_keys}
        if not size:
            continue
        rest = variant_key({k: v for k, v in overrides.items() if k not in size_keys})
        groups.setdefault(rest, []).append((",".join(f"{k}={v}" for k, v in size.items()), float(lr)))

    def order(item: tuple[str, float]) -> tuple:
        values = [v.split("=", 1)[1] for v in item[0].split(",")]
        return tuple((SIZE_PRESETS.index(v), "") if v in SIZE_PRESETS else (float(v), "") if _is_number(v) else (math.inf, v)
                     for v in values)

    out = []
    for rest, chosen in groups.items():
        if len(chosen) < 2:
            continue
        chosen.sort(key=order)
        places = [min(range(len(grid)), key=lambda i: abs(math.log(grid[i]) - math.log(lr))) for _, lr in chosen]
        out.append((rest, chosen, max(places) - min(places)))
    return out


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def best_finetune_lr(fine: list[Record], swept: set[str], task_of) -> tuple[list[Record], dict[tuple[str, str], float]]:
    """A fine-tune stage with ``finetune.tune_lr`` fine-tunes each task at every rate of a grid: per
    variant and task, the fine-tunes at the rate whose validation score (``metrics.val``'s headline
    metric, higher is better, the mean over the variant's fine-tunes there) is best; the smaller rate
    on a tie. Returns those records (a task fine-tuned at one rate keeps its records) and the chosen
    rate per ``(variant key, task)`` where there was a choice."""
    groups: dict[tuple[str, str], dict[float, list[Record]]] = {}
    for r in fine:
        key = (job_variant(r.overrides, swept), task_of(r))
        groups.setdefault(key, {}).setdefault(lr_of(r), []).append(r)
    kept: list[Record] = []
    chosen: dict[tuple[str, str], float] = {}
    for key, by_lr in groups.items():
        if len(by_lr) == 1:
            kept += next(iter(by_lr.values()))
            continue

        def score(lr: float) -> float:
            found = finite(r.metrics.val.accuracy for r in by_lr[lr] if r.status == "ok" and r.metrics.val)
            return sum(found) / len(found) if found else -math.inf

        best = max(sorted(by_lr, key=lambda lr: (lr is None, lr or 0.0)), key=score)
        chosen[key] = best
        kept += by_lr[best]
    return kept, chosen
