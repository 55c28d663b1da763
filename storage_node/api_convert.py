"""The storage API's requests and responses to and from partition commands and results.

Validation with clear errors (``BadCommand`` naming the cause) and conversion
only; the service (:mod:`storage_node.service`) proposes and answers.

PURE.
"""

from __future__ import annotations

import operator

from protocol import sql92
from protocol.filters import MATCH_ALL, FilterKind
from protocol.records import MessageRecord, RecordCorrupted, unpack_records
from protocol.storage_api import (
    AppendOutcome,
    AppendRequest,
    AppendResponse,
    ReceiveRequest,
    to_record,
)
from protocol.vocabulary import Placement
from storage_node.errors import BadCommand
from storage_node.partition.commands import InitialPosition, Receive
from storage_node.partition.queues import RecordOutcome
from storage_node.partition.results import AppendResult


def append_response(result: AppendResult, now_ms: int) -> AppendResponse:
    """The answer to an append: in the queued form when every record was queued for
    the first time at consecutive offsets (see ``AppendResponse``), else listed."""
    run = result.queued_run()
    if run is not None:
        return AppendResponse([], now_ms, list(run.message_ids), run.first_offset)
    outcomes = result.outcomes
    first = outcomes[0].queue_offset if outcomes else -1
    if (
        first >= 0
        and not any(map(_duplicate, outcomes))
        and set(map(_placement, outcomes)) == _QUEUED_ONLY
        and list(map(_queue_offset, outcomes)) == list(range(first, first + len(outcomes)))
    ):
        return AppendResponse([], now_ms, list(map(_message_id, outcomes)), first)
    return AppendResponse(
        [
            AppendOutcome(o.message_id, int(o.placement), o.queue_offset, o.duplicate)
            for o in outcomes
        ],
        now_ms,
    )


_duplicate = operator.itemgetter(RecordOutcome._fields.index("duplicate"))
_placement = operator.itemgetter(RecordOutcome._fields.index("placement"))
_queue_offset = operator.itemgetter(RecordOutcome._fields.index("queue_offset"))
_message_id = operator.itemgetter(RecordOutcome._fields.index("message_id"))
_QUEUED_ONLY = {Placement.QUEUED}
_record_queue = operator.itemgetter(
    MessageRecord._fields.index("topic"), MessageRecord._fields.index("queue_id")
)


def append_records(request: AppendRequest) -> tuple[list[MessageRecord], bytes | None]:
    """The records of an append, every one of its queue, and their packed arrays when
    the request's ``records`` bytes may go into the log entry as they are."""
    items: bytes | None = None
    if request.records:
        if request.messages:
            raise BadCommand("an append carries messages or records, not both")
        try:
            packed = unpack_records(request.records)
        except RecordCorrupted as exc:
            raise BadCommand(f"the append's records: {exc}") from exc
        records = list(packed.records)
        items = packed.items
    else:
        records = []
        for message in request.messages:
            try:
                records.append(to_record(message))
            except ValueError as exc:
                raise BadCommand(f"message {message.message_id!r}: {exc}") from exc
    if not records:
        raise BadCommand("an append needs at least one message")
    queue = (request.topic, request.queue_id)
    if any(map(queue.__ne__, map(_record_queue, records))):
        stray = next(record for record in records if record[:2] != queue)
        raise BadCommand(
            f"message {stray.message_id!r} is for {stray.topic}:{stray.queue_id}, "
            f"not {request.topic}:{request.queue_id}"
        )
    return records, items


def receive_command(request: ReceiveRequest, now_ms: int) -> Receive:
    """The Receive command a receive request proposes, stamped ``now_ms``."""
    return Receive(
        now_ms=now_ms,
        group=request.group,
        topic=request.topic,
        queue_id=request.queue_id,
        max_messages=request.max_messages,
        invisible_duration_ms=request.invisible_duration_ms,
        max_delivery_attempts=request.max_delivery_attempts,
        # A SQL92 filter goes in as its verdicts (see receive_filter), its tag part as "*".
        filter_expression=(
            MATCH_ALL if request.filter_kind == FilterKind.SQL else request.filter_expression
        ),
        fifo=request.fifo,
        initial_position=(
            InitialPosition.LATEST if request.start_at_latest else InitialPosition.EARLIEST
        ),
        attempt_id=request.attempt_id,
    )


def sql_filter(filter_kind: int, filter_expression: str) -> sql92.Sql92Filter | None:
    """The compiled SQL92 filter of a receive or read (cached by ``sql92.parse``); None
    for a tag filter. A bad expression raises ``sql92.FilterExpressionError``
    (ILLEGAL_FILTER_EXPRESSION, naming the position), an unknown kind BadCommand."""
    if filter_kind == FilterKind.SQL:
        return sql92.parse(filter_expression)
    if filter_kind not in (FilterKind.UNSPECIFIED, FilterKind.TAG):
        raise BadCommand(f"unknown filter kind {filter_kind}")
    return None
