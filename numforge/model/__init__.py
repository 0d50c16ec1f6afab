"""The GPT: its config, its parameters, and its forward and backward passes.

``gpt.py`` holds the whole network (``GPT.forward`` and ``GPT.backward`` as
mirror images); ``blocks.py`` a transformer block; ``unembedding.py`` the loss
head; ``kv_cache.py`` the decoding cache; ``positions.py`` the fixed
sinusoidal table; ``config.py`` the validated shape and options.
"""

from .config import ATTENTION_KINDS, POSITION_KINDS, GPTConfig
from .gpt import GPT, IGNORE_INDEX, parameter_shapes
from .kv_cache import KVCache

__all__ = ["ATTENTION_KINDS", "GPT", "GPTConfig", "IGNORE_INDEX", "KVCache", "POSITION_KINDS", "parameter_shapes"]
