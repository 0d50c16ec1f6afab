"""Operations, one file each: a ``*_forward`` returning ``(y, cache)`` and a ``*_backward``
returning the gradients in the order of the forward's array arguments."""
