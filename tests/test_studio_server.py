"""numforge studio's server, without a browser: its checks refuse what they must; its answers are the study
functions' own numbers."""

import base64
import configparser
import http.client
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import STUDY_TEXT, make_tiny_run, tiny_model

import numforge.study
from numforge.generate import decodable_ids, generate
from numforge.study.attention import attention_weights
from numforge.study.predictions import logit_lens
from numforge.study.prompt import run_prompt, shown_token
from numforge.study.studio import MAX_BODY, MAX_DEPTH, Studio, StudioServer
from numforge.tokenizer import BPETokenizer

PROMPT = "the cat sat on"


@pytest.fixture(scope="module")
def tokenizer():
    return BPETokenizer.train(STUDY_TEXT, 256 + 12)


@pytest.fixture(scope="module")
def server(tokenizer):
    studio = Studio(tiny_model(tokenizer), tokenizer, "a tiny untrained model")
    server = StudioServer(studio, "127.0.0.1", 0, timeout=1.0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def call(server, method, path, body=None, *, token=True, host=None, headers=None, raw=None):
    """``(status, JSON answer or raw bytes, headers)`` of one request; ``host=""`` sends no Host header."""
    port = server.server_address[1]
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
    if host != "":
        connection.putheader("Host", host or f"127.0.0.1:{port}")
    sent = {"X-Numforge-Token": server.token} if token else {}
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    if data is not None:
        sent |= {"Content-Type": "application/json", "Content-Length": str(len(data))}
    for name, value in (sent | (headers or {})).items():
        connection.putheader(name, value)
    connection.endheaders()
    if data is not None:
        connection.send(data)
    response = connection.getresponse()
    payload = response.read()
    connection.close()
    kind = response.getheader("Content-Type", "")
    return response.status, json.loads(payload) if kind.startswith("application/json") else payload, response


def exchange(server, data: bytes) -> str:
    """Send raw bytes, read the whole answer (the server closes the connection after it)."""
    with socket.create_connection(("127.0.0.1", server.server_address[1])) as raw:
        raw.sendall(data)
        raw.settimeout(30)
        parts = []
        while part := raw.recv(65536):
            parts.append(part)
    return b"".join(parts).decode("utf-8", "replace")


def test_the_page_and_the_static_files(server):
    status, page, response = call(server, "GET", f"/?token={server.token}", token=False)
    assert status == 200 and b'<script type="module" src="/static/js/studio.js"></script>' in page
    assert "script-src 'self'" in response.getheader("Content-Security-Policy")
    assert response.getheader("X-Content-Type-Options") == "nosniff"
    assert response.getheader("Referrer-Policy") == "no-referrer"
    status, body, response = call(server, "GET", "/static/studio.css", token=False)
    assert status == 200 and len(body) > 1000 and response.getheader("Content-Type") == "text/css; charset=utf-8"
    served, wanted = set(), ["studio.js"]  # the entry module, then every module an import names
    while wanted:
        name = wanted.pop()
        status, body, response = call(server, "GET", f"/static/js/{name}", token=False)
        assert status == 200, name
        assert response.getheader("Content-Type") == "text/javascript; charset=utf-8", name  # or no browser runs it
        served.add(name)
        wanted += [found for found in re.findall(r'from "\./([\w-]+\.js)"', body.decode()) if found not in served]
    web = Path(numforge.study.__file__).parent / "web" / "js"
    assert served == {path.name for path in web.glob("*.js")} and len(served) > 10  # every module, each reached
    status, answer, _ = call(server, "GET", "/api/model")
    assert status == 200 and answer["context"] == 16 and answer["layers"] == 2


@pytest.mark.parametrize(
    "host", ["evil.example:80", "evil.example", "127.0.0.1", "127.0.0.1:1", "localhost.evil.example", ""]
)
def test_a_host_that_is_not_the_servers_is_refused(server, host):
    """DNS rebinding: a name that resolves to 127.0.0.1 still arrives with its own Host header."""
    status, answer, _ = call(server, "GET", "/api/model", host=host)
    assert status == 403 and "DNS rebinding" in answer["error"]
    status, _, _ = call(server, "GET", "/static/js/studio.js", host=host, token=False)
    assert status == 403


def test_the_servers_own_names_are_served(server):
    port = server.server_address[1]
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}"):
        assert call(server, "GET", "/api/model", host=host)[0] == 200


