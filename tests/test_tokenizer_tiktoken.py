"""Optional: numforge's encoder equals tiktoken's on real text, with the same token bytes and pattern."""

import inspect
import json.decoder
from pydoc_data.topics import topics

import pytest

from numforge.tokenizer import BPETokenizer

tiktoken = pytest.importorskip("tiktoken")

DOCS = "".join(topics[key] for key in sorted(topics))


def _as_tiktoken(tok: BPETokenizer):
    ranks = {data: i for i, data in enumerate(tok.ordinary_token_bytes())}
    return tiktoken.Encoding(
        "numforge-test", pat_str=tok.pattern, mergeable_ranks=ranks, special_tokens=tok.special_tokens
    )


@pytest.mark.parametrize("vocab_size", [300, 2048])
def test_equals_tiktoken_on_real_text(vocab_size):
    tok = BPETokenizer.train(DOCS[:200_000], vocab_size)
    theirs = _as_tiktoken(tok)
    text = DOCS[200_000:300_000] + inspect.getsource(json.decoder) + " 🙂 世界 e\u0301 \r\n\t" + "a" * 3000
    ours = tok.encode(text + "<|endoftext|>", allowed_special="all")
    assert ours == theirs.encode(text + "<|endoftext|>", allowed_special="all")
    assert tok.decode(ours) == theirs.decode(ours)
