"""What a job and a sweep say on the terminal: a finished job's one line, durations.

Shared by the job as it ends (``ablate.run``), the sweep that prints the lines of jobs whose
output goes to a log file (``ablate.sweeper``), ``--plan``'s estimate (``ablate.preview``) and the
sweep's end (``ablate.callbacks``).
"""

from __future__ import annotations

from pathlib import Path

from ablate.record import RESULT_FILE, Record


def print_job_line(record: Record, name: str) -> None:
    """The job's line on the terminal as it ends (:func:`job_line`). A stopped job prints none: the
    command or the sweep says in one line that it stopped and how to resume."""
    from rich.console import Console

    if record.status != "interrupted":
        Console(highlight=False, soft_wrap=True).print(job_line(record, name))


def job_line(record: Record, name: str) -> str:
    """One line (Rich markup) for a finished job: its name, status and headline metric (or error),
    speed, memory, size, how long it took and where its record is. What a job prints as it ends,
    and what a sweep prints for a job whose output goes to a log file (``ablate.sweeper``)."""
    from rich.markup import escape

    m, status = record.metrics, record.status
    took = [duration_text(m.wall_time_s)] if m.wall_time_s is not None else []
    if status != "ok":
        return (f"[bold red]{escape(name)}: {escape(str(status))}[/] - {escape(str(record.error))}"
                + "".join(f"  ({t})" for t in took))
    parts = ["ok"] + [f"{m.metric}@{length} {e.accuracy:.4f}" for length, e in m.eval.items()]
    parts += [f"loss {m.loss:.4f}", f"{m.tokens_per_s:,.0f} tokens/s"]
    if m.peak_memory_bytes is not None:
        parts.append(f"peak memory {m.peak_memory_bytes / 2**20:.2f} MiB")
    parts += [f"params {m.params:,}", *took]
    if m.early_stopped:
        parts.append(f"stopped early at step {m.early_stopped.get('step')}")
    where = Path(record.job.dir or ".") / RESULT_FILE
    return f"[bold green]{escape(name)}[/]: {escape('  '.join(parts))}  ({escape(str(where))})"


def describe_error(error: BaseException) -> str:
    """An error in a few words: its type and the first line of its message, at most 200 characters."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    text = text if len(text) <= 200 else text[:197] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def duration_text(seconds: float) -> str:
    """``12.3 s``, ``4 min 05 s``, ``2 h 03 min``."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, s = divmod(int(round(seconds)), 60)
    hours, m = divmod(minutes, 60)
    return f"{hours} h {m:02d} min" if hours else f"{m} min {s:02d} s"