def test_every_route_needs_the_token(server):
    for method, path, body in (("GET", "/", None), ("GET", "/api/model", None), ("POST", "/api/trace", {"text": "a"})):
        status, answer, _ = call(server, method, path, body, token=False)
        assert status == 403 and "token" in answer["error"]
        status, answer, _ = call(server, method, path, body, token=False, headers={"X-Numforge-Token": "x" * 32})
        assert status == 403
    assert call(server, "GET", f"/api/model?token={server.token}", token=False)[0] == 200


def test_a_foreign_origin_is_refused(server):
    status, answer, _ = call(server, "POST", "/api/tokenize", {"text": "a"}, headers={"Origin": "http://evil.example"})
    assert status == 403 and "origin" in answer["error"]
    port = server.server_address[1]
    assert (
        call(server, "POST", "/api/tokenize", {"text": "a"}, headers={"Origin": f"http://127.0.0.1:{port}"})[0] == 200
    )


def test_bodies_are_bounded_and_must_be_json_objects(server):
    port = server.server_address[1]
    answer = exchange(  # a huge Content-Length and no body: refused unread
        server,
        f"POST /api/tokenize HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Numforge-Token: {server.token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {100 * MAX_BODY}\r\n\r\n".encode(),
    )
    assert answer.startswith("HTTP/1.0 413") and "the studio reads at most 98,304 (the tokenizer view" in answer
    cases = [
        (b"{", {}, 400, "the body: line 1 column 2: Expecting property name"),
        (b"[1, 2]", {}, 400, "the body must hold a JSON object, got list"),
        (b"\xff\xfe", {}, 400, "the body: not UTF-8 text (invalid start byte at byte 0)"),
        (b'{"text": "a"}', {"Content-Type": "text/plain"}, 415, "application/json"),
    ]
    for raw, headers, expected, words in cases:
        status, answer, _ = call(server, "POST", "/api/tokenize", raw=raw, headers=headers)
        assert (status, words in answer["error"]) == (expected, True), (raw, answer)
    answer = exchange(  # no Content-Length
        server,
        f"POST /api/tokenize HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nX-Numforge-Token: {server.token}\r\n"
        "Content-Type: application/json\r\n\r\n".encode(),
    )
    assert answer.startswith("HTTP/1.0 411") and "Content-Length header is required" in answer


def test_unknown_routes_methods_and_paths(server):
    for method, path, expected in (
        ("GET", "/api/nothing", 404),
        ("GET", "/static/../../../etc/passwd", 404),
        ("GET", "/static/studio.py", 404),
        ("GET", "/static/studio.js", 404),  # the script is its modules, under /static/js/
        ("GET", "/static/js/../studio.css", 404),  # a path is served only as it is listed, never resolved
        ("GET", "/static/js/", 404),
        ("GET", "/static/js/studio.py", 404),
        ("GET", "/api/trace", 405),
        ("POST", "/api/model", 405),
        ("DELETE", "/api/model", 405),
    ):
        status, answer, _ = call(server, method, path, {} if method == "POST" else None)
        assert status == expected and isinstance(answer["error"], str), (method, path, answer)
    answer = exchange(server, b"NONSENSE\r\n\r\n")  # http.server's own refusals: JSON too, never HTML
    assert answer.startswith("HTTP/1.0 400") and answer.endswith('{"error":"Bad request syntax (\'NONSENSE\')"}')
    answer = exchange(server, b"GET / HTTP/2.0\r\n\r\n")
    assert answer.startswith("HTTP/1.0 505") and "application/json" in answer and "<html" not in answer.lower()


