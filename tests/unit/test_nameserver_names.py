"""nameserver.names: RocketMQ's rules for topic and consumer group names."""

from __future__ import annotations

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nameserver import names
from nameserver.errors import InvalidName

ALLOWED = string.ascii_letters + string.digits + "%-_|"


@settings(deadline=None)
@given(st.text(alphabet=ALLOWED, min_size=1, max_size=127))
def test_valid_topic_names_pass(name: str) -> None:
    names.validate_topic(name)


@settings(deadline=None)
@given(st.text(alphabet=ALLOWED, min_size=1, max_size=120))
def test_valid_group_names_pass(name: str) -> None:
    names.validate_consumer_group(name)


@settings(deadline=None)
@given(
    st.text(alphabet=ALLOWED, max_size=60),
    st.characters().filter(lambda ch: ch not in ALLOWED),
    st.text(alphabet=ALLOWED, max_size=60),
)
def test_any_other_character_is_refused_by_position(head: str, bad: str, tail: str) -> None:
    with pytest.raises(InvalidName, match=f"at position {len(head)}"):
        names.validate_topic(head + bad + tail)


@pytest.mark.parametrize(
    ("validate", "name", "message"),
    [
        (names.validate_topic, "", "topic name is empty"),
        (names.validate_topic, "a" * 128, "128 characters long; the maximum is 127"),
        (names.validate_consumer_group, "g" * 121, "121 characters long; the maximum is 120"),
        (names.validate_consumer_group, "", "consumer group name is empty"),
        (names.validate_topic, "é", "'é' at position 0"),
        (names.validate_cluster, "a b", "' ' at position 1"),
    ],
)
def test_errors_name_the_rule(validate: object, name: str, message: str) -> None:
    assert callable(validate)
    with pytest.raises(InvalidName, match=message) as caught:
        validate(name)
    assert caught.value.code.name == "INVALID_NAME"
