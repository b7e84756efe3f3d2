"""A sweep's pace against its first estimate: one line when the steps run far slower (or faster).

A sweep's first line estimates its time from step times measured here earlier (``ablate.preview``).
The machine may be busier now than then. So the sweep leaves that estimate in its directory
(:class:`SweepEstimate`, ``estimate.json``: when, the total, and each kind of job's seconds per step,
by its step-time cache key), and each job compares the steps it actually takes with it
(``ablate.meters.PaceCheck``, through :func:`pace_line`): once a job has :data:`MIN_STEPS` timed steps, and
every :data:`CHECK_EVERY` steps after, the median of its last :data:`MIN_STEPS` step times against its
estimate. Beyond :data:`DEPARTURE` times either way, one line says so, with the job's and the
sweep's remaining time re-estimated at this pace. Step times only: time a job spent waiting (a
SLURM queue, a launcher's other jobs) is never "slower". The line is printed once for a sweep's
pace: a later job prints again only where its pace departs another :data:`DEPARTURE` times from
the one last said (``said`` in the file).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ablate.console import duration_text
from ablate.results import write_json_atomic

ESTIMATE_FILE = "estimate.json"
DEPARTURE = 1.5   # a pace this many times slower (or faster) than estimated is said
MIN_STEPS = 20    # timed steps before a job judges its pace: the median of its last MIN_STEPS
CHECK_EVERY = 10  # steps between two looks


@dataclass
class SweepEstimate:
    """The estimate a sweep started with: ``at`` (when), ``seconds`` (the jobs still to run then,
    ``jobs`` of them, set-up included), and ``step_s`` (step-time cache key -> seconds per step);
    ``said``: the pace (actual over estimated step time) a job last reported, None before any, and
    ``said_line`` its line (the sweep's launching process prints it where jobs log to files: submitit)."""

    at: float
    seconds: float
    jobs: int
    step_s: dict[str, float] = field(default_factory=dict)
    said: float | None = None
    said_line: str | None = None

    def write(self, sweep_dir: str | Path) -> None:
        write_json_atomic(Path(sweep_dir) / ESTIMATE_FILE, asdict(self))

    @classmethod
    def clear(cls, sweep_dir: str | Path) -> None:
        """No estimate for this launch: an earlier launch's is removed."""
        (Path(sweep_dir) / ESTIMATE_FILE).unlink(missing_ok=True)

    @classmethod
    def read(cls, sweep_dir: str | Path | None) -> "SweepEstimate | None":
        """The sweep's estimate; None where it has none (no earlier step times) or it cannot be read."""
        if sweep_dir is None:
            return None
        try:
            data = json.loads((Path(sweep_dir) / ESTIMATE_FILE).read_text())
            return cls(at=float(data["at"]), seconds=float(data["seconds"]), jobs=int(data["jobs"]),
                       step_s={str(k): float(v) for k, v in data["step_s"].items()},
                       said=None if data.get("said") is None else float(data["said"]),
                       said_line=None if data.get("said_line") is None else str(data["said_line"]))
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return None


def departure(estimate: SweepEstimate, expected_s: float, step_times: list[float]) -> float | None:
    """The pace (the median of the last :data:`MIN_STEPS` step times over ``expected_s``) where it
    departs from 1 by more than :data:`DEPARTURE` times, and from the pace last said
    (``estimate.said``) by as much; else None."""
    if len(step_times) < MIN_STEPS or expected_s <= 0:
        return None
    pace = statistics.median(step_times[-MIN_STEPS:]) / expected_s
    if 1 / DEPARTURE <= pace <= DEPARTURE:
        return None
    if estimate.said is not None and 1 / DEPARTURE <= pace / estimate.said <= DEPARTURE:
        return None  # this pace was said already
    return pace


def pace_line(estimate: SweepEstimate, expected_s: float, pace: float, steps_left: int, jobs_left: int) -> str:
    """The line a job prints at ``pace`` (:func:`departure`): its steps against the estimate, and its
    own and the sweep's remaining time at this pace. ``jobs_left``: the sweep's unfinished jobs, this
    one included."""
    word, then = ("slower", "busier") if pace > 1 else ("faster", "quieter")
    actual = pace * expected_s
    sweep = pace * estimate.seconds * min(jobs_left, estimate.jobs) / max(1, estimate.jobs)
    return (f"[ablate] {word} than estimated: this job's steps take {actual:.3g} s, {pace:.1f}x the "
            f"{expected_s:.3g} s estimated from earlier measurements here (the machine is {then} "
            f"than then); at this pace this job needs about {duration_text(actual * steps_left)} more and "
            f"the sweep's {jobs_left} unfinished job(s) about {duration_text(sweep)}, against "
            f"{duration_text(estimate.seconds)} estimated at its start")


def jobs_left(sweep_dir: Path, estimate: SweepEstimate) -> int:
    """The sweep's jobs not finished yet, this one included: those to run at its start, less those
    whose record has ended (ok, failed, diverged, interrupted) since."""
    from ablate.record import RESULT_FILE, read_record

    ended = 0
    for path in sweep_dir.glob(f"*/{RESULT_FILE}"):
        try:
            since = path.stat().st_mtime >= estimate.at
        except OSError:
            continue
        record = read_record(path.parent) if since else None
        ended += record is not None and record.status != "running"
    return max(1, estimate.jobs - ended)


def remember_said(sweep_dir: Path, pace: float, line: str) -> None:
    """Note in the sweep's estimate the pace a job just reported and its line (later jobs say only
    another pace; under submitit the launching process prints the line)."""
    estimate = SweepEstimate.read(sweep_dir)
    if estimate is not None:
        estimate.said, estimate.said_line = pace, line
        try:
            estimate.write(sweep_dir)
        except OSError:
            pass  # only costs a repeated line