@pytest.mark.parametrize(
    "route, body, words",
    [
        ("/api/trace", {"text": "the cat " * 20}, "reads at most 16 (its context): shorten it by"),
        ("/api/trace", {"text": ""}, "the prompt is empty: type at least one character"),
        ("/api/trace", {"text": 3}, "text must be a string"),
        ("/api/trace", {"ids": [1, 2, 999]}, "in [0, 267]"),
        ("/api/trace", {"ids": [True, 2]}, "every id (of the model's vocabulary) must be an integer"),
        ("/api/trace", {"ids": "1 2"}, "ids must be a list"),
        ("/api/trace", {"ids": list(range(17))}, "1 to max_seq_len = 16"),
        ("/api/trace", {"text": "the cat", "position": 9}, "position must be an integer in [0, 2]"),
        ("/api/walkthrough", {"text": "the cat", "position": 3}, "position must be an integer in [0, 2]"),
        ("/api/walkthrough", {"text": "the cat", "head": 2}, "head must be an integer in [0, 1]"),
        ("/api/walkthrough", {"text": "the cat", "head": [0, 1]}, "head must be an integer"),
        ("/api/attention", {"text": "the cat", "layer": 2}, "layer must be an integer in [0, 1]"),
        ("/api/attention", {"text": "the cat", "heads": [5]}, "head must be an integer in [0, 1]"),
        ("/api/attention", {"text": "the cat", "heads": "all"}, "heads must be a list of 1 to num_heads"),
        ("/api/attention", {"text": "the cat", "heads": [1, 1]}, "each head at most once"),
        ("/api/attention", {"text": "the cat", "heads": [0, 1, 0]}, "a list of 1 to num_heads head numbers"),
        ("/api/attention/scores", {"text": "the cat", "layer": 2}, "layer must be an integer in [0, 1]"),
        ("/api/attention/scores", {"text": "the cat", "head": 2}, "head must be an integer in [0, 1]"),
        ("/api/attention/scores", {"text": "the cat", "head": 0.5}, "head must be an integer"),
        ("/api/attention/overview", {"text": ""}, "the prompt is empty"),
        ("/api/next", {"text": "the cat", "temperature": 0}, "temperature must be more than 0 and at most 100"),
        ("/api/next", {"text": "the cat", "temperature": "hot"}, "temperature must be more than 0"),
        ("/api/next", {"text": "the cat", "top_k": 0}, "top-k must be a whole number of at least 1"),
        ("/api/next", {"text": "the cat", "top_p": 1.5}, "top-p must be more than 0 and at most 1"),
        ("/api/next", {"text": "the cat", "top_p": 0}, "top-p must be more than 0 and at most 1"),
        ("/api/next", {"text": "the cat", "seed": -1}, "seed must be a whole number from 0 to 2**63 - 1"),
        ("/api/next", {"text": "the cat", "all_logits": "yes"}, "all_logits must be true or false"),
        ("/api/generate", {"text": "the cat", "count": 20}, "the context holds 13 more tokens"),
        ("/api/tokenize", {"text": "\ud800"}, "lone surrogate"),
        ("/api/next", {"text": "ab\udc00"}, "lone surrogate (U+DC00, character 3)"),
        ("/api/tokenize", {"text": "a" * 20_001}, "at most 20,000 characters; this text has 20,001: remove 1"),
    ],
)
def test_a_bad_field_is_a_400_that_names_it(server, route, body, words):
    status, answer, _ = call(server, "POST", route, body)
    assert status == 400 and words in answer["error"], answer


def test_an_answer_past_the_bound_is_a_413_that_says_what_to_ask_for(server, monkeypatch):
    status, whole, _ = call(server, "POST", "/api/attention", {"text": "the cat sat"})
    assert status == 200
    size = len(json.dumps(whole, ensure_ascii=False, separators=(",", ":")).encode())
    monkeypatch.setattr(numforge.study.studio, "MAX_ANSWER", size - 1)  # the same answer, one byte too many
    status, answer, _ = call(server, "POST", "/api/attention", {"text": "the cat sat"})
    assert status == 413 and answer["error"] == (
        f"the answer would be {size:,} bytes, more than {size - 1:,}: ask for fewer heads"
    )
    status, _, _ = call(server, "POST", "/api/attention", {"text": "the cat sat", "heads": [0]})
    assert status == 200  # one head's answer fits


@pytest.mark.parametrize(
    "body, field",
    [
        ({"text": ""}, "prompt"),
        ({"text": "the cat " * 20}, "prompt"),
        ({"text": "a\ud800"}, "prompt"),
        ({"text": "the cat", "top_p": 5}, "top_p"),
        ({"text": "the cat", "top_k": 0}, "top_k"),
        ({"text": "the cat", "temperature": 0}, "temperature"),
        ({"text": "the cat", "seed": -1}, "seed"),
    ],
)
def test_a_refusal_names_the_control_at_fault(server, body, field):
    status, answer, _ = call(server, "POST", "/api/next", body)
    assert status == 400 and answer["field"] == field, answer


