"""``KVCache``: the keys and values already computed, per layer, so decoding a token costs one position."""

from __future__ import annotations


class KVCache:
    """Keys and values of the positions already processed, per layer, for fast decoding.

    ``keys[layer]`` and ``values[layer]`` are preallocated ``(B, H_kv, T_max, D)``, ``T_max`` the
    ``max_len`` asked for (at most, and by default, the model's ``max_seq_len``)
    (``H_kv = num_kv_heads``: with grouped-query attention, ``H_kv / H`` of full
    attention's size); positions ``[0, length)`` are filled. Keys are cached as the
    attention reads them: rotated at their absolute positions when the position
    scheme rotates, so a decoding step rotates only its new key. ``GPT.logits(new_ids, kv_cache=kv)``
    extends every layer, then advances ``length``.
    """

    def __init__(self, xp, batch_size: int, config, dtype, max_len: int | None = None):
        max_len = config.max_seq_len if max_len is None else max_len
        shape = (batch_size, config.num_kv_heads, max_len, config.head_dim)
        self.keys = [xp.zeros(shape, dtype=dtype) for _ in range(config.num_layers)]
        self.values = [xp.zeros(shape, dtype=dtype) for _ in range(config.num_layers)]
        self.batch_size = batch_size
        self.max_seq_len = max_len
        self.length = 0

    def extend(self, layer: int, k, v):
        """Write ``k, v (B,H_kv,T_new,D)`` after the cached positions; return all ``(B,H_kv,length+T_new,D)``."""
        stop = self.length + k.shape[2]
        self.keys[layer][:, :, self.length : stop] = k
        self.values[layer][:, :, self.length : stop] = v
        return self.keys[layer][:, :, :stop], self.values[layer][:, :, :stop]

    def advance(self, num_new: int) -> None:
        self.length += num_new
