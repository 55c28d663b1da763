"""Tag filter expressions, as RocketMQ matches them."""

from __future__ import annotations

import pytest

from protocol.filters import TagFilter


@pytest.mark.parametrize("expression", ["*", "", "  ", " * ", " || "])
def test_match_all_expressions_match_every_message(expression: str) -> None:
    tag_filter = TagFilter.parse(expression)
    assert tag_filter.matches_all
    assert tag_filter.matches("")
    assert tag_filter.matches("anything")
    assert tag_filter.expression() == "*"


def test_a_tag_list_matches_its_tags_exactly() -> None:
    tag_filter = TagFilter.parse(" red ||blue|| ||")
    assert tag_filter.tags == frozenset({"red", "blue"})
    assert tag_filter.matches("red")
    assert tag_filter.matches("blue")
    assert not tag_filter.matches("re")
    assert not tag_filter.matches("Red")
    assert not tag_filter.matches("")  # an untagged message matches no specific tag
    assert tag_filter.expression() == "blue||red"
    assert TagFilter.parse(tag_filter.expression()) == tag_filter


def test_a_star_inside_a_list_is_a_literal_tag() -> None:
    tag_filter = TagFilter.parse("a || *")
    assert not tag_filter.matches_all
    assert tag_filter.matches("*")
    assert not tag_filter.matches("b")
