"""``numforge train --init-from DIR --chat FILE.jsonl``: a transformers-saved chat model fine-tuned on conversations,
the loss on the assistant's tokens only, resumed exactly."""

import json

import numpy as np
import pytest
from chat_templates import chat_model_directory, write_chat_jsonl
from helpers import reseal

from numforge import checkpoint, cli

pytest.importorskip("jinja2")


def straight_and_resumed(tmp_path, flags, before_resuming=lambda stopped: None):
    """``flags`` trained 4 steps straight, and 2 steps then resumed to 4 (``before_resuming(stopped)`` between):
    the two checkpoints, and the two loss logs (which must match)."""
    common = [*flags, "--no-progress", "--eval-every", "2", "--save-every", "2", "--lr", "1e-3", "--threads", "1"]
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    assert cli.main(["train", *common, "--out", str(straight), "--max-steps", "4"]) == 0
    assert cli.main(["train", *common, "--out", str(stopped), "--max-steps", "2"]) == 0
    before_resuming(stopped)
    assert cli.main(["train", "--resume", str(stopped), "--max-steps", "4", "--no-progress", "--threads", "1"]) == 0
    a, b = checkpoint.load_checkpoint(straight), checkpoint.load_checkpoint(stopped)
    assert a.state["step"] == b.state["step"] == 4
    assert a.params.keys() == b.params.keys() and all(np.array_equal(a.params[n], b.params[n]) for n in a.params)
    log = (straight / "loss.csv").read_text(encoding="utf-8")
    assert log == (stopped / "loss.csv").read_text(encoding="utf-8")
    return a, log


@pytest.mark.parametrize("adapters", [[], ["--lora", "q,v"]], ids=["full", "lora"])
def test_a_packed_chat_fine_tune_resumed_equals_the_straight_run(tmp_path, capsys, adapters):
    directory = chat_model_directory(tmp_path / "model", "llama3")  # its examples pack 11 into 4 rows of 96
    chat = write_chat_jsonl(tmp_path / "chat.jsonl")
    flags = ["--init-from", str(directory), "--chat", str(chat), "--seq-len", "96", "--batch-size", "2", *adapters]
    final, _ = straight_and_resumed(tmp_path, flags)
    assert all(".lora_" in n for n in final.params) == bool(adapters)  # a LoRA run checkpoints its adapters alone
    assert final.state["data"]["chat_template_dir"] == str(directory) and final.state["data"]["chat_packed"]
    said = capsys.readouterr().out
    assert "chat: 11 examples packed into 4 rows of 96 positions (11 unpacked): 74.0 tokens a row" in said


def test_an_unpacked_run_and_one_from_before_packing_resume_unpacked(tmp_path, capsys):
    directory = chat_model_directory(tmp_path / "model", "llama3")
    chat = write_chat_jsonl(tmp_path / "chat.jsonl")
    flags = ["--init-from", str(directory), "--chat", str(chat), "--seq-len", "96", "--batch-size", "2"]

    def as_before_packing(stopped):  # a checkpoint written before packing records no chat_packed
        state_file = stopped / "ckpt-00000002" / "state.json"
        state = json.loads(state_file.read_text(encoding="utf-8"))
        del state["data"]["chat_packed"]
        state_file.write_text(json.dumps(state), encoding="utf-8")
        reseal(state_file.parent)

    final, unpacked_log = straight_and_resumed(tmp_path / "unpacked", [*flags, "--no-pack"], as_before_packing)
    assert final.state["data"]["chat_packed"] is False
    assert "chat: 11 examples, one a row of 96 positions (--no-pack; packed: 4 rows)" in capsys.readouterr().out
    assert cli.main(["train", *flags, "--no-progress", "--max-steps", "4", "--eval-every", "2", "--lr", "1e-3",
                     "--threads", "1", "--out", str(tmp_path / "packed")]) == 0  # fmt: skip
    assert (tmp_path / "packed" / "loss.csv").read_text(encoding="utf-8") != unpacked_log  # other rows, other losses


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ([], "--chat fine-tunes the chat model of --init-from"),
        (["--init-from", "m", "--data", "x.txt"], "--chat fine-tunes the chat model of --init-from"),
        (["--resume", "r"], "--chat cannot change when resuming"),
        (["--resume", "r", "--no-pack"], "--chat, --pack cannot change when resuming"),
    ],
)
def test_chat_needs_a_chat_models_directory_and_a_new_run(tmp_path, capsys, flags, message):
    chat = write_chat_jsonl(tmp_path / "chat.jsonl")
    assert cli.main(["train", "--chat", str(chat), *flags]) == 2
    assert message in capsys.readouterr().err


