"""The model zoo: one registry per architecture choice, assembled by ``build_model``."""

from .attention import ATTENTIONS
from .ffn import FFNS
from .init import INITS
from .norms import NORMS, PLACEMENTS
from .positions import POSITIONS
from .transformer import Block, Transformer, build_model

__all__ = ["ATTENTIONS", "FFNS", "INITS", "NORMS", "PLACEMENTS", "POSITIONS",
           "Block", "Transformer", "build_model"]
