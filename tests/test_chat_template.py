"""The chat template renderer (numforge/data/chat_template.py) against transformers' apply_chat_template."""

import sys

import pytest
from chat_templates import FAMILIES, chat_directory

from numforge.data.chat_template import CHAT_INSTALL_HINT, ChatTemplate

pytest.importorskip("jinja2")

SYSTEM = {"role": "system", "content": "You answer in one line."}
CONVERSATIONS = {
    "one user message": [{"role": "user", "content": "Hi"}],
    "system, user, assistant": [SYSTEM, {"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}],
    "multi-turn": [
        SYSTEM,
        {"role": "user", "content": "  Name a colour.\n"},
        {"role": "assistant", "content": "Blue.  "},
        {"role": "user", "content": "Another, in Japanese? 東京 café 👩‍👩‍👧"},
        {"role": "assistant", "content": "<think>\nred\n</think>\n\n赤 (aka)."},
        {"role": "user", "content": "Thanks"},
    ],
    "ends with the assistant": [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"},
        {"role": "assistant", "content": "d"},
    ],
}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family_dir(request, tmp_path_factory):
    return request.param, chat_directory(tmp_path_factory.mktemp("chat") / request.param, request.param)


@pytest.mark.parametrize("add_generation_prompt", [False, True])
@pytest.mark.parametrize("name", sorted(CONVERSATIONS))
def test_render_equals_transformers_byte_for_byte(family_dir, name, add_generation_prompt):
    transformers = pytest.importorskip("transformers")
    family, directory = family_dir
    messages = CONVERSATIONS[name]
    theirs = transformers.AutoTokenizer.from_pretrained(directory).apply_chat_template(
        messages, tokenize=False, add_generation_prompt=add_generation_prompt
    )
    ours = ChatTemplate.from_directory(directory).render(messages, add_generation_prompt=add_generation_prompt)
    assert ours.encode("utf-8") == theirs.encode("utf-8")


def test_chat_template_jinja_beside_the_config_and_template_variables(tmp_path):
    """transformers 5 saves the template as chat_template.jinja; a keyword (Qwen3's enable_thinking) reaches it."""
    transformers = pytest.importorskip("transformers")
    directory = chat_directory(tmp_path / "qwen3", "qwen3", jinja_file=True)
    messages = CONVERSATIONS["one user message"]
    theirs = transformers.AutoTokenizer.from_pretrained(directory).apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, enable_thinking=False
    )
    ours = ChatTemplate.from_directory(directory).render(messages, add_generation_prompt=True, enable_thinking=False)
    assert ours == theirs and ours.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_helpers_as_transformers_gives_them(tmp_path):
    """tojson (no HTML escaping, non-ASCII kept), strftime_now, bos_token/eos_token, loop controls."""
    transformers = pytest.importorskip("transformers")
    directory = chat_directory(tmp_path / "llama3", "llama3")
    source = (
        "{{ bos_token }}{{ strftime_now('%Y') }}|{% for m in messages %}{% if loop.index0 > 0 %}{% break %}{% endif %}"
        "{{ m | tojson }}{{ m | tojson(indent=2) }}{% endfor %}|{{ eos_token }}"
    )
    messages = [{"role": "user", "content": "<b>&'é"}, {"role": "assistant", "content": "never"}]
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    theirs = tokenizer.apply_chat_template(messages, tokenize=False, chat_template=source)
    ours = ChatTemplate(source, ChatTemplate.from_directory(directory).special_tokens).render(messages)
    assert ours == theirs
    assert ours.startswith("<|begin_of_text|>") and '"<b>&\'é"' in ours and "never" not in ours


def test_raise_exception_is_a_value_error_naming_the_message():
    template = ChatTemplate("{% if messages[0].role != 'user' %}{{ raise_exception('users first') }}{% endif %}ok")
    assert template.render([{"role": "user", "content": "x"}]) == "ok"
    with pytest.raises(ValueError, match="users first"):
        template.render([{"role": "assistant", "content": "x"}])


@pytest.mark.parametrize(
    "source",
    [
        "{{ messages.append(1) }}",  # a list changed in place (the immutable sandbox)
        "{% set ns = namespace(_hidden=1) %}{{ ns._hidden }}",  # an underscore name on a namespace
        "{% set ns = namespace(a=1) %}{% set ns._b = 2 %}{{ ns.a }}",
        "{{ cycler.__init__.__globals__ }}",  # a function's globals
        "{{ dict(a=1) | tojson }}{{ namespace(a=2).a }}",  # allowed: both render it
    ],
)
def test_the_sandbox_refuses_what_transformers_refuses(source):
    """Each template either renders the same text in both, or fails in both (ours: a ValueError)."""
    pytest.importorskip("transformers")
    jinja2 = pytest.importorskip("jinja2")
    from transformers.utils.chat_template_utils import render_jinja_template

    messages = [{"role": "user", "content": "x"}]
    try:
        theirs = render_jinja_template([messages], chat_template=source)[0][0]
    except jinja2.exceptions.TemplateError:
        with pytest.raises(ValueError, match="failed on this conversation"):
            ChatTemplate(source).render(messages)
    else:
        assert ChatTemplate(source).render(messages) == theirs != ""


@pytest.mark.parametrize(
    "messages, error",
    [
        ([], TypeError),
        ("hi", TypeError),
        ([{"role": "user"}], ValueError),
        ([{"role": "user", "content": 3}], ValueError),
        (["hi"], TypeError),
    ],
)
def test_bad_messages_are_refused(messages, error):
    with pytest.raises(error, match="messages"):
        ChatTemplate("{{ messages }}").render(messages)


def test_a_directory_without_a_template_and_a_broken_template_are_named(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text('{"eos_token": "</s>"}', encoding="utf-8")
    with pytest.raises(ValueError, match="no chat template"):
        ChatTemplate.from_directory(tmp_path)
    with pytest.raises(ValueError, match="does not parse: line 1"):
        ChatTemplate("{% for m in messages %}")


def test_without_jinja2_the_message_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "jinja2", None)
    with pytest.raises(ImportError, match=CHAT_INSTALL_HINT.replace("[", r"\[").replace("]", r"\]")):
        ChatTemplate("{{ messages }}")
