"""Micro-benchmark of the remoting send path's own work (one process, no I/O).

Run: ``.venv/bin/python -m tests.bench.bench_remoting_codec [--batch N] [--sends S] [--runs R]``.
A SEND_BATCH_MESSAGE frame as ``rip5 bench remoting`` sends it (``--batch``
messages of 1 KiB, each with a ``UNIQ_KEY``, short header keys, JSON header)
goes through what the broker does with it besides storing it:

- ``decode``: the frame decoder hands out the command;
- ``messages``: the send header is read and the batch body becomes the domain
  messages the producer processor stores (``convert.messages_from_send``);
- ``answer``: the answer's fields (an offset message id per message) and its frame.

Prints the least over R runs of each step's CPU time (``time.process_time``)
per message, in microseconds, and their sum. Not a test: pytest does not collect it.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from broker.domain import QueueRef, SendResult
from broker.remoting import convert
from broker.remoting.service import MessageIds
from protocol.remoting import headers, messages
from protocol.remoting.codes import RequestCode, ResponseCode
from protocol.remoting.frames import FrameDecoder, RemotingCommand, encode

BODY = bytes(range(256)) * 4
STORE_ADDRESS = "127.0.0.1:8080"


def send_frame(batch: int) -> bytes:
    """A SEND_BATCH_MESSAGE frame of ``batch`` messages, as the bench sends it."""
    records = [
        messages.BatchRecord(0, BODY, {messages.UNIQUE_ID: f"{i:032X}"}) for i in range(batch)
    ]
    fields = {"a": "bench-producer", "b": "bench", "c": "TBW102", "d": "16", "e": "3",
              "f": "0", "g": "1700000000000", "h": "0", "i": "", "j": "0", "k": "false",
              "m": "true"}  # fmt: skip
    body = messages.format_batch(records)
    command = RemotingCommand(RequestCode.SEND_BATCH_MESSAGE, 7, 0, "JAVA", 1, None, fields, body)
    return encode(command)


def cpu_us_per_message(step: Callable[[], object], sends: int, batch: int) -> float:
    """CPU microseconds per message of ``sends`` calls of ``step`` (``batch`` messages each)."""
    start = time.process_time()
    for _ in range(sends):
        step()
    return (time.process_time() - start) / (sends * batch) * 1e6


def main() -> None:
    """Parse the options, time each step, print the least."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--sends", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    frame = send_frame(args.batch)
    new_id = MessageIds()

    def decode() -> RemotingCommand:
        decoder = FrameDecoder()
        decoder.receive(frame)
        command = decoder.next_command()
        assert isinstance(command, RemotingCommand)
        return command

    request = decode()

    def to_messages() -> list[object]:
        header = headers.send_header(request.ext_fields, short_keys=True)
        built, _named = convert.messages_from_send(
            header,
            request.body,
            batch=True,
            born_host="127.0.0.1:50000",
            now_ms=1_700_000_000_000,
            new_id=new_id,
            fifo_topic=False,
        )
        return list(built)

    header = headers.send_header(request.ext_fields, short_keys=True)
    built, named = convert.messages_from_send(
        header, request.body, batch=True, born_host="127.0.0.1:50000",
        now_ms=1_700_000_000_000, new_id=new_id, fifo_topic=False,
    )  # fmt: skip
    queue = QueueRef("bench", 3)
    results = [SendResult(queue, 1_000_000 + i, 1_700_000_000_000) for i in range(args.batch)]

    def answer() -> bytes:
        fields = convert.send_response_fields(built, named, results, STORE_ADDRESS)
        return encode(request.reply(ResponseCode.SUCCESS, ext_fields=fields))

    steps: dict[str, Callable[[], object]] = {
        "decode": decode,
        "messages": to_messages,
        "answer": answer,
    }
    least: dict[str, float] = {}
    for name, step in steps.items():
        step()  # warm
        least[name] = min(
            cpu_us_per_message(step, args.sends, args.batch) for _ in range(args.runs)
        )
    print(f"remoting send path, {args.batch} messages of {len(BODY)} B a send, CPU us/message:")
    for name, value in least.items():
        print(f"  {name:<9} {value:7.2f}")
    print(f"  {'total':<9} {sum(least.values()):7.2f}")


if __name__ == "__main__":
    main()
