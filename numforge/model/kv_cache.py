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

    A layer with a sliding window of ``W`` keys (``config.layer_window``) keeps a ring buffer of
    ``W`` positions instead (memory ``∝ W``, not ``T_max``): position ``p`` lives in slot ``p mod W``.
    A query at position ``p`` sees keys ``p - W < j <= p``, so new queries from position ``length`` on
    need the ``W - 1`` latest cached positions (fewer at the start) and the new ones; ``extend`` returns
    those in order, and the kernel's bottom-right alignment places them (``ops/scores.py``). Example,
    W = 3 after 7 positions: slots hold positions 6, 4, 5; one new token at position 7 reads 5, 6, 7.
    """

    def __init__(self, xp, batch_size: int, config, dtype, max_len: int | None = None):
        max_len = config.max_seq_len if max_len is None else max_len
        self.windows = [config.layer_window(layer) for layer in range(config.num_layers)]  # W or None per layer
        held = config.keys_seen(max_len)  # positions each layer keeps: min(W, max_len) or max_len
        shapes = [(batch_size, config.num_kv_heads, n, config.head_dim) for n in held]
        self.keys = [xp.zeros(shape, dtype=dtype) for shape in shapes]
        self.values = [xp.zeros(shape, dtype=dtype) for shape in shapes]
        self.xp = xp
        self.batch_size = batch_size
        self.max_seq_len = max_len
        self.length = 0

    def extend(self, layer: int, k, v):
        """Write ``k, v (B,H_kv,T_new,D)`` after the cached positions; return the keys and values the new queries
        may see, in order: all ``(B,H_kv,length+T_new,D)``, or on a windowed layer the ``W - 1`` latest cached
        ones (fewer while ``length < W - 1``) and the new ones."""
        stop = self.length + k.shape[2]
        window = self.windows[layer]
        if window is None:
            self.keys[layer][:, :, self.length : stop] = k
            self.values[layer][:, :, self.length : stop] = v
            return self.keys[layer][:, :, :stop], self.values[layer][:, :, :stop]
        xp, slots = self.xp, self.keys[layer].shape[2]
        seen = xp.arange(max(0, self.length - (window - 1)), self.length) % slots  # the slots of the latest W - 1
        keys = xp.concatenate((self.keys[layer][:, :, seen], k), axis=2)  # (B,H_kv,seen + T_new,D), in order
        values = xp.concatenate((self.values[layer][:, :, seen], v), axis=2)
        kept = min(slots, k.shape[2])  # the newest positions [stop - kept, stop) overwrite the oldest
        written = xp.arange(stop - kept, stop) % slots
        self.keys[layer][:, :, written] = k[:, :, k.shape[2] - kept :]
        self.values[layer][:, :, written] = v[:, :, v.shape[2] - kept :]
        return keys, values

    def advance(self, num_new: int) -> None:
        self.length += num_new
