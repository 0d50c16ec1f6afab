"""``numforge chat`` and ``ChatSession``: the KV cache kept across turns gives a fresh forward's logits, turns
trimmed whole, the commands, the transcript; on a tiny Llama directory with a chat template in
tokenizer_config.json (random weights, greedy or seeded)."""

import io
import json

import numpy as np
import pytest
from hf_dirs import llama_fields, write_llama_dir

from numforge import cli
from numforge.chat_session import ChatSession
from numforge.checkpoint import load_model
from numforge.commands.chat import COMMANDS
from numforge.data.chat_template import ChatTemplate
from numforge.generate import allowed_logits

pytest.importorskip("jinja2")

# A ChatML-like template whose markers are the tiny tokenizer's one special token, <|endoftext|> (id 289)
TEMPLATE = (
    "{% for m in messages %}<|endoftext|>{{ m.role }}\n{{ m.content }}{{ eos_token }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|endoftext|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory):
    directory, _ = write_llama_dir(tmp_path_factory.mktemp("chat") / "llama", llama_fields(max_position_embeddings=256))
    config = {"eos_token": "<|endoftext|>", "chat_template": TEMPLATE}
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return directory


@pytest.fixture(scope="module")
def loaded(chat_dir):
    model, tokenizer = load_model(chat_dir)
    return model, tokenizer, ChatTemplate.from_directory(chat_dir)


def spied_session(loaded, **settings):
    """A session whose every feed is recorded: ``(ids in the cache after it, ids fed, its (V,) logits)``."""
    model, tokenizer, template = loaded
    notices = []
    session = ChatSession(model, tokenizer, template, on_notice=notices.append, **settings)
    feeds, feed = [], session._feed

    def recording_feed(new_ids):
        logits = feed(new_ids)
        feeds.append((len(session.ids), list(new_ids), logits))
        return logits

    session._feed = recording_feed
    return session, feeds, notices


def fresh_logits(session, ids):
    """The last position's logits of one forward over ``ids``, no cache (the ids the tokenizer cannot decode at
    -inf, as the session masks them): the oracle."""
    logits = np.asarray(session.model.logits(np.asarray(ids)[None, :], last_only=True)).reshape(-1)  # (1,V) -> (V,)
    return allowed_logits(logits, session.allowed)


def test_the_kept_cache_gives_a_fresh_forwards_logits_and_feeds_only_the_new_turn(loaded):
    model, tokenizer, template = loaded
    session, feeds, notices = spied_session(loaded, system="Be brief.", temperature=0, max_new_tokens=6)
    for turn, text in enumerate(["Hi", "What is a list?", "Thanks"]):
        before, seen = len(session.ids), session.cached_text
        expected = template.render([*session.messages, {"role": "user", "content": text}], True)
        first_feed = len(feeds)
        reply = "".join(session.send(text))
        assert session.messages[-1] == {"role": "assistant", "content": reply}
        in_cache, fed, _ = feeds[first_feed]
        assert in_cache - len(fed) == before  # only the new turn was fed: nothing of the history re-encoded
        assert expected.startswith(seen) and tokenizer.decode(fed) == expected[len(seen) :]  # the rendered new turn
        if turn:
            assert len(fed) < before
        assert session.cache.length == len(session.ids)
    for in_cache, _, logits in feeds:  # every step, the prompts' and each sampled token's
        np.testing.assert_allclose(logits, fresh_logits(session, session.ids[:in_cache]), rtol=1e-4, atol=1e-5)
    assert notices == []
    assert [m["role"] for m in session.messages] == ["system", "user", "assistant"] * 1 + ["user", "assistant"] * 2


def test_a_reply_stops_at_the_end_of_turn_token_which_the_next_turn_feeds(loaded):
    model, tokenizer, template = loaded
    greedy, greedy_feeds, _ = spied_session(loaded, temperature=0, max_new_tokens=4)
    assert "".join(greedy.send("Hi")) and greedy.stop_reason == "length"
    first_id = greedy_feeds[1][1][0]  # the id greedy decoding samples first
    marker = tokenizer.decode([first_id])
    assert tokenizer.encode(marker, allowed_special="all") == [first_id]
    # the same template, its eos_token that id's text: the end of turn is now the id greedy decoding picks first
    session, feeds, notices = spied_session((model, tokenizer, ChatTemplate(TEMPLATE, {"eos_token": marker})),
                                            temperature=0, max_new_tokens=4)  # fmt: skip
    assert first_id in session.end_ids and 289 in session.end_ids  # the template's and the directory's
    assert list(session.send("Hi")) == [] and session.stop_reason == "end"
    assert session.messages[-1] == {"role": "assistant", "content": ""} and session.pending == [first_id]
    list(session.send("Again"))
    assert feeds[1][1][0] == first_id and notices == []  # the end token sampled last turn opens the next feed
    np.testing.assert_allclose(feeds[1][2], fresh_logits(session, session.ids[: feeds[1][0]]), rtol=1e-4, atol=1e-5)


def test_the_history_is_trimmed_by_whole_turns_the_system_message_kept_and_the_cache_rebuilt(loaded):
    model, tokenizer, template = loaded
    session, feeds, notices = spied_session(loaded, system="S", temperature=0, max_new_tokens=8, context=64)
    texts = ["first question here", "second question here", "third question here", "fourth question here"]
    for text in texts:
        list(session.send(text))
    assert notices and "dropped" in notices[0] and "rebuilt" in notices[0]
    users = [m["content"] for m in session.messages if m["role"] == "user"]
    assert session.messages[0] == {"role": "system", "content": "S"}
    assert users == texts[len(texts) - len(users) :] and len(users) < len(texts)  # the oldest went first
    assert [m["role"] for m in session.messages[1:]] == ["user", "assistant"] * len(users)
    assert len(session.ids) <= 64 and session.cache.length == len(session.ids)
    np.testing.assert_allclose(feeds[-1][2], fresh_logits(session, session.ids[: feeds[-1][0]]), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="does not fit"):
        list(session.send("a message far too long for a context of sixty-four tokens " * 3))
    assert session.messages[-1]["role"] == "assistant"  # the refused message left the history as it was


def test_a_reply_stops_when_the_context_is_full_and_the_next_turn_starts_afresh(loaded):
    session, feeds, notices = spied_session(loaded, temperature=0, max_new_tokens=100, context=48)
    reply = "".join(session.send("Hi"))
    assert session.stop_reason == "context" and len(session.ids) == 48 == session.cache.length
    assert session.messages[-1] == {"role": "assistant", "content": reply}
    assert session.cached_text.endswith(reply)  # the reply's last id, never fed, is in the text once
    np.testing.assert_allclose(feeds[-1][2], fresh_logits(session, session.ids), rtol=1e-4, atol=1e-5)
    list(session.send("Hi"))
    assert notices and session.cache.length == len(session.ids) <= 48
    np.testing.assert_allclose(feeds[-1][2], fresh_logits(session, session.ids[: feeds[-1][0]]), rtol=1e-4, atol=1e-5)


def test_a_reply_stopped_early_by_its_reader_is_what_the_cache_holds(loaded):
    session, feeds, notices = spied_session(loaded, temperature=0, max_new_tokens=20)
    reply = session.send("Hi")
    next(reply)
    reply.close()  # a studio's stop button
    content = session.messages[-1]["content"]
    assert session.messages[-1]["role"] == "assistant" and content
    assert session.tokenizer.decode(session.ids[feeds[0][0] :]) == content  # the cache holds what was shown
    list(session.send("Go on"))
    assert notices == [] and session.cache.length == len(session.ids)
    np.testing.assert_allclose(feeds[-1][2], fresh_logits(session, session.ids[: feeds[-1][0]]), rtol=1e-4, atol=1e-5)


def chat(chat_dir, monkeypatch, capsys, lines: str, *flags: str):
    monkeypatch.setattr("sys.stdin", io.StringIO(lines))
    status = cli.main(["chat", "--checkpoint", str(chat_dir), "--max-new-tokens", "5", *flags])
    out, err = capsys.readouterr()
    return status, out, err


def test_the_cli_transcript_commands_and_end_of_input(chat_dir, monkeypatch, capsys):
    lines = "Hi\n/temperature 0\nHi\n/help\n/reset\nHi\n/temperature hot\n/nope\n/quit\nnever read\n"
    status, out, _ = chat(chat_dir, monkeypatch, capsys, lines, "--seed", "3", "--system", "Be brief.")
    assert status == 0
    transcript = out.split("\n")  # not splitlines: a random model's reply may hold any character but "\n"
    assert transcript[:2] == ["numforge chat: /help lists the commands", "> Hi"]
    assert transcript[3:6] == ["[stopped: length]", "> /temperature 0", "[temperature 0]"]
    assert transcript[6] == "> Hi" and transcript[8:10] == ["[stopped: length]", "> /help"]
    assert transcript[10].split() == ["/help", "this", "list"] and len(transcript[10:14]) == len(COMMANDS)
    assert transcript[14:16] == ["> /reset", "[conversation reset]"]
    assert transcript[16] == "> Hi" and transcript[18] == "[stopped: length]"
    assert transcript[19:] == [
        "> /temperature hot", "[/temperature takes a number >= 0, got 'hot']",
        "> /nope", "[unknown command '/nope': /help lists the commands]",
        "> /quit", "",
    ]  # fmt: skip
    assert "never read" not in out
    assert chat(chat_dir, monkeypatch, capsys, lines, "--seed", "3", "--system", "Be brief.") == (status, out, "")
    # end of input (Ctrl-D) ends the chat; greedy from the same conversation gives the reply after /reset
    status, out, _ = chat(chat_dir, monkeypatch, capsys, "Hi\n", "--temperature", "0", "--system", "Be brief.")
    assert status == 0 and out.split("\n")[1:] == ["> Hi", transcript[17], "[stopped: length]", "> ", ""]


def test_a_directory_without_a_chat_template_is_refused_by_name(tmp_path, monkeypatch, capsys):
    directory, _ = write_llama_dir(tmp_path / "base", llama_fields())
    status, out, err = chat(directory, monkeypatch, capsys, "Hi\n")
    assert status == 2 and "numforge chat needs the model's chat template" in err
    assert "chat_template" in err and "tokenizer_config.json" in err


class Interrupting(io.StringIO):
    """A stdin whose second line is Ctrl-C."""

    def readline(self, *args):
        if self.tell():
            raise KeyboardInterrupt
        return super().readline(*args)


def test_ctrl_c_ends_the_chat_with_status_0(chat_dir, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", Interrupting("/help\nHi\n"))
    assert cli.main(["chat", "--checkpoint", str(chat_dir)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("numforge chat") and out.endswith("> \n") and "> Hi" not in out
