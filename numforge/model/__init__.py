"""The GPT: its config, its parameters, and its forward and backward passes.

``gpt.py`` holds the whole network (``GPT.forward`` and ``GPT.backward`` as
mirror images); ``blocks.py`` a transformer block, of ``attention_branch.py``
and ``mlp_branch.py``; ``layers.py`` the norm and linear layers they call by
parameter name; ``unembedding.py`` the loss head; ``kv_cache.py`` the decoding
cache; ``positions.py`` the position schemes (``POSITIONS``); ``config.py``
the validated shape and options.
"""

from .config import ATTENTION_KINDS, GPTConfig
from .gpt import GPT, IGNORE_INDEX, parameter_shapes
from .kv_cache import KVCache
from .positions import POSITIONS

__all__ = ["ATTENTION_KINDS", "GPT", "GPTConfig", "IGNORE_INDEX", "KVCache", "POSITIONS", "parameter_shapes"]
