"""Experiment: drop the position embedding, and order stops mattering (almost).

Attention mixes the values of the keys a query sees with weights that depend
on the contents of query and key only: sum_j softmax_j(q . k_j) v_j is the same
number for any order of the (k_j, v_j) pairs. Only the position embedding
tells the model where a token is. Test: shuffle the tokens before the last
one and compare the last position's next-token logits.

What to expect, in float64 with random O(1) weights:
- learned positions: the logits change (order matters);
- position table set to zero, 1 layer: they do not change, to rounding
  (~1e-15): the last query sees every token, as a set;
- position table zero, 2 layers: they change again. The causal mask leaks
  order: in layer 1 token j summarises only tokens 0..j, so after a shuffle
  the summaries the last token reads in layer 2 are different ones. A deep
  causal model can learn positions without a position embedding.

Run:  python demos/exp_no_position.py
"""

# %%
import numpy as np
from _demo import command_line

from numforge.gradcheck.model import randomized_model

command_line(__doc__)  # -h prints the docstring above

ids = np.array([[3, 1, 4, 1, 5, 9, 2, 6]])  # (1, T) = (1, 8); vocabulary 13
rng = np.random.default_rng(0)
order = np.concatenate([rng.permutation(7), [7]])  # shuffle positions 0..6, keep the last token last
shuffled = ids[:, order]
print(f"tokens          {ids[0].tolist()}\nshuffled tokens {shuffled[0].tolist()}  (the last one stays)\n")


def last_logits_change(num_layers: int, zero_positions: bool) -> float:
    """max |logits(ids) - logits(shuffled)| at the last position, for a random float64 tiny GPT."""
    model = randomized_model({"num_layers": num_layers})
    if zero_positions:
        model.params["position_embedding"][...] = 0.0  # no position information left
    before = model.logits(ids, last_only=True)  # (1, V)
    after = model.logits(shuffled, last_only=True)
    return float(np.max(np.abs(before - after)))


# %%
print("max |change| of the last position's logits after the shuffle:")
for num_layers, zero_positions, label in [
    (1, False, "1 layer,  learned positions"),
    (1, True, "1 layer,  no positions"),
    (2, False, "2 layers, learned positions"),
    (2, True, "2 layers, no positions"),
]:
    print(f"  {label:28s} {last_logits_change(num_layers, zero_positions):.1e}")
