"""The checks of ``BPETokenizer``'s arguments: each bad value is a ValueError or TypeError naming it."""

from __future__ import annotations

from ..checks import is_int


def check_byte_ids(byte_ids) -> list[int | None]:
    """The id of each byte value: identity by default, else 256 entries, distinct ints >= 0 or None for a byte
    the vocabulary has no token for (StarCoder2's lacks 0xC0, 0xC1, 0xF1 and 0xF5..0xFF)."""
    if byte_ids is None:
        return list(range(256))
    byte_ids = list(byte_ids)
    present = [b for b in byte_ids if b is not None]
    if len(byte_ids) != 256 or not all(is_int(b) and b >= 0 for b in present) or len(set(present)) != len(present):
        raise ValueError(
            "byte_ids must list 256 entries, distinct ints >= 0 or None for a byte without a token (the id of each "
            "byte value; a permutation of 0..255 in numforge's own layout)"
        )
    return byte_ids


def present(ids: list) -> list[int]:
    """``ids`` without the None of missing bytes."""
    return [token for token in ids if token is not None]


def check_merge_ids(merge_ids, num_merges: int, byte_ids: list[int]) -> list[int]:
    """The id each merge makes: by default the ids after the largest byte id (256 + i for 0..255).

    Several merges may make one token (files converted from tiktoken list every split of a
    token); their bytes are checked to agree in ``expand_tokens``.
    """
    if merge_ids is None:
        first = max(present(byte_ids), default=-1) + 1
        return list(range(first, first + num_merges))
    merge_ids = list(merge_ids)
    if len(merge_ids) != num_merges or not all(is_int(t) and t >= 0 for t in merge_ids):
        raise ValueError(f"merge_ids must list {num_merges} ints >= 0 (the id each merge makes), got {merge_ids!r}")
    bytes_ = set(byte_ids)
    for i, token in enumerate(merge_ids):
        if token in bytes_:
            raise ValueError(f"merge {i} makes id {token}, which a byte already has")
    return merge_ids


def check_merges(merges: list, byte_ids: list[int], merge_ids: list[int]) -> list[tuple[int, int]]:
    """Merges as a list of int pairs, no pair twice, each joining ids that a byte or some merge has.

    numforge's merges only join tokens made before them; a file converted from tiktoken (Llama 3's)
    lists a token's merges by the token's rank, so a merge may join a token that a later merge makes.
    """
    checked = []
    seen = set()
    known = set(byte_ids) | set(merge_ids)
    for i, pair in enumerate(merges):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2 or not all(map(is_int, pair)):
            raise ValueError(f"merge {i} must be a pair of ints, got {pair!r}")
        p, q = int(pair[0]), int(pair[1])
        if p not in known or q not in known:
            bad = p if p not in known else q
            raise ValueError(f"merge {i} is {(p, q)}, but {bad} is neither a byte's id nor made by any merge")
        if (p, q) in seen:
            raise ValueError(f"merge {i} repeats the pair {(p, q)}")
        seen.add((p, q))
        checked.append((p, q))
    return checked


def check_specials(special_tokens) -> tuple[str, ...]:
    """Special token names: a sequence of distinct non-empty strings."""
    if isinstance(special_tokens, str):
        raise TypeError(f"special_tokens must be a sequence of strings, got the string {special_tokens!r}")
    names = tuple(special_tokens)
    for name in names:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a special token must be a non-empty str, got {name!r}")
    if len(set(names)) != len(names):
        raise ValueError(f"special tokens repeat: {list(names)}")
    return names


def special_ids(special_tokens, ordinary: list[int]) -> dict[str, int]:
    """Special token name -> id: a dict as given, or a sequence of names numbered after the ordinary ids."""
    if not isinstance(special_tokens, dict):
        first = max(present(ordinary), default=-1) + 1
        return {name: first + j for j, name in enumerate(check_specials(special_tokens))}
    check_specials(list(special_tokens))
    taken = set(ordinary)
    for name, token in special_tokens.items():
        if not is_int(token) or token < 0:
            raise ValueError(f"the special token {name!r} must have an int id >= 0, got {token!r}")
        if token in taken:
            raise ValueError(f"the special token {name!r} has id {token}, which another token already has")
        taken.add(token)
    return dict(special_tokens)


def check_names(names, known: dict, argument: str) -> frozenset[str]:
    """``names``, each a key of ``known`` (the special and added tokens)."""
    if isinstance(names, str):
        raise TypeError(f"{argument} must be a collection of token strings, got the string {names!r}")
    names = frozenset(names)
    unknown = sorted(names - set(known))
    if unknown:
        raise ValueError(f"{argument} names {unknown[:5]}, which are not special or added tokens")
    return names


def check_token_ids(ids, has_token, argument: str) -> tuple[int, ...]:
    """``ids`` as a tuple, each an id the vocabulary has."""
    ids = tuple(ids)
    bad = next((token for token in ids if not is_int(token) or not has_token(token)), None)
    if bad is not None:
        raise ValueError(f"{argument} lists {bad!r}, which is not a token id of this tokenizer")
    return ids


def expand_tokens(byte_ids: list[int], merges, merge_ids: list[int]) -> list:
    """The bytes of every ordinary id (None where no token has it): bytes, each merge as the join of its pair.
    A token made by several merges must get the same bytes from each.

    The merges are resolved in order, in as many passes as the longest chain of merges that join a token
    made by a later merge (one pass for numforge's own merges).
    """
    table = [None] * (max(present(byte_ids + merge_ids), default=-1) + 1)
    for value, token in enumerate(byte_ids):
        if token is not None:
            table[token] = bytes([value])
    waiting = list(range(len(merges)))
    while waiting:
        unresolved = []
        for i in waiting:
            (p, q), token = merges[i], merge_ids[i]
            if table[p] is None or table[q] is None:
                unresolved.append(i)
                continue
            data = table[p] + table[q]
            if table[token] is not None and table[token] != data:
                raise ValueError(
                    f"merge {i} makes id {token} from {data!r}, but another merge made it {table[token]!r}"
                )
            table[token] = data
        if len(unresolved) == len(waiting):
            i = unresolved[0]
            bad = next(t for t in merges[i] if table[t] is None)
            raise ValueError(f"merge {i} is {merges[i]}, but {bad} is never made from bytes")
        waiting = unresolved
    return table
