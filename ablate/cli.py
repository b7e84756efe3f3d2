"""Console entry point ``ablate``: Hydra composes the config from ``conf/``, one job trains.

``ablate`` runs the defaults once; ``ablate -m key=a,b seed=0,1,2`` sweeps; ``ablate -m
experiment=NAME`` runs a named ablation from ``conf/experiment/`` (the repo's ``experiments/``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

from ablate.config import ConfigError

CONF_DIR = Path(__file__).resolve().parent / "conf"  # shipped inside the package


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


def main() -> None:
    _main()


if __name__ == "__main__":
    main()
