"""numforge.table.format_table: columns under a header and a rule, one alignment or one per column."""

import pytest

from numforge.table import format_table


def test_one_alignment_for_every_column():
    assert format_table(("T", "ms"), [("512", "1.2"), ("1024", "4.8")]).splitlines() == [
        "   T   ms",
        "----  ---",
        " 512  1.2",
        "1024  4.8",
    ]


def test_text_left_numbers_right():
    text = format_table(("name", "norm"), [("q", "1.5"), ("long name", "10")], align=("left", "right"))
    assert text.splitlines() == ["name       norm", "---------  ----", "q           1.5", "long name    10"]


def test_a_bad_alignment_is_refused():
    with pytest.raises(ValueError, match="one of them per column"):
        format_table(("a", "b"), [("1", "2")], align=("left",))
    with pytest.raises(ValueError, match="'left' or 'right'"):
        format_table(("a",), [("1",)], align="center")