def test_the_tokenizer_takes_empty_text_and_text_past_the_context(server, tokenizer):
    status, answer, _ = call(server, "POST", "/api/tokenize", {"text": ""})
    assert status == 200 and answer["tokens"] == [] and answer["chunks"] == []
    text = "the cat sat on the mat " * 200  # far more tokens than the context of 16
    status, answer, _ = call(server, "POST", "/api/tokenize", {"text": text})
    assert status == 200 and [t["id"] for t in answer["tokens"]] == tokenizer.encode(text)
    assert len(answer["tokens"]) > server.studio.model.config.max_seq_len


def test_the_answers_are_the_study_functions_numbers(server, tokenizer):
    model = server.studio.model
    prompt = run_prompt(model, tokenizer, PROMPT)
    status, answer, _ = call(server, "POST", "/api/next", {"text": PROMPT, "temperature": 0.7, "all_logits": True})
    assert status == 200
    z = np.array(answer["all_logits"])
    allowed = decodable_ids(tokenizer, model.config.vocab_size)
    z = z if allowed is None else np.where(allowed, z, -np.inf)
    p = np.exp((z - z.max()) / 0.7)
    p /= p.sum()  # softmax(z / tau), written out here
    assert answer["top"][0][0] == int(np.argmax(p)) == answer["chosen"]["id"]
    for token, logit, prob, kept in answer["top"]:
        assert prob == pytest.approx(p[token], rel=1e-12) and kept == prob and logit == z[token]
    assert [t["shown"] for t in answer["tokens"]] == [shown_token(tokenizer, i) for i in prompt.ids]
    status, answer, _ = call(server, "POST", "/api/attention", {"ids": list(prompt.ids), "layer": 1})
    T = len(prompt.ids)
    for head, b64 in zip(answer["heads"], answer["weights"]):
        sent = np.frombuffer(base64.b64decode(b64), dtype="<f2").astype(np.float64)
        assert sent.size == T * (T + 1) // 2
        expected = attention_weights(prompt.cache.blocks[1].attention.attention)[0, head][np.tril_indices(T)]
        np.testing.assert_allclose(sent, expected, rtol=2**-11, atol=6e-8)  # float16: 11 significant bits
    status, answer, _ = call(server, "POST", "/api/generate", {"text": PROMPT, "count": 6, "greedy": True})
    assert answer["ids"] == generate(model, tokenizer, PROMPT, 6, temperature=0).ids
    status, answer, _ = call(server, "POST", "/api/trace", {"text": PROMPT, "position": 1})
    assert status == 200 and answer["position"] == 1 and answer["loss"] == pytest.approx(prompt.loss)
    assert answer["backward"][0]["name"] == "loss"
    assert answer["forward"][-1]["name"].startswith("final LayerNorm output")
    status, answer, _ = call(server, "POST", "/api/lens", {"text": PROMPT})
    last = logit_lens(model, prompt)[-1]  # the last stream's top-1 is the model's own prediction
    assert status == 200 and [top[0][0] for top in answer["top"][-1]] == [top[0][0] for top in last.top]


