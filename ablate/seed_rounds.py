"""A ``seed=auto`` sweep's rounds: which jobs each round runs, and what is said of them.

The planner lays out every job up to the cap (``stats.max_seeds``) as the sweep's definition and
launches the first round (seeds ``0 .. stats.min_seeds-1``) for every row; after each round the
sweeper decides each comparison on the records (``ablate.report.round_state``) and launches the next
round's seeds (:func:`round_jobs`) for the rows still undecided and their baselines only. ``--plan``
lists the later rounds' jobs as ones that run only if needed, and says how many seeds the
comparisons need for the power asked (``ablate.power``).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from ablate.sweep import Rounds, SweepPlan, job_value


def round_jobs(plan: SweepPlan, jobs: Iterable[list[str]], round_number: int) -> list[list[str]]:
    """The jobs of ``jobs`` whose seed is one round ``round_number`` (1-based) runs."""
    return [job for job in jobs if seed_round(plan.rounds, job) == round_number]


def seed_round(rounds: Rounds, job: list[str]) -> int:
    """The round (1-based) that runs ``job``."""
    return rounds.round_of(int(job_value(job, "seed")))


def points(value: float | None) -> str:
    """An accuracy difference (a fraction) in signed points: ``+1.2``."""
    return "?" if value is None else f"{100 * value:+.1f}"


def verdict_text(verdict: Any, mde: float) -> str:
    """One comparison's verdict in words: ``different at 5 seeds (+3.1 [+1.0, +5.2])``."""
    interval = (f" ({points(verdict.delta)} [{points(verdict.ci_low)}, {points(verdict.ci_high)}])"
                if verdict.ci_low is not None else "")
    if verdict.verdict == "equivalent":
        return f"equivalent within ±{mde:g} at {verdict.n} seeds{interval}"
    if verdict.verdict == "different":
        return f"different at {verdict.n} seeds{interval}"
    return f"undecided {'at the cap, ' if verdict.at_cap else 'at '}{verdict.n} seeds{interval}"


def round_line(rounds: Rounds, verdicts: Mapping[str, Any]) -> str:
    """What the sweep says after a round: each comparison's verdict, in accuracy points."""
    counts = {kind: sum(v.verdict == kind for v in verdicts.values()) for kind in ("different", "equivalent", "undecided")}
    head = (f"[ablate] after round {rounds.run} of at most {len(rounds.looks())}: {counts['different']} different, "
            f"{counts['equivalent']} equivalent within ±{rounds.mde:g} points, {counts['undecided']} undecided")
    return head + "".join(f"\n[ablate]   {variant or 'defaults'}: {verdict_text(v, rounds.mde)}"
                          for variant, v in verdicts.items())
