"""Console entry point ``ablate``: Hydra composes the config from ``conf/``, one job trains.

``ablate --list [--config-dir DIR]`` prints every option of every group instead. ``--redefine``
lets a multirun run in a sweep directory that holds another sweep definition.

``ablate`` runs the defaults once; ``ablate -m key=a,b seed=0,1,2`` sweeps; ``ablate -m
experiment=NAME`` runs a named ablation from ``conf/experiment/`` (the repo's ``experiments/``).
"""

from __future__ import annotations

import sys
from typing import Any

import hydra
from omegaconf import DictConfig

from ablate.config import ConfigError
from ablate.paths import CONF_DIR
from ablate.sweep import register_job_dir_resolver

register_job_dir_resolver()  # for hydra.sweep.subdir; joblib/submitit job processes get it with Hydra's state


@hydra.main(version_base=None, config_path=str(CONF_DIR), config_name="config")
def _main(cfg: DictConfig) -> Any:
    from ablate.run import Job, run_job

    try:
        record = run_job(cfg, Job.from_hydra())
    except ConfigError as error:
        print(f"ablate: {error}", file=sys.stderr)
        sys.exit(2)
    if record["status"] == "failed" and record["job"]["num"] is None:
        sys.exit(1)  # a single run that failed; in a sweep the others go on (the sweep exits 1 at the end)
    return record["metrics"].get("accuracy")


def _config_dirs(argv: list[str]) -> list[str]:
    """The values of Hydra's ``--config-dir``/``-cd`` flags in ``argv``."""
    dirs = []
    for i, arg in enumerate(argv):
        if arg in ("--config-dir", "-cd") and i + 1 < len(argv):
            dirs.append(argv[i + 1])
        elif arg.startswith("--config-dir="):
            dirs.append(arg.split("=", 1)[1])
    return dirs


def main() -> None:
    argv = sys.argv[1:]
    if "--redefine" in argv:  # run another sweep definition in a directory that holds one
        import os

        from ablate.sweep import REDEFINE_ENV

        os.environ[REDEFINE_ENV] = "1"
        sys.argv = [sys.argv[0], *(a for a in argv if a != "--redefine")]
    if "--list" in argv:  # every option of every group, built-in and from --config-dir
        from ablate.catalog import render

        print(render(_config_dirs(argv)))
        return
    _main()


if __name__ == "__main__":
    main()
