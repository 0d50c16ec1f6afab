"""numforge.files: one JSON reader, one error style: a ValueError naming the file and where in it it is wrong."""

import pytest

from numforge.files import parse_json, read_json, read_text


@pytest.mark.parametrize(
    "raw, message",
    [
        (b'{"a": 1,}', "config.json: line 1 column 9: Expecting property name enclosed in double quotes"),
        (b'{"a":\n  [1, 2', "config.json: line 2 column 8: Expecting ',' delimiter"),
        (b'{"a": "\xff"}', r"config.json: not UTF-8 text \(invalid start byte at byte 7\)"),
        (b"[" * 100_000, "config.json: JSON nested too deeply to read"),
        (b"1" * 5000, "config.json: Exceeds the limit"),
        (b"", "config.json: line 1 column 1: Expecting value"),
    ],
)
def test_bad_json_is_named_with_where_it_is_wrong(raw, message):
    with pytest.raises(ValueError, match=f"^{message}"):
        parse_json(raw, "config.json")


def test_the_type_asked_for_is_checked():
    assert parse_json('{"a": [1]}', "x", expect=dict) == {"a": [1]}
    assert parse_json(b"[1]", "x", expect=list) == [1]
    with pytest.raises(ValueError, match="^the body must hold a JSON object, got list$"):
        parse_json(b"[1]", "the body", expect=dict)


def test_files_are_named(tmp_path):
    path = tmp_path / "state.json"
    path.write_bytes(b'{"step": 4}')
    assert read_json(path, expect=dict) == {"step": 4}
    path.write_bytes(b'{"step": 4')
    with pytest.raises(ValueError, match=f"^{path}: line 1 column 11: Expecting ',' delimiter$"):
        read_json(path)
    with pytest.raises(ValueError, match=f"^{tmp_path} is a directory; expected a file$"):
        read_json(tmp_path)
    with pytest.raises(FileNotFoundError):  # an OSError names its file already
        read_json(tmp_path / "missing.json")
    path.write_bytes(b"a\r\nb\xff")
    with pytest.raises(ValueError, match=rf"^{path}: not UTF-8 text \(invalid start byte at byte 4\)$"):
        read_text(path)
    path.write_bytes(b"a\r\nb")
    assert read_text(path) == "a\nb"  # universal newlines, as open() reads text
