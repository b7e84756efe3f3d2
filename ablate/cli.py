"""Console entry point ``ablate``: Hydra composes the config from ``conf/``, one job trains.

``ablate`` runs the defaults once; ``ablate -m key=a,b seed=0,1,2`` sweeps; ``ablate -m
experiment=NAME`` runs a named ablation from ``conf/experiment/`` (the repo's ``experiments/``).

Four flags of ablate's own (``ablate --help`` lists them; :data:`FLAGS`), each a shorthand for
config keys, which tab completion offers too:

* ``--list [--config-dir DIR]``: every option of every group, and runs nothing;
* ``--plan``: ``-m hydra.sweeper.plan=true``: what a sweep would run (jobs, what is done already,
  an estimated time), and runs nothing;
* ``--redefine``: ``hydra.sweeper.redefine=true``: a multirun may run in a sweep directory that
  holds another sweep definition;
* ``--smoke``: ``smoke=true seed=0``: any run or sweep as a smoke test (``settings.SMOKE``).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from dataclasses import asdict
from typing import Any

import hydra
from omegaconf import DictConfig

from ablate.config import ConfigError
from ablate.paths import CONF_DIR
from ablate.resolvers import register_resolvers
from ablate.settings import optimized_value

register_resolvers()  # joblib/submitit job processes get them with Hydra's state

#: ablate's own flags -> what each stands for (``ablate --help`` prints this)
FLAGS = {
    "--list": "every option of every group (with yours from --config-dir), with the paper each cites; runs nothing",
    "--plan": "= -m hydra.sweeper.plan=true: every job of the sweep, what is done already, an estimated time; "
              "runs nothing",
    "--redefine": "= hydra.sweeper.redefine=true: run this sweep in a hydra.sweep.dir that holds another one",
    "--smoke": "= smoke=true seed=0: any run or sweep as a quick smoke test (few steps, small held-out set)",
}


_started: list[bool] = []  # the task function ran: Hydra composed the config


@hydra.main(version_base=None, config_path=str(CONF_DIR), config_name="config")
def _main(cfg: DictConfig) -> Any:
    from ablate.job import Job
    from ablate.run import run_job

    _started.append(True)
    job = Job.from_hydra()
    try:
        record = run_job(cfg, job)
    except ConfigError as error:
        print(f"ablate: {error}", file=sys.stderr)
        sys.exit(2)
    finally:
        job.release()  # its record is written: the next job may start while this process exits
    if record.job.num is None and record.status == "running":
        print(f"ablate: {job.dir} is being trained by another process; nothing was done here", file=sys.stderr)
        sys.exit(2)
    if record.status == "failed" and record.job.num is None:
        sys.exit(1)  # a single run that failed; in a sweep the others go on (the sweep exits 1 at the end)
    return optimized_value(asdict(record.metrics), str(cfg.optimized_metric))  # what a sweeper optimises


def _config_dirs(argv: list[str]) -> list[str]:
    """The values of Hydra's ``--config-dir``/``-cd`` flags in ``argv``."""
    dirs = []
    for i, arg in enumerate(argv):
        if arg in ("--config-dir", "-cd") and i + 1 < len(argv):
            dirs.append(argv[i + 1])
        elif arg.startswith("--config-dir="):
            dirs.append(arg.split("=", 1)[1])
    return dirs


def expand_flags(argv: list[str]) -> list[str]:
    """The command line with ablate's flags (``FLAGS``) replaced by the config keys they stand for.
    The keys join the command line's own overrides (Hydra's parser takes its overrides in one run
    of positional arguments)."""
    multirun = bool({"-m", "--multirun"} & set(argv))
    rest = [a for a in argv if a not in ("--plan", "--redefine", "--smoke")]
    extra = []
    if "--plan" in argv:
        extra.append("hydra.sweeper.plan=true")
        if not multirun:  # a single run is planned as a sweep of one job
            rest, multirun = ["-m", *rest], True
    if "--redefine" in argv:
        extra.append("hydra.sweeper.redefine=true")
    if "--smoke" in argv:  # one seed: the command line's and an experiment's seed sweep become seed 0
        rest = [("seed=0" if a.startswith("seed=") else a) for a in rest]
        extra += ["smoke=true"] + (["++hydra.sweeper.params.seed=0"] if multirun else [])
    first = next((i for i, a in enumerate(rest) if "=" in a and not a.startswith("-")
                  and (i == 0 or not rest[i - 1].startswith("-") or rest[i - 1] in ("-m", "--multirun"))), len(rest))
    return rest[:first] + extra + rest[first:]


