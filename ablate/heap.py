"""What ablate's processes do with Python's cyclic garbage collector, at start-up and at exit.

torch, Lightning and their imports leave ~680k objects that live as long as the process. Each full
collection walks all of them again (~0.3 s here), and the collector runs one about every time the
objects alive have grown by a quarter: ~8 while they are imported, more while a job runs. A job
process started cold (a joblib worker, a submitit or SLURM job, a DDP rank, ``ablate`` itself)
spent 1.5-2.5 of its 7-11 CPU-seconds in the collector, most of it re-walking those objects.

* :func:`imports_untraced`: the heavy imports run with the collector paused, then one collection
  and :func:`gc.freeze`: what they left alive is never walked again, and their garbage (~12k
  objects, ~8 MB) is freed;
* :func:`quick_teardown`: at exit, the same once more, so the interpreter's teardown does not walk
  everything a job made several times over.

Frozen objects are still freed when their last reference goes; only a cycle among them would
outlive its use. Both leave the collector as they found it where the caller has turned it off.
"""

from __future__ import annotations

import gc
import sys
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def imports_untraced() -> Iterator[None]:
    """The block's imports without the cyclic collector; then, if the block imported anything, one
    collection and :func:`gc.freeze`. Inside another such block, or with the collector off, it does
    nothing of its own."""
    if not gc.isenabled():
        yield
        return
    modules = len(sys.modules)
    gc.disable()
    try:
        yield
    finally:
        if len(sys.modules) != modules:
            gc.collect()
            gc.freeze()
        gc.enable()


def quick_teardown() -> None:
    """At exit: collect the garbage once (its finalizers run, as the interpreter's teardown would
    run them), then freeze every live object out of the cyclic collector. The teardown that follows
    the atexit hooks collects several times over all the objects torch, Lightning and Hydra made
    (~400k): about 1.5 CPU-seconds per process, spent before the process's resources (a SLURM job's
    CPUs, a joblib worker's core, the terminal) are free. Frozen, they are skipped; the operating
    system takes the memory back."""
    gc.collect()
    gc.freeze()
