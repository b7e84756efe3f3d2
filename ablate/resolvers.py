"""The OmegaConf resolvers conf/config.yaml uses, registered in one place.

* ``${ablate_size:${model.size},KEY,DEFAULT}``: a ``model.size`` preset's d_model, n_heads or
  n_layers (``ablate.model.transformer.size_setting``);
* ``${ablate_job_dir:${hydra.overrides.task}}``: a job's directory name in its sweep
  (``ablate.jobdir.job_dir_resolver``; ``hydra.sweep.subdir``).

Every process that composes the config calls :func:`register_resolvers` first: ``ablate``
(``ablate.cli``, at import), ``ablate-bench``, and tests that compose with Hydra's API. joblib
workers and submitit jobs receive the resolvers with Hydra's state, which carries every resolver
registered in the launching process (pickled by reference to their functions here).
"""

from __future__ import annotations

from omegaconf import OmegaConf

from ablate.jobdir import job_dir_resolver
from ablate.model.transformer import size_setting

RESOLVERS = {"ablate_size": size_setting, "ablate_job_dir": job_dir_resolver}


def register_resolvers() -> None:
    """Register every resolver of the config; calling it again does nothing."""
    for name, function in RESOLVERS.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, function)
