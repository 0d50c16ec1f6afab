"""Operations: a ``*_forward`` returning ``(y, cache)`` and a ``*_backward`` returning the gradients
in the order of the forward's array arguments.

The caches are ``NamedTuple``s, and their field names are part of the op contract: the model's backward
reads them, and so do the study tools (``numforge trace`` and the like show what a cache holds, by name).
Renaming a field is a change of the public interface.
"""
