from protocol import errors


def test_codes_are_unique_and_in_append_only_order() -> None:
    numbers = [code.number for code in errors.all_codes()]
    assert numbers == sorted(set(numbers))
    names = [code.name for code in errors.all_codes()]
    assert len(names) == len(set(names))


def test_unknown_number_reads_as_internal() -> None:
    assert errors.by_number(99_999) is errors.INTERNAL
    assert errors.by_number(errors.NOT_LEADER.number) is errors.NOT_LEADER


def test_not_leader_asks_for_a_route_refresh() -> None:
    assert errors.NOT_LEADER.retriable
    assert errors.NOT_LEADER.refresh_route
    assert not errors.BAD_REQUEST.retriable
