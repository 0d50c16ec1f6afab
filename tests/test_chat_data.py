"""Chat conversations as training rows (numforge/data/chat.py): the loss on the assistant's tokens only."""

import json

import numpy as np
import pytest
from chat_templates import chat_directory

from numforge.data.chat import ChatRows, assistant_examples, chat_rows, read_chat_jsonl
from numforge.data.chat_template import ChatTemplate
from numforge.tokenizer.hf_dir import load_hf_tokenizer

pytest.importorskip("jinja2")

CONVERSATION = [
    {"role": "system", "content": "You answer in one line."},
    {"role": "user", "content": "Name a colour."},
    {"role": "assistant", "content": "Blue."},
    {"role": "user", "content": "Another?"},
    {"role": "assistant", "content": "Red, or green."},
]
END_OF_TURN = {"smollm2": "<|im_end|>", "llama3": "<|eot_id|>", "qwen2.5": "<|im_end|>", "qwen3": "<|im_end|>"}


def _family(tmp_path, family):
    directory = chat_directory(tmp_path / family, family)
    return directory, ChatTemplate.from_directory(directory), load_hf_tokenizer(directory)


@pytest.mark.parametrize("family", ["smollm2", "llama3", "qwen2.5"])
def test_the_trained_targets_are_exactly_the_assistant_contents_and_their_end_of_turn_tokens(tmp_path, family):
    directory, template, tokenizer = _family(tmp_path, family)
    [(ids, trained)] = assistant_examples(template, tokenizer, CONVERSATION)
    rows = ChatRows.from_examples([(ids, trained)], seq_len=len(ids) + 5)
    targets = rows.targets[0]
    eot = tokenizer.encode(END_OF_TURN[family], allowed_special="all")
    expected = [t for m in CONVERSATION if m["role"] == "assistant" for t in tokenizer.encode(m["content"]) + eot]
    assert targets[targets != -1].tolist() == expected
    assert (rows.inputs[0, : len(ids) - 1] == ids[:-1]).all()  # inputs: the whole conversation, padding after
    assert (targets[len(ids) - 1 :] == -1).all()


def test_qwen3_drops_earlier_thinking_so_each_assistant_turn_is_its_own_example(tmp_path):
    directory, template, tokenizer = _family(tmp_path, "qwen3")
    thinking = [*CONVERSATION[:2], {"role": "assistant", "content": "<think>\nblue\n</think>\n\nBlue."}]
    examples = assistant_examples(template, tokenizer, [*thinking, *CONVERSATION[3:]])
    assert len(examples) == 2  # the first turn's <think> block is gone from the whole, so it is split
    first_ids, first_trained = examples[0]
    assert tokenizer.decode(first_ids[first_trained].tolist()).startswith("<think>\nblue\n</think>")
    last_ids, last_trained = examples[1]
    # the template writes an empty thinking block into the last assistant turn: the model learns to write it
    assert tokenizer.decode(last_ids[last_trained].tolist()) == "<think>\n\n</think>\n\nRed, or green.<|im_end|>"


def test_a_long_conversation_is_truncated_to_the_row(tmp_path):
    directory, template, tokenizer = _family(tmp_path, "smollm2")
    [(ids, trained)] = assistant_examples(template, tokenizer, CONVERSATION)
    rows = ChatRows.from_examples([(ids, trained)], seq_len=len(ids) - 4)
    assert rows.inputs.shape == (1, len(ids) - 4)
    assert (rows.inputs[0] == ids[: len(ids) - 4]).all()
    assert (rows.targets[0] == np.where(trained[1 : len(ids) - 3], ids[1 : len(ids) - 3], -1)).all()


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("not json", "line 2: not JSON"),
        ('{"text": "hi"}', 'line 2: expected an object {"messages"'),
        ('{"messages": [{"role": "user"}]}', "line 2: messages[0] must have a string 'content'"),
        ('{"messages": [{"role": "user", "content": "hi"}]}', "line 2: the conversation has no assistant message"),
    ],
)
def test_a_bad_line_is_refused_with_its_file_and_line(tmp_path, line, expected):
    path = tmp_path / "chat.jsonl"
    path.write_text(json.dumps({"messages": CONVERSATION}) + "\n" + line + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="chat.jsonl:" + expected.split(":", 1)[0].split()[-1]) as err:
        read_chat_jsonl(path)
    assert expected.split(": ", 1)[1] in str(err.value)


def test_chat_rows_hold_out_the_last_conversations(tmp_path):
    directory, template, tokenizer = _family(tmp_path, "smollm2")
    path = tmp_path / "chat.jsonl"
    lines = [
        {"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]}
        for i in range(10)
    ]
    lines[3]["messages"][0]["content"] = "a long question " * 40  # its answer falls past the row: the row is dropped
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    with pytest.raises(ValueError, match="no assistant token of the training conversations fits in --seq-len 8"):
        chat_rows(path, directory, tokenizer, seq_len=8)  # SmolLM2's default system prompt fills the row
    train, val = chat_rows(path, directory, tokenizer, seq_len=128)
    assert (len(train), len(val)) == (8, 1)
    assert ((train.targets != -1).sum(axis=1) > 0).all()
    [(ids, _)] = assistant_examples(template, tokenizer, lines[9]["messages"])
    assert (val.inputs[0, : len(ids) - 1] == ids[:-1]).all()
