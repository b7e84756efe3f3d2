"""The model zoo: one file per architecture concern, assembled by ``build_model``.

Each option of a group names its class (or, for ``init``, its function) by ``_target_`` in its
YAML; each concern's file holds the base class of its contract and a ``check`` of it.
"""

from .transformer import (MODEL_GROUPS, SIZES, Block, ModelSettings, Transformer, assemble, build_model, option,
                          parametrize_mup)

__all__ = ["MODEL_GROUPS", "SIZES", "Block", "ModelSettings", "Transformer", "assemble", "build_model", "option",
           "parametrize_mup"]