def test_concurrent_requests_run_one_model_call_at_a_time(server, tokenizer, monkeypatch):
    model, inside, most, guard = server.studio.model, [0], [0], threading.Lock()

    def counted(method):
        def call_counting(*args, **kwargs):
            with guard:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            try:
                return method(*args, **kwargs)
            finally:
                with guard:
                    inside[0] -= 1

        return call_counting

    for name in ("forward", "backward", "logits"):
        monkeypatch.setattr(model, name, counted(getattr(model, name)))
    bodies = [("/api/trace", {"text": f"the {word} sat"}) for word in ("cat", "dog", "mat", "log", "on")] + [
        ("/api/next", {"text": "the dog", "temperature": 2.0}),
        ("/api/generate", {"text": "the", "count": 5}),
        ("/api/lens", {"text": "the log"}),
        ("/api/attention", {"text": "on the mat"}),
    ]
    results = [None] * len(bodies)

    def ask(n):
        results[n] = call(server, "POST", *bodies[n])[:2]

    threads = [threading.Thread(target=ask, args=(n,)) for n in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [status for status, _ in results] == [200] * len(bodies)
    assert most[0] == 1  # never two model calls at once
    for (_, body), (_, answer) in zip(bodies[:5], results[:5]):
        assert [t["text"] for t in answer["tokens"]] == [
            t for t in run_prompt(model, tokenizer, body["text"]).tokens
        ]  # each answer is its own prompt's, not another thread's


def test_a_silent_connection_is_closed_and_others_are_served(server):
    port = server.server_address[1]
    with socket.create_connection(("127.0.0.1", port)) as silent:
        assert call(server, "GET", "/api/model")[0] == 200  # served while the silent one waits
        silent.settimeout(30)
        assert silent.recv(4096) == b""  # closed by the server after its 1 s timeout, without an answer


def test_a_deeply_nested_body_is_a_400_that_says_so(server, capsys):
    # before (issue 37): 30,000 nested arrays in under 64 KB answered 500 (a RecursionError)
    capsys.readouterr()
    for raw, depth in (
        (b"[" * 30000 + b"]" * 30000, "30,000"),
        (b'{"heads": ' + b"[" * 900 + b"]" * 900 + b"}", "901"),
    ):
        status, answer, _ = call(server, "POST", "/api/attention", raw=raw)
        words = f"the body: arrays and objects nested {depth} deep; at most {MAX_DEPTH} levels are read"
        assert (status, answer["error"]) == (400, words)
    status, answer, _ = call(
        server,
        "POST",
        "/api/attention",
        raw=b'{"text": "the", "heads": [0], "note": "\\" ' + b"[" * 40 + b'"}',
    )
    assert status == 200, answer  # brackets inside a string are text, not nesting
    assert "Traceback" not in capsys.readouterr().err


def test_a_hundred_clients_at_once_all_get_answers(server):
    """The listen queue holds them all (socketserver's default of 5 dropped half of them, each retried a second or
    more later): 100 clients connect and send before the server accepts any, then each gets its answer."""
    crowded = StudioServer(server.studio, "127.0.0.1", 0, timeout=5.0)
    port, clients, serving = crowded.server_address[1], [], threading.Thread(target=crowded.serve_forever, daemon=True)
    try:
        for _ in range(100):  # the server listens but accepts nothing yet: each connection waits in its queue
            client = socket.create_connection(("127.0.0.1", port), timeout=2)  # a full queue: this times out
            clients.append(client)
            headers = f"Host: 127.0.0.1:{port}\r\nX-Numforge-Token: {crowded.token}\r\n"
            client.sendall(f"GET /api/model HTTP/1.0\r\n{headers}\r\n".encode())
        serving.start()
        answers = []
        for client in clients:
            client.settimeout(30)
            answers.append(b"".join(iter(lambda client=client: client.recv(65536), b"")))
        assert [answer.split(b"\r\n", 1)[0] for answer in answers] == [b"HTTP/1.0 200 OK"] * 100
    finally:
        for client in clients:
            client.close()
        if serving.is_alive():
            crowded.shutdown()
        crowded.server_close()


@pytest.mark.parametrize("when", ["before the answer", "before the request"])
def test_a_client_that_hangs_up_is_routine(server, capsys, monkeypatch, when):
    """A reset connection, while its answer is computed or before its request is read, leaves nothing in the log
    (before: a BrokenPipeError or ConnectionResetError traceback, twice), and the next client is served."""
    computing, hung_up, done = threading.Event(), threading.Event(), threading.Event()
    model_info, shutdown_request = server.studio.model_info, server.shutdown_request

    def slow_model_info(body):
        computing.set()
        assert hung_up.wait(30)
        return model_info(body)

    def shutdown_and_tell(request):  # the server's last step with a connection, after any error handling
        shutdown_request(request)
        done.set()

    monkeypatch.setattr(server.studio, "model_info", slow_model_info)
    monkeypatch.setattr(server, "shutdown_request", shutdown_and_tell)
    capsys.readouterr()
    port = server.server_address[1]
    client = socket.create_connection(("127.0.0.1", port))
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close() resets
    if when == "before the answer":
        client.sendall(
            f"GET /api/model HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Numforge-Token: {server.token}\r\n\r\n".encode()
        )
        assert computing.wait(30)  # the server has read the request and is computing its answer
    client.close()
    hung_up.set()
    assert done.wait(30)
    monkeypatch.undo()
    assert call(server, "GET", "/api/model")[0] == 200
    assert capsys.readouterr().err == ""


def test_a_hugging_face_directory_is_served(tmp_path):
    pytest.importorskip("safetensors")
    from hf_dirs import write_gpt2_dir

    from numforge.checkpoint import load_model

    directory, _ = write_gpt2_dir(tmp_path / "gpt2")
    model, tokenizer = load_model(directory)
    server = StudioServer(Studio(model, tokenizer, "a tiny GPT-2 directory"), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert call(server, "POST", "/api/next", {"text": "The"})[0] == 200
        assert call(server, "POST", "/api/trace", {"text": "The standard"})[0] == 200
        assert call(server, "GET", "/api/training")[1] == {"run": None}
    finally:
        server.shutdown()
        server.server_close()


def test_the_command_serves_a_run_and_ctrl_c_stops_it_at_once(tmp_path):
    run = make_tiny_run(tmp_path)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    flags = ["studio", "--checkpoint", str(run), "--port", "0", "--no-browser"]
    process = subprocess.Popen(
        [sys.executable, "-m", "numforge", *flags], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        lines = []
        for line in process.stdout:  # its own "listening" line, however long the start takes
            lines.append(line)
            if "listening on" in line:
                break
        url = line.split("listening on ", 1)[1].split()[0]
        assert "Training view follows" in "".join(lines) and url.startswith("http://127.0.0.1:")
        host, rest = url[len("http://") :].split("/", 1)
        connection = http.client.HTTPConnection(*host.split(":"), timeout=60)
        connection.request("GET", "/api/training?" + rest.split("?", 1)[1])
        answer = json.loads(connection.getresponse().read())
        assert [row[0] for row in answer["rows"]] == [1, 2, 3, 4] and answer["sample"]["step"] == 4
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=20) == 0
        assert "stopped" in process.stdout.read()
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
    status = subprocess.run(
        [sys.executable, "-m", "numforge", *flags[:-1], "--port", "70000"], capture_output=True, text=True
    )
    assert status.returncode == 2 and "--port must be in [0, 65535]" in status.stderr


def test_a_llama_style_model_with_grouped_keys_is_served(tokenizer):
    from numforge.model.config import ARCHS

    model = tiny_model(tokenizer, **ARCHS["llama"], num_kv_heads=1, qk_norm=True)  # RMSNorm, RoPE, SwiGLU, MQA
    server = StudioServer(Studio(model, tokenizer, "a tiny Llama-style model"), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        prompt = run_prompt(model, tokenizer, PROMPT)
        answers = {
            route: call(server, "POST", route, {"text": PROMPT, **extra})
            for route, extra in (
                ("/api/tokenize", {}),
                ("/api/next", {"greedy": False, "seed": 3, "temperature": 0.9}),
                ("/api/generate", {"count": 4}),
                ("/api/attention", {"layer": 1}),
                ("/api/attention/overview", {}),
                ("/api/attention/scores", {"layer": 1, "head": 1}),
                ("/api/trace", {"position": 2}),
                ("/api/lens", {}),
            )
        }
        assert {route: status for route, (status, _, _) in answers.items()} == dict.fromkeys(answers, 200)
        trace = answers["/api/trace"][1]
        names = [s["name"] for s in trace["forward"]]
        assert "layer 0 q after qk_norm" in names and "layer 0 k after rope" in names
        assert all(s["equation"] for s in trace["forward"] + trace["backward"])  # every stage has its equation
        weights = attention_weights(prompt.cache.blocks[1].attention.attention)[0]  # (H,T,T): 2 query heads
        T = len(prompt.ids)
        for head, b64 in enumerate(answers["/api/attention"][1]["weights"]):
            sent = np.frombuffer(base64.b64decode(b64), dtype="<f2").astype(np.float64)
            np.testing.assert_allclose(sent, weights[head][np.tril_indices(T)], rtol=2**-11, atol=6e-8)
        assert answers["/api/attention/scores"][1]["kv_head"] == 0  # both query heads read the one kv head
        assert answers["/api/attention/overview"][1]["kv_head_of"] == [0, 0]
        drawn = generate(model, tokenizer, PROMPT, 1, temperature=0.9, seed=3).ids
        assert answers["/api/next"][1]["chosen"]["id"] == drawn[0]
        assert answers["/api/generate"][1]["ids"] == generate(model, tokenizer, PROMPT, 4, temperature=0).ids
    finally:
        server.shutdown()
        server.server_close()


def test_a_non_editable_install_ships_every_file_of_the_page():
    """setup.cfg's package data for numforge.study names every file of web/ (the page, its style, its modules)."""
    config = configparser.ConfigParser()
    config.read(Path(__file__).parents[1] / "setup.cfg")
    study = Path(numforge.study.__file__).parent
    shipped = {
        path
        for glob in config["options.package_data"]["numforge.study"].split(",")
        for path in study.glob(glob.strip())
    }
    assert shipped == {path for path in (study / "web").rglob("*") if path.is_file()} and len(shipped) > 10


def test_a_request_whose_client_hung_up_while_it_waited_is_dropped_before_the_model(server):
    port, studio = server.server_address[1], server.studio
    dropped, body = studio.dropped, json.dumps({"text": "the mat"}).encode()
    with studio.lock:  # a model call in progress: the request waits
        raw = socket.create_connection(("127.0.0.1", port))
        raw.sendall(
            f"POST /api/trace HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nX-Numforge-Token: {server.token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        raw.close()  # the page aborted it
        deadline = time.monotonic() + 30
        while studio.dropped == dropped and time.monotonic() < deadline:  # the server's own count of drops
            time.sleep(0.01)
    assert studio.dropped == dropped + 1


def test_the_training_view_starts_stops_and_resumes_its_run_and_switches_to_its_checkpoint(tmp_path):
    run = make_tiny_run(tmp_path)
    server = StudioServer(Studio(tiny_model(BPETokenizer.train(STUDY_TEXT, 256 + 12)), None, "the first model", run))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        assert call(server, "GET", "/api/training")[1]["trainer"]["state"] == "idle"
        status, answer, _ = call(server, "POST", "/api/training/start", {"max_steps": 0})
        assert status == 400 and answer["field"] == "max_steps"
        for _ in range(2):  # started, then resumed from the checkpoint its stop wrote
            logged = call(server, "GET", "/api/training")[1]["rows"][-1][0]
            status, answer, _ = call(server, "POST", "/api/training/start", {"max_steps": 1_000_000})
            assert status == 200 and answer["state"] == "running", answer
            assert call(server, "POST", "/api/training/start", {"max_steps": 5})[1]["field"] == "max_steps"
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:  # the child's own progress: a step past any logged before
                rows = call(server, "GET", "/api/training")[1]["rows"]
                if rows and rows[-1][0] > logged:
                    break
                time.sleep(0.05)
            assert call(server, "POST", "/api/training/stop", {})[1]["state"] == "stopping"
            stopped = 128 + signal.SIGTERM  # numforge train's exit after SIGTERM: its checkpoint written
            assert server.studio.trainer.process.wait(120) == stopped
            state = call(server, "GET", "/api/training")[1]["trainer"]
            assert state["state"] == "stopped" and state["exit"] == stopped
            step = call(server, "GET", "/api/training")[1]["sample"]["step"]
            assert step > logged
        status, answer, _ = call(server, "POST", "/api/training/use-latest", {})
        assert status == 200 and answer["source"] == f"run run, checkpoint of step {step}"
        assert call(server, "GET", "/api/model")[1]["source"] == answer["source"]
        assert call(server, "POST", "/api/next", {"text": "the cat"})[0] == 200  # the checkpoint's model answers
    finally:
        if server.studio.trainer.running():
            server.studio.trainer.process.kill()
        server.shutdown()
        server.server_close()


def test_the_model_line_names_experts_and_a_sliding_window():
    from numforge.gradcheck.model import TINY
    from numforge.model import GPTConfig
    from numforge.model.config import ARCHS
    from numforge.study.views import architecture

    config = GPTConfig(**{**TINY, **ARCHS["moe"], "sliding_window": 8, "window_layers": (1,)})
    line = architecture(config)
    mlp = f"swiglu MLP ({config.num_experts} experts of width {config.d_ff}, top-{config.experts_top_k}, renormalised"
    assert mlp + " per token)" in line
    assert "; sliding window 8 on layers 1; rmsnorm;" in line
    dense = architecture(GPTConfig(**TINY))
    assert "experts" not in dense and "window" not in dense
