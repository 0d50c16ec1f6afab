"""Operations: a ``*_forward`` returning ``(y, cache)`` and a ``*_backward`` returning the gradients
in the order of the forward's array arguments.

The caches are ``NamedTuple``s, and their field names are part of the op contract: the model's backward
reads them, and so do the study tools (``numforge.study``: trace, attention maps, the backward stage by
stage, the logit lens, the inspector page), which show what a cache holds, by name, never recomputing it:
``AttentionCache.probs``, ``FlashAttentionCache.q, .k, .lse, .scale`` (the tiled weights are rebuilt as
``exp(S - lse)``), ``LayerNormCache.x``, ``LinearCache.x``, the activations' inputs, ... Renaming or
repurposing a field is a change of the public interface, made together with its readers (the study
tests fail otherwise).

Every op file is also an exercise (``numforge gradcheck --write-exercise``, ``gradcheck/exercise.py``)
as soon as a gradient-check case names its backward; the exercise removes the backward, the helpers
only it uses, its docstring, and every paragraph or section of the module docstring that begins with
"Backward": that is where a module docstring states the backward's formulas.
"""
