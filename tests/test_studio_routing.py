"""The studio's Experts view (``/api/routing``, ``study/routing.py``): each token's experts and gates, per layer, as
the MoE layers' forward chose them; equal to an independent NumPy forward's top-k of the router's softmax
(``tests/numpy_forward.py``: a per-token loop over the choice, sharing no code with ``ops/moe.py``); a model of
dense MLPs is told it has no experts."""

import threading

import numpy as np
import pytest
from helpers import STUDY_TEXT, tiny_model
from numpy_forward import reference
from test_studio_server import call

from numforge.study.prompt import run_ids
from numforge.study.routing import layer_routes
from numforge.study.studio import Studio, StudioServer
from numforge.tokenizer import BPETokenizer

PROMPT = "the cat sat on the mat"
MOE = dict(num_experts=6, experts_top_k=2, use_bias=False, activation="swiglu", norm="rmsnorm", position="rope")


@pytest.fixture(scope="module")
def tokenizer():
    return BPETokenizer.train(STUDY_TEXT, 256 + 12)


def serve(model, tokenizer):
    server = StudioServer(Studio(model, tokenizer, "a tiny untrained model"), "127.0.0.1", 0, timeout=1.0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module", params=[True, False], ids=["renormalised", "not renormalised"])
def moe(request, tokenizer):
    model = tiny_model(tokenizer, "float64", **MOE, experts_renormalize=request.param)
    model.params["layers.1.mlp.router.weight"] *= 8.0  # far from uniform: an order that means something
    server = serve(model, tokenizer)
    yield model, server
    server.shutdown()
    server.server_close()


def test_the_experts_and_gates_are_an_independent_top_k_of_the_router_softmax(moe, tokenizer):
    model, server = moe
    status, answer, _ = call(server, "POST", "/api/routing", {"text": PROMPT})
    assert status == 200, answer
    ids = [t["id"] for t in answer["tokens"]]
    truth = reference(model, ids)
    assert (answer["experts"], answer["top_k"], len(answer["layers"])) == (6, 2, 2)
    for layer in answer["layers"]:
        i = layer["layer"]
        probs, chosen, gates = (truth[(i, kind)] for kind in ("router probabilities", "chosen experts", "gates"))
        assert layer["chosen"] == chosen.tolist()
        np.testing.assert_allclose(layer["gates"], gates, rtol=1e-3)  # sent to 4 significant digits
        np.testing.assert_allclose(layer["probs"], probs, rtol=1e-3)
        assert layer["load"] == np.bincount(chosen.ravel(), minlength=6).tolist()
        assert layer["renormalized"] == model.config.experts_renormalize
        sums = np.asarray(layer["gates"]).sum(axis=1)
        assert np.allclose(sums, 1.0, atol=1e-3) == model.config.experts_renormalize
    routes = layer_routes(run_ids(model, tokenizer, ids).cache)  # unrounded: the forward's own float64 numbers
    for i, route in enumerate(routes):
        np.testing.assert_array_equal(route.chosen, truth[(i, "chosen experts")])
        np.testing.assert_allclose(route.gates, truth[(i, "gates")], rtol=1e-12)
        np.testing.assert_allclose(route.probs, truth[(i, "router probabilities")], rtol=1e-12)


def test_a_dense_model_has_no_experts_and_says_so(tokenizer):
    server = serve(tiny_model(tokenizer), tokenizer)
    try:
        status, answer, _ = call(server, "POST", "/api/routing", {"text": PROMPT})
    finally:
        server.shutdown()
        server.server_close()
    assert status == 200, answer
    assert (answer["experts"], answer["layers"]) == (0, [])
    assert answer["note"].startswith("This model has no experts: each of its 2 layers has one dense gelu MLP")
    assert len(answer["tokens"]) > 1


def test_a_bad_prompt_is_refused_by_name(moe):
    _, server = moe
    status, answer, _ = call(server, "POST", "/api/routing", {"ids": [10**9]})
    assert status == 400 and answer["field"] == "prompt", answer