def main() -> None:
    argv = sys.argv[1:]
    if "--list" in argv:  # every option of every group, built-in and from --config-dir
        from ablate.catalog import render

        print(render(_config_dirs(argv)))
        return
    argv = expand_flags(argv)
    sys.argv = [sys.argv[0], *argv]
    # A log line that cannot be written (a full disk under Hydra's <job>/ablate.log) is dropped, not
    # printed as a traceback per line: the job's own error is named on the terminal and in its record.
    logging.raiseExceptions = False
    try:
        _main()
    except KeyboardInterrupt:  # Ctrl-C: the job's record says interrupted; no traceback
        print("ablate: interrupted (Ctrl-C); relaunch the same command to resume", file=sys.stderr)
        sys.exit(130)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else None
        if _started and code and code - 128 in set(signal.Signals) and not {"-m", "--multirun"} & set(argv):
            # a single run stopped by a signal (a sweep says so itself): its record says interrupted
            print(f"ablate: stopped by {signal.Signals(code - 128).name}; relaunch the same command to resume",
                  file=sys.stderr)
        if stop.code == 1 and not _started:  # Hydra could not compose the config: say which key
            problem = _unknown_key(argv)
            if problem:
                print(f"ablate: {problem}", file=sys.stderr)
                sys.exit(2)
            if _missing_option(argv):  # e.g. experiment=qkv_shraing: Hydra has named the valid options
                sys.exit(2)
        raise


def _overrides(argv: list[str]) -> list[str]:
    """The config overrides of a command line (flags and their values left out); a sweep's
    values reduced to its first (enough to compose and find an unknown key)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    skip_next, out = False, []
    for arg in argv:
        if skip_next:
            skip_next = False
        elif arg in ("--config-dir", "-cd", "--config-name", "-cn", "--config-path", "-cp"):
            skip_next = True
        elif not arg.startswith("-") and "=" in arg:
            out.append(arg)
    parsed = OverridesParser.create().parse_overrides(out)
    return [f"{o.get_key_element()}={next(iter(o.sweep_string_iterator()))}" if o.is_sweep_override()
            else o.input_line for o in parsed]


def _search_path(argv: list[str]) -> list[str]:
    """The override that adds the command line's ``--config-dir`` directories to Hydra's search path."""
    dirs = _config_dirs(argv)
    return [f"hydra.searchpath=[{','.join('file://' + os.path.abspath(d) for d in dirs)}]"] if dirs else []


def _missing_option(argv: list[str]) -> bool:
    """Whether the command line chooses a config group option that does not exist."""
    from hydra.errors import MissingConfigException

    from ablate.compose import compose

    try:
        compose(_search_path(argv) + _overrides(argv))
    except MissingConfigException:
        return True
    except Exception:  # noqa: BLE001 - another composition error: Hydra's message and exit code stand
        return False
    return False


def _unknown_key(argv: list[str]) -> str | None:
    """When overrides set keys the config does not have (``model.foo=1``): each such key and the
    valid keys of its node; None for any other composition error (Hydra's message stands)."""
    import re

    from omegaconf import OmegaConf

    from ablate.compose import compose

    unknown: dict[str, str] = {}
    try:
        overrides = _overrides(argv)
        search = _search_path(argv)
        for _ in range(len(overrides) + 1):  # drop one unknown key at a time until it composes
            rest = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") not in unknown]
            try:
                cfg = compose(search + rest)
                break
            except Exception as error:  # noqa: BLE001 - find the key Hydra could not override
                match = re.search(r"Could not override '([^']+)'", str(error))
                if not match:
                    return None
                key = match.group(1)
                unknown[key] = next(o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0] == key)
        else:
            return None
    except Exception:  # noqa: BLE001 - no better message than Hydra's
        return None
    lines = []
    for key, value in unknown.items():
        if key in ("hydra.sweeper.plan", "hydra.sweeper.redefine"):
            flag = "--" + key.rsplit(".", 1)[1]
            lines.append(f"{flag} ({key}) needs ablate's sweeper, hydra/sweeper=ablate (the default); "
                         f"this sweep names another")
            continue
        parent = key.rpartition(".")[0]
        node = OmegaConf.select(cfg, parent) if parent else cfg
        valid = ", ".join(str(k) for k in node) if OmegaConf.is_dict(node) else "(none)"
        lines.append(f"{key}={value} is not a key of the config; valid keys "
                     f"{f'of {parent}' if parent else 'at the top level'}: {valid} "
                     f"(to add a new key anyway: +{key}={value})")
    return "\n  ".join(lines) or None
