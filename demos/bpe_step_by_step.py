"""Byte-pair encoding, merge by merge, on Wikipedia's example "aaabdaaabac".

Run: python demos/bpe_step_by_step.py

Every step prints the pair counts, the pair that wins (highest count; on a
tie, the smallest pair in id order), the new token and the sequence after the
merge, with how much shorter it got: one token per occurrence replaced, which
can be fewer than the count (in "aaa" the pairs overlap: (a, a) is counted
twice but replaced once, leftmost first). Then the text is encoded with the
learned merges and decoded back, and the fast BPETokenizer is shown to learn
the same merges.
"""

# %%
from _demo import command_line

from numforge.tokenizer import BPETokenizer, reference

command_line(__doc__)  # -h prints the docstring above

TEXT = "aaabdaaabac"
NUM_MERGES = 3


def show(ids, merges):
    """Each token as its id and its text: 256'aa' 97'a' ..."""
    return " ".join(f"{t}{reference.token_bytes(t, merges).decode()!r}" for t in ids)


# %% [markdown]
# ## Merge by merge
# Count every adjacent pair, merge the most frequent into a new token, repeat.

# %%
ids = list(TEXT.encode("utf-8"))
merges = []
print(f"text {TEXT!r} as bytes: {ids}\n")
for k in range(1, NUM_MERGES + 1):
    counts = reference.count_pairs([ids])
    pair, count = reference.most_frequent_pair(counts)
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    print(f"step {k}: pair counts " + ", ".join(f"{p}: {c}" for p, c in ranked))
    tied = [p for p, c in ranked if c == count]
    if len(tied) > 1:
        print(f"  tie at {count} between {tied}: the smallest pair wins")
    new_id = 255 + k
    merges.append(pair)
    before = len(ids)
    ids = reference.replace_pair(ids, pair, new_id)
    replaced = before - len(ids)
    print(f"  merge {pair} -> {new_id} = {reference.token_bytes(new_id, merges)!r}")
    overlap = (
        f" (counted {count} times: overlapping pairs count twice, replaced {replaced})" if replaced < count else ""
    )
    print(f"  sequence: {before} -> {len(ids)} tokens{overlap}: {ids}\n           {show(ids, merges)}\n")

# %% [markdown]
# ## Encode, decode, and the fast trainer

# %%
encoded = reference.encode(TEXT, merges)
print(f"merges: {merges}")
print(f"encode({TEXT!r}) = {encoded}; decode gives back {reference.decode(encoded, merges)!r}")
fast = BPETokenizer.train(TEXT, 256 + NUM_MERGES, special_tokens=())
print(f"the fast trainer learns the same merges: {fast.merges == merges}")
