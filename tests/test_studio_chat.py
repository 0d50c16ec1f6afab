"""The studio's chat routes: ``/api/chat`` streams ``ChatSession``'s own turns as lines, ``/api/chat/reset`` starts a
new conversation, each bad field is refused by name before the first line, a model without a chat template says
why, a client that hangs up stops the sampling, and a new checkpoint starts a new conversation. On a random
Llama saved by transformers beside SmolLM2's tokenizer and chat template (``chat_templates.py``)."""

import contextlib
import http.client
import json
import socket
import threading

import pytest
from chat_templates import chat_model_directory, write_chat_jsonl
from helpers import chat_reference, gated, make_tiny_run

from numforge import cli
from numforge.checkpoint import latest_checkpoint_dir, load_model
from numforge.commands.studio import chat_of
from numforge.study.studio import CHAT_SEED, CHAT_STOPS, MAX_CHAT_TOKENS, Studio, StudioServer

pytest.importorskip("jinja2")


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory):
    return chat_model_directory(tmp_path_factory.mktemp("chat") / "model")


@pytest.fixture(scope="module")
def loaded(chat_dir):
    model, tokenizer = load_model(chat_dir)
    new_chat, why = chat_of(chat_dir)
    assert why is None
    return model, tokenizer, new_chat


@contextlib.contextmanager
def serving(studio):
    server = StudioServer(studio, "127.0.0.1", 0, timeout=30.0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def server(loaded):
    model, tokenizer, new_chat = loaded
    with serving(Studio(model, tokenizer, "a random chat model", new_chat=new_chat)) as server:
        yield server


def request(server, method, path, body=None):
    """``(status, content type, raw answer)`` of one request."""
    connection = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=60)
    headers = {"X-Numforge-Token": server.token}
    data = None if body is None else json.dumps(body).encode("utf-8")
    if data is not None:
        headers["Content-Type"] = "application/json"
    connection.request(method, path, body=data, headers=headers)
    response = connection.getresponse()
    payload = response.read()  # a streamed answer: until the server closes the connection
    connection.close()
    return response.status, response.getheader("Content-Type"), payload


def call(server, method, path, body=None):
    status, kind, payload = request(server, method, path, body)
    assert kind == "application/json; charset=utf-8", payload
    return status, json.loads(payload)


def chat(server, body):
    """The lines of one streamed turn."""
    status, kind, payload = request(server, "POST", "/api/chat", body)
    assert (status, kind) == (200, "application/x-ndjson; charset=utf-8"), payload
    assert payload.endswith(b"\n")
    return [json.loads(line) for line in payload.decode("utf-8").splitlines()]


TURNS = [  # text, temperature, max tokens: sampled, greedy, a long reply; the last ones pass the context of 128
    ("Hi there", 0.8, 12),
    ("What is a list?", 0, 5),
    ("Thanks, and tell me more", 1.3, 40),
    ("Go on", 0.8, 40),
    ("Once more", 0.5, 40),
]


def test_the_streamed_turns_are_the_chat_sessions_turns_one_after_another(server, loaded):
    status, history = call(server, "POST", "/api/chat/reset", {"system": "Be brief."})
    assert status == 200 and history["available"] and history["why"] is None
    assert history["messages"] == [{"role": "system", "content": "Be brief."}] and history["cached"] == 0
    assert history["context"] == 128 and history["max_new_tokens"] == MAX_CHAT_TOKENS
    session, notices = chat_reference(loaded, system="Be brief.")
    for text, temperature, max_tokens in TURNS:
        *streamed, done = chat(server, {"text": text, "temperature": temperature, "max_tokens": max_tokens})
        session.temperature, session.max_new_tokens = temperature, max_tokens
        before = len(notices)
        pieces = list(session.send(text))
        kinds = [next(iter(line)) for line in streamed]
        assert kinds == ["notice"] * (len(notices) - before) + ["piece"] * len(pieces)  # what was said, then the reply
        assert [line["notice"] for line in streamed[: len(notices) - before]] == notices[before:]
        assert [line["piece"] for line in streamed if "piece" in line] == pieces
        assert done == {
            "done": True,
            "stop": CHAT_STOPS[session.stop_reason],
            "messages": session.messages,
            "cached": len(session.ids),
        }
    assert notices and all("dropped" in notice for notice in notices)  # the history passed the context: said
    status, history = call(server, "GET", "/api/chat/history")
    assert (status, history["messages"], history["cached"]) == (200, session.messages, len(session.ids))


