"""Stopping a job or a sweep on request: Ctrl-C and the stop signals, installed and restored one way.

A stop asks, it does not kill: a training job stops at the end of its step with a checkpoint, so
its record says ``interrupted`` and a relaunch resumes it (``ablate.run``); the process that
launched a local parallel sweep passes the stop on to its running jobs (``ablate.sweeper``).
Every handler here is installed by :class:`SignalHandlers`, which restores what was there before
and keeps a signal the process ignores ignored (``nohup`` ignores SIGHUP; ``cmd &`` in a script
ignores SIGINT).

:class:`Preempted` lives here, not in ``ablate.lit``, so that a stop can be raised before
Lightning (seconds to import) is loaded.
"""

from __future__ import annotations

import signal
from typing import Any, Callable, Iterable

#: the signals that ask a job to stop: a scheduler (``scancel``, ``scontrol requeue``, preemption:
#: SIGTERM), a closed terminal (SIGHUP), SLURM's warning before a time-out and submitit's preemption
#: signal (SIGUSR1/SIGUSR2)
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2")
                     if hasattr(signal, name))


class Preempted(RuntimeError):
    """The job was asked to stop (SIGTERM, SIGHUP, or SLURM's SIGUSR1/SIGUSR2 before a time-out or
    preemption): at a step boundary after saving a checkpoint (``saved``; ``ablate.lit.Checkpointer``),
    or during its set-up, before its first step, at once (nothing to save)."""

    def __init__(self, step: int, signum: int, saved: bool = True) -> None:
        where = f"at step {step}; checkpoint saved" if saved else "during set-up, before its first step"
        super().__init__(f"stopped by signal {signum} {where}")
        self.step, self.signum, self.saved = step, signum, saved


class SignalHandlers:
    """``handler`` for each of ``signals`` while the block runs, the previous handlers restored after
    it. A signal the process ignores stays ignored; outside the main thread (where Python cannot
    install handlers) nothing is installed and the defaults stand."""

    def __init__(self, signals: Iterable[int], handler: Callable[[int, Any], None]) -> None:
        self.signals, self.handler = tuple(signals), handler
        self.previous: dict[int, Any] = {}  # signal -> the handler this one replaced

    def __enter__(self) -> "SignalHandlers":
        for signum in self.signals:
            try:
                if signal.getsignal(signum) == signal.SIG_IGN:
                    continue
                self.previous[signum] = signal.signal(signum, self.handler)
            except (ValueError, TypeError, OSError):  # not the main thread
                break
        return self

    def __exit__(self, *exc: Any) -> None:
        for signum, previous in self.previous.items():
            signal.signal(signum, previous)
        self.previous.clear()


class StopSignals:
    """The stop signals (:data:`STOP_SIGNALS`) during one job: during set-up the job stops at once
    (:class:`Preempted`, before the ``checkpointer`` exists too: from the start of set-up), during
    training at the end of its step with a checkpoint (``lit.Checkpointer.request_stop``); the record
    says ``interrupted``, and then the signal gets what it was sent for (:meth:`pass_on`): submitit's
    own handler requeues the job, otherwise the process exits. While :attr:`holding` (wandb starts)
    a signal is noted and acts at :meth:`act_on_held`; once :meth:`settle` is called (training is
    over, the record is being written) it is only noted (:attr:`received`)."""

    def __init__(self, checkpointer: Any = None) -> None:
        self.checkpointer = checkpointer
        self.settled = False
        self.holding = False
        self.received: int | None = None  # the first stop signal that came
        self._handlers = SignalHandlers(STOP_SIGNALS, self._handler)

    def _handler(self, signum: int, frame: Any) -> None:
        self.received = self.received or signum
        if not (self.settled or self.holding):
            self.request(signum)

    def request(self, signum: int) -> None:
        """Stop: at once before the first step (raising ``Preempted``), else at the step's end."""
        if self.checkpointer is None:  # Lightning not loaded yet: nothing to save
            raise Preempted(0, signum, saved=False)
        self.checkpointer.request_stop(signum)

    def act_on_held(self) -> None:
        if self.received is not None and not self.settled:
            self.request(self.received)

    def settle(self) -> None:
        self.settled = True

    def __enter__(self) -> "StopSignals":
        self._handlers.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._handlers.__exit__(*exc)

    def pass_on(self, signum: int) -> None:
        previous = self._handlers.previous.get(signum)
        if callable(previous) and getattr(previous, "__name__", "") != "bypass":
            previous(signum, None)  # e.g. submitit's checkpoint_and_try_requeue: requeues, exits
        raise SystemExit(128 + signum)


class InterruptWatch:
    """Ctrl-C (SIGINT) from the start of a job's set-up, so that the record says ``interrupted``
    rather than ``failed`` (a relaunch reruns the job; tables do not count it as a failure). The
    first Ctrl-C stops the job as a stop signal does (:meth:`StopSignals.request`): during set-up at
    once, during training at the end of its step with a checkpoint, so no exception is raised inside
    whatever library code the step is in (one raised inside a lock it holds can hang the shutdown);
    a second Ctrl-C raises KeyboardInterrupt at once. While the stop is holding (wandb starts) it is
    only noted, and acts when :meth:`act_on_held` is called; once the stop is settled (the record is
    being written) it is only noted: the job stops once its record is written. Holding and settling
    are the stop's (one state for both kinds of stop)."""

    def __init__(self, stop: StopSignals) -> None:
        self.stop = stop
        self.seen = False
        self._handlers = SignalHandlers((signal.SIGINT,), self._handler)

    def _handler(self, signum: int, frame: Any) -> None:
        first, self.seen = not self.seen, True
        if self.stop.settled or self.stop.holding:
            return
        if first:
            self.stop.request(signum)  # set-up: raises Preempted here; training: at the step's end
            return
        previous = self._handlers.previous.get(signal.SIGINT)
        if callable(previous):
            previous(signum, frame)
        raise KeyboardInterrupt

    def act_on_held(self) -> None:
        if self.seen and not self.stop.settled:
            self.stop.request(signal.SIGINT)

    def __enter__(self) -> "InterruptWatch":
        self._handlers.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._handlers.__exit__(*exc)
