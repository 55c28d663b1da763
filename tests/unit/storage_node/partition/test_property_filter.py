"""SQL92 filters on a receive: the leader's verdicts, and how apply uses them."""

from __future__ import annotations

import dataclasses

import msgpack

from protocol import sql92
from storage_node.partition import commands
from storage_node.partition.commands import FilteredReceive, Receive
from storage_node.partition.property_filter import EVALUATED_MAX, evaluate
from storage_node.partition.results import ReceiveResult
from tests.unit.storage_node.partition.harness import Harness, record

EVEN = sql92.parse("n IS NOT NULL AND n IN ('0', '2', '4', '6', '8')")


def _receive(h: Harness, max_messages: int = 32, group: str = "g") -> Receive:
    return Receive(h.now_ms, group, "orders", 0, max_messages, 30_000, 16)


def _filtered(h: Harness, sql: sql92.Sql92Filter, max_messages: int = 32) -> ReceiveResult:
    """Evaluate on the state as the leader does, then apply through the log codec."""
    command, _more = evaluate(h.state, h.log.__getitem__, _receive(h, max_messages), sql)
    result = h.apply(command)
    assert isinstance(result, ReceiveResult)
    return result


def _ids(h: Harness, result: ReceiveResult) -> list[str]:
    return [h.resolve(d.entry, "orders", 0).message_id for d in result.deliveries]


def test_only_matching_messages_are_handed_out_and_the_others_are_done() -> None:
    h = Harness()
    h.append(*(record(f"m{i}", properties=(("n", str(i)),)) for i in range(5)))
    h.append(record("m5"), record("m6", properties=(("n", "6"),)))  # m5: no property
    result = _filtered(h, EVEN)
    assert _ids(h, result) == ["m0", "m2", "m4", "m6"]
    # The unmatched ones are finished for the group: nothing comes back, even
    # after the leases end; another group sees every message.
    h.advance(60_000)
    again = _filtered(h, EVEN)
    assert _ids(h, again) == ["m0", "m2", "m4", "m6"]
    assert [d.delivery_attempt for d in again.deliveries] == [2, 2, 2, 2]
    assert len(h.receive("other").deliveries) == 7
    h.state.check_invariants()


def test_evaluation_stops_at_max_messages_and_leaves_the_rest_fresh() -> None:
    h = Harness()
    h.append(*(record(f"m{i}", properties=(("n", str(i % 10)),)) for i in range(10)))
    command, more = evaluate(h.state, h.log.__getitem__, _receive(h, 2), EVEN)
    assert more
    assert command.evaluated_end == 3  # m0 and m2 matched; m1 did not
    assert command.unmatched == (1,)
    result = h.apply(command)
    assert isinstance(result, ReceiveResult)
    assert _ids(h, result) == ["m0", "m2"]
    rest = _filtered(h, EVEN)
    assert _ids(h, rest) == ["m4", "m6", "m8"]


def test_tags_and_keys_are_visible_to_the_filter() -> None:
    h = Harness()
    h.append(
        record("a", tag="TagA", keys=("k1", "k2")),
        record("b", tag="TagB"),
        record("c"),
    )
    sql = sql92.parse("TAGS = 'TagA' AND KEYS CONTAINS 'k2'")
    assert _ids(h, _filtered(h, sql)) == ["a"]


def test_verdicts_stay_right_when_a_concurrent_receive_applies_first() -> None:
    h = Harness()
    h.append(*(record(f"m{i}", properties=(("n", str(i)),)) for i in range(6)))
    first, _ = evaluate(h.state, h.log.__getitem__, _receive(h, 1), EVEN)
    second, _ = evaluate(h.state, h.log.__getitem__, _receive(h, 32), EVEN)
    taken = h.apply(first)
    assert isinstance(taken, ReceiveResult)
    assert _ids(h, taken) == ["m0"]
    rest = h.apply(second)  # evaluated before `first` applied: m0 is passed over
    assert isinstance(rest, ReceiveResult)
    assert _ids(h, rest) == ["m2", "m4"]
    h.state.check_invariants()


def test_no_fresh_offset_hands_out_expired_leases_only() -> None:
    h = Harness()
    h.append(record("m0", properties=(("n", "0"),)), record("m1", properties=(("n", "1"),)))
    assert _ids(h, _filtered(h, EVEN)) == ["m0"]
    command, more = evaluate(h.state, h.log.__getitem__, _receive(h), EVEN)
    assert (command.evaluated_end, command.unmatched, more) == (0, (), False)
    h.advance(60_000)
    assert _ids(h, _filtered(h, EVEN)) == ["m0"]  # redelivered, attempt 2


def test_a_long_unmatched_run_is_evaluated_in_bounded_steps() -> None:
    h = Harness()
    for start in range(0, EVALUATED_MAX + 10, 100):
        h.append(*(record(f"x{i}") for i in range(start, start + 100)))
    h.append(record("hit", properties=(("n", "2"),)))
    command, more = evaluate(h.state, h.log.__getitem__, _receive(h), EVEN)
    assert more
    assert len(command.unmatched) == EVALUATED_MAX
    h.apply(command)
    assert _ids(h, _filtered(h, EVEN)) == ["hit"]


def test_a_plain_receive_keeps_its_encoding_and_verdicts_have_their_own_op() -> None:
    h = Harness()
    plain = _receive(h)
    data = commands.encode(plain)
    assert data[0] == commands.Op.RECEIVE
    assert len(msgpack.unpackb(data[1:])) == len(dataclasses.fields(Receive))
    command, _more = evaluate(h.state, h.log.__getitem__, plain, EVEN)
    assert isinstance(command, FilteredReceive)
    filtered = dataclasses.replace(command, evaluated_end=7, unmatched=(1, 3))
    encoded = commands.encode(filtered)
    assert encoded[0] == commands.Op.FILTERED_RECEIVE
    assert commands.decode(encoded) == filtered