def test_reset_starts_a_new_conversation_with_or_without_a_system_message(server, loaded):
    first = chat(server, {"text": "Hi there", "temperature": 0.8, "max_tokens": 8})[-1]
    call(server, "POST", "/api/chat/reset", {"system": "You are terse."})
    again = chat(server, {"text": "Hi there", "temperature": 0.8, "max_tokens": 8})[-1]
    session, _ = chat_reference(loaded, system="You are terse.")
    session.temperature, session.max_new_tokens = 0.8, 8
    list(session.send("Hi there"))
    assert again["messages"] == session.messages and again["cached"] == len(session.ids)  # sampled from the seed again
    for body in ({}, {"system": None}, {"system": ""}):
        status, history = call(server, "POST", "/api/chat/reset", body)
        assert (status, history["messages"], history["cached"]) == (200, [], 0)
    assert chat(server, {"text": "Hi there", "temperature": 0.8, "max_tokens": 8})[-1] == first


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"text": ""}, "chat", "the message is empty"),
        ({"text": " \n "}, "chat", "the message is empty"),
        ({}, "chat", "text must be a string"),
        ({"text": ["Hi"]}, "chat", "text must be a string"),
        ({"text": "x" * 4001}, "chat", "at most 4,000 characters a message; this one has 4,001: remove 1"),
        ({"text": "a long message " * 60}, "chat", "the message does not fit: the prompt would be"),
        ({"text": "half \ud83d of a character"}, "chat", "lone surrogate (U+D83D, character 6)"),
        ({"text": "Hi", "temperature": -0.1}, "chat_temperature", "from 0 (greedy) to 100, got -0.1"),
        ({"text": "Hi", "temperature": 100.5}, "chat_temperature", "from 0 (greedy) to 100, got 100.5"),
        ({"text": "Hi", "temperature": "hot"}, "chat_temperature", "got 'hot'"),
        ({"text": "Hi", "temperature": True}, "chat_temperature", "got True"),
        ({"text": "Hi", "max_tokens": 0}, "chat_max_tokens", "a whole number from 1 to 200, got 0"),
        ({"text": "Hi", "max_tokens": 201}, "chat_max_tokens", "a whole number from 1 to 200, got 201"),
        ({"text": "Hi", "max_tokens": 2.5}, "chat_max_tokens", "got 2.5"),
        ({"text": "Hi", "max_tokens": False}, "chat_max_tokens", "got False"),
    ],
)
def test_each_bad_field_is_refused_by_name_before_any_line_and_the_conversation_is_untouched(
    server, body, field, words
):
    chat(server, {"text": "Hi there", "temperature": 0.8, "max_tokens": 6})
    _, before = call(server, "GET", "/api/chat/history")
    status, answer = call(server, "POST", "/api/chat", body)
    assert (status, answer["field"]) == (400, field) and words in answer["error"]
    assert call(server, "GET", "/api/chat/history")[1] == before


@pytest.mark.parametrize(
    ("system", "words"),
    [(7, "system must be a string, got int"), ("s" * 4001, "this one has 4,001: remove 1"), ("\udc00", "surrogate")],
)
def test_a_bad_system_message_is_refused_by_name_and_the_conversation_kept(server, system, words):
    kept = chat(server, {"text": "Hi there", "temperature": 0.8, "max_tokens": 6})[-1]
    status, answer = call(server, "POST", "/api/chat/reset", {"system": system})
    assert (status, answer["field"]) == (400, "chat_system") and words in answer["error"]
    assert call(server, "GET", "/api/chat/history")[1]["messages"] == kept["messages"]


def test_a_model_without_a_chat_template_says_why_and_refuses_to_chat(tmp_path):
    run = make_tiny_run(tmp_path)  # trained from scratch: no template anywhere
    new_chat, why = chat_of(run)
    assert new_chat is None and "chat_template" in why and "tokenizer_config.json" in why
    model, tokenizer = load_model(run)
    with serving(Studio(model, tokenizer, "a tiny run", new_chat=new_chat, no_chat=why)) as server:
        status, history = call(server, "GET", "/api/chat/history")
        assert status == 200 and history == {
            "available": False,
            "why": why,
            "messages": [],
            "cached": 0,
            "context": None,
            "max_new_tokens": MAX_CHAT_TOKENS,
        }
        for route, body in (("/api/chat", {"text": "Hi"}), ("/api/chat/reset", {})):
            status, answer = call(server, "POST", route, body)
            assert status == 400 and answer == {"error": f"no chat here: {why}"}
    assert Studio(model, tokenizer, "a tiny run").chat_history({})["why"] == "this model has no chat template"