def test_pack_needs_chat(capsys):
    assert cli.main(["train", "--no-pack", "--max-steps", "1"]) == 2
    assert "--pack and --no-pack lay out the conversations of --chat: give --chat" in capsys.readouterr().err


def test_a_bad_chat_line_is_refused_before_training(tmp_path, capsys):
    directory = chat_model_directory(tmp_path / "model")
    chat = write_chat_jsonl(tmp_path / "chat.jsonl")
    chat.write_text(chat.read_text(encoding="utf-8") + '{"messages": "hi"}\n', encoding="utf-8")
    args = ["train", "--init-from", str(directory), "--chat", str(chat), "--out", str(tmp_path / "o")]
    assert cli.main([*args, "--seq-len", "96", "--no-progress"]) == 2
    assert "chat.jsonl:13: messages must be a non-empty list" in capsys.readouterr().err


def test_the_assistant_only_loss_equals_transformers_loss_with_the_other_labels_masked(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from numforge.backend import asarray
    from numforge.checkpoint import load_model
    from numforge.data.chat import chat_rows

    directory, chat = chat_model_directory(tmp_path / "model"), write_chat_jsonl(tmp_path / "chat.jsonl")
    model, tokenizer = load_model(directory)
    train, _ = chat_rows(chat, directory, tokenizer, seq_len=96)
    x, y = train.inputs[:4], train.targets[:4]  # (4,T) each, most targets ignored
    loss, _ = model.forward(asarray(x), asarray(y), for_backward=False)
    reference = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float64)
    logits = reference(torch.from_numpy(x)).logits  # (4,T,V)
    labels = torch.from_numpy(y).masked_fill(torch.from_numpy(y) == -1, -100)  # PyTorch's ignore index
    expected = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
    assert 0 < (y != -1).sum() < y.size / 4  # the mask matters: a mean over every target would differ
    assert float(loss) == pytest.approx(expected.item(), rel=1e-5)


@pytest.mark.parametrize("adapters", [[], ["--lora", "q,v"]], ids=["full", "lora"])
def test_the_fine_tuned_run_and_its_conversion_chat_with_the_chat_models_template(tmp_path, monkeypatch, adapters):
    import io

    from numforge.data.chat_template import template_source

    directory, chat = chat_model_directory(tmp_path / "model"), write_chat_jsonl(tmp_path / "chat.jsonl")
    args = ["train", "--init-from", str(directory), "--chat", str(chat), "--seq-len", "96", "--batch-size", "2"]
    args += [*adapters, "--no-progress", "--max-steps", "2", "--eval-every", "2", "--out", str(tmp_path / "run")]
    assert cli.main(args) == 0
    assert cli.main(["convert", str(tmp_path / "run"), str(tmp_path / "hf")]) == 0
    assert (tmp_path / "hf" / "chat_template.jinja").read_text(encoding="utf-8") == template_source(directory)
    replies = []
    for model in ("run", "hf"):  # the run reads its template from the chat model it was tuned from
        monkeypatch.setattr("sys.stdin", io.StringIO("Hi\n"))
        out = io.StringIO()
        monkeypatch.setattr("sys.stdout", out)
        chat_args = ["chat", "--checkpoint", str(tmp_path / model), "--temperature", "0", "--max-new-tokens", "6"]
        assert cli.main(chat_args) == 0
        replies.append(out.getvalue())
    assert replies[0] == replies[1] and "> Hi" in replies[0]