def test_a_client_that_hangs_up_mid_stream_stops_the_sampling(loaded):
    model, tokenizer, new_chat = loaded
    full, _ = chat_reference(loaded)
    full.temperature = 0
    reply = full.send("Hi there")
    first = next(reply)
    prompt = len(full.ids) - 1  # the prompt, then the first sampled token
    full_reply = first + "".join(reply)  # greedy, never hung up on: as long as the context lets it run
    assert full.stop_reason in ("length", "context") and len(full.ids) - prompt > 50
    gate = threading.Event()
    studio = Studio(model, tokenizer, "a random chat model", new_chat=gated(new_chat, gate))
    with serving(studio) as server:
        raw = socket.create_connection(("127.0.0.1", server.server_address[1]))
        body = json.dumps({"text": "Hi there", "temperature": 0, "max_tokens": MAX_CHAT_TOKENS}).encode("utf-8")
        raw.sendall(
            b"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nX-Numforge-Token: %s\r\nContent-Type: application/json"
            b"\r\nContent-Length: %d\r\n\r\n%s" % (server.server_address[1], server.token.encode(), len(body), body)
        )
        answer = raw.makefile("rb")
        assert answer.readline().startswith(b"HTTP/1.0 200")
        while answer.readline() != b"\r\n":  # the headers
            pass
        assert "piece" in json.loads(answer.readline())  # a piece line: the reply is under way
        answer.close()
        raw.shutdown(socket.SHUT_RDWR)
        raw.close()
        gate.set()
        status, history = call(server, "GET", "/api/chat/history")  # waits for the model's lock: the stream's end
    cut = history["messages"][-1]
    assert status == 200 and cut["role"] == "assistant" and cut["content"]
    assert full_reply.startswith(cut["content"]) and len(cut["content"]) < len(full_reply)
    assert studio._chat.stop_reason is None  # neither the end of turn nor a length: its reader stopped it
    assert history["cached"] - prompt < 10  # the pieces read, a few more sampled before the hang-up was seen


def test_showing_a_runs_latest_checkpoint_starts_a_new_conversation_on_it(tmp_path, chat_dir):
    chats = write_chat_jsonl(tmp_path / "chat.jsonl")
    run = tmp_path / "run"
    flags = ["--init-from", str(chat_dir), "--chat", str(chats), "--seq-len", "96", "--batch-size", "2"]
    flags += ["--no-progress", "--save-every", "2", "--lr", "1e-2", "--threads", "1", "--out", str(run)]
    assert cli.main(["train", *flags, "--max-steps", "2"]) == 0
    new_chat, why = chat_of(run)  # the template of the chat model the run was tuned from
    assert why is None
    base, base_tokenizer = load_model(chat_dir)
    studio = Studio(base, base_tokenizer, "the chat model", run_dir=run, new_chat=new_chat)
    with serving(studio) as server:
        call(server, "POST", "/api/chat/reset", {"system": "Be brief."})
        chat(server, {"text": "Hi there", "temperature": 0.8, "max_tokens": 6})
        assert call(server, "POST", "/api/training/use-latest", {})[0] == 200
        status, history = call(server, "GET", "/api/chat/history")
        assert (status, history["messages"], history["cached"]) == (
            200,
            [{"role": "system", "content": "Be brief."}],
            0,
        )
        done = chat(server, {"text": "Hi there", "temperature": 0.8, "max_tokens": 6})[-1]
    model, tokenizer = load_model(latest_checkpoint_dir(run))
    session = new_chat(model, tokenizer, system="Be brief.", seed=CHAT_SEED, max_new_tokens=MAX_CHAT_TOKENS)
    session.temperature, session.max_new_tokens = 0.8, 6
    list(session.send("Hi there"))
    assert done["messages"] == session.messages and done["cached"] == len(session.ids)  # the new model's reply
