"""Mutation fuzzing of the pure decoders: seeded, counted, fast enough for millions of inputs.

Hypothesis (the ``test_*fuzz*`` files) shrinks what it finds but runs a few thousand
inputs a second; this driver runs plain seeded mutations of valid inputs (bit flips,
byte changes, insertions, cuts, truncation, duplicated slices: a repeated protobuf or
msgpack field) and random bytes, checks each target's contract, and counts. A long run:

    python -m tests.fuzzing --inputs 1000000 --seed 1 [TARGET ...]

prints one line per target with the inputs run and the seconds taken; a contract broken
raises ``FuzzFinding`` naming the target, seed, input index and the bytes (hex), which
``replay`` runs again.

Targets and their contracts:

- ``http2``: bytes into a server-side ``Http2Connection`` give events or ``FrameError``
  (then a GOAWAY naming its code is queued); what it queues is whole frames.
- ``angelia_frames``: ``angelia_rpc.framing.FrameDecoder.feed`` gives frames or a
  ``RemoteProtocolError`` (PROTOCOL_VIOLATION / FRAME_TOO_LARGE); ``check_hello``
  accepts or raises an ``AngeliaError``.
- ``angelia_codecs``: each codec's decoder gives a value of the type or an
  ``AngeliaError`` DECODE_FAILED.
- ``remoting``: the remoting ``FrameDecoder`` gives commands, ``Malformed`` or
  ``FrameError``; the body parsers give records or ``BodyError``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import hpack

from angelia_rpc.codec import CODEC_NAMES, codec_named
from angelia_rpc.errors import AngeliaError, RemoteProtocolError
from angelia_rpc.framing import (
    CANCEL,
    MESSAGE,
    REQUEST,
    FrameDecoder,
    check_hello,
    encode_frame,
    hello,
)
from protocol import errors, http2
from protocol.http2_connection import Http2Connection
from protocol.remoting import frames as remoting
from protocol.remoting import messages as remoting_messages
from protocol.remoting.codes import SerializeType
from protocol.remoting.errors import BodyError, FrameError
from tests.unit.test_angelia_codecs import Color, Everything, Inner
from tests.waiting import async_wait_until

Target = Callable[[bytes], None]


class FuzzFinding(AssertionError):
    """A target broke its contract on one input."""


def mutate(data: bytes, rng: random.Random) -> bytes:
    """``data`` with one to four mutations: a bit flipped, a byte replaced, random bytes
    inserted, a range cut, the tail truncated, or a slice duplicated in place."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        how = rng.randrange(6)
        at = rng.randint(0, len(out))
        if how == 0 and out:
            at = rng.randrange(len(out))
            out[at] ^= 1 << rng.randrange(8)
        elif how == 1 and out:
            out[rng.randrange(len(out))] = rng.randrange(256)
        elif how == 2:
            out[at:at] = rng.randbytes(rng.randint(1, 8))
        elif how == 3:
            del out[at : at + rng.randint(1, 16)]
        elif how == 4:
            del out[at:]
        else:
            end = min(len(out), at + rng.randint(1, 32))
            out[end:end] = bytes(out[at:end])
    return bytes(out)


def inputs(seeds: Sequence[bytes], rng: random.Random) -> bytes:
    """One input: a seed mutated (three times in four) or random bytes."""
    if rng.randrange(4):
        return mutate(rng.choice(seeds), rng)
    return rng.randbytes(rng.randint(0, 256))


# ------------------------------------------------------------------------------ http2

# A gRPC call's request headers, the seed of every HTTP/2 target.
REQUEST_HEADERS = [
    (b":method", b"POST"),
    (b":scheme", b"http"),
    (b":path", b"/apache.rocketmq.v2.MessagingService/SendMessage"),
    (b":authority", b"127.0.0.1"),
    (b"content-type", b"application/grpc"),
    (b"grpc-timeout", b"3S"),
]


def _http2_seeds() -> list[bytes]:
    block = hpack.Encoder().encode(REQUEST_HEADERS)
    opening = (
        http2.frame(http2.SETTINGS, 0, 0, http2.settings_payload([(4, 1 << 20), (5, 1 << 14)]))
        + http2.frame(http2.HEADERS, http2.END_HEADERS, 1, block)
        + http2.frame(http2.DATA, http2.END_STREAM, 1, b"\0\0\0\0\5hello")
    )
    more = (
        http2.frame(http2.PING, 0, 0, b"12345678")
        + http2.frame(http2.WINDOW_UPDATE, 0, 0, http2.U32.pack(1 << 16))
        + http2.frame(http2.HEADERS, 0, 3, block[:10])
        + http2.frame(http2.CONTINUATION, http2.END_HEADERS, 3, block[10:])
        + http2.frame(http2.RST_STREAM, 0, 3, http2.U32.pack(8))
        + http2.frame(http2.GOAWAY, 0, 0, http2.U32.pack(3) + http2.U32.pack(0))
    )
    return [opening, opening + more, opening + http2.frame(http2.SETTINGS, 1, 0, b"")]


def _whole_frames(data: bytes) -> None:
    buffer = bytearray(data)
    http2.split_frames(buffer, http2.FRAME_BYTES_LIMIT)
    if buffer:
        raise FuzzFinding("http2: a partial frame was queued")


def http2_target(data: bytes) -> None:
    """Feed the client preface then ``data`` (in two chunks) to a fresh server-side
    connection; one input in eight goes without the preface."""
    if len(data) % 8:
        data = http2.PREFACE + data
    server = Http2Connection(client_side=False, window_bytes=1 << 20, frame_bytes_max=1 << 20)
    server.initiate()
    _whole_frames(server.data_to_send())
    cut = len(data) // 2
    for chunk in (data[:cut], data[cut:]):
        try:
            server.receive_data(chunk)
        except http2.FrameError as error:
            frames = bytearray(server.data_to_send())
            parsed = http2.split_frames(frames, http2.FRAME_BYTES_LIMIT)
            if not parsed or parsed[-1][0] != http2.GOAWAY:
                raise FuzzFinding("http2: no GOAWAY after a connection error") from error
            if http2.U32.unpack_from(parsed[-1][3], 4)[0] != error.code:
                raise FuzzFinding("http2: the GOAWAY names another code") from error
            return
        _whole_frames(server.data_to_send())


# ------------------------------------------------------------------------------ angelia

_ANGELIA_LIMIT = 4096


def _angelia_frame_seeds() -> list[bytes]:
    one = encode_frame(
        REQUEST, 7, b"\x93\x01\xa1x\xc4\x00", flags=1, codec_id=1, timeout_ms=500,
        method=b"storage.append", frame_bytes_max=_ANGELIA_LIMIT,
    )  # fmt: skip
    two = encode_frame(MESSAGE, 7, b"\x91\x02", codec_id=1, frame_bytes_max=_ANGELIA_LIMIT)
    three = encode_frame(CANCEL, 7, b"", codec_id=1, frame_bytes_max=_ANGELIA_LIMIT)
    greeting = hello("msgpack", 1, "tcp", 1 << 20)
    return [one, one + two + three, greeting, greeting + one]


def angelia_frames_target(data: bytes) -> None:
    """Feed ``data`` to a frame decoder in two chunks; check a HELLO frame if one comes."""
    decoder = FrameDecoder(_ANGELIA_LIMIT)
    cut = len(data) // 3
    try:
        frames = decoder.feed(data[:cut]) + decoder.feed(data[cut:])
    except RemoteProtocolError as error:
        if error.code not in (errors.PROTOCOL_VIOLATION, errors.FRAME_TOO_LARGE):
            raise FuzzFinding(f"angelia_frames: protocol error with code {error.code}") from error
        return
    for frame in frames:
        with contextlib.suppress(AngeliaError):
            check_hello(frame, "msgpack", "tcp")


_SAMPLE = Everything(
    -5, 0.25, True, "topic-é", b"\0\xffbody", 2**40, [Inner(1, b"a"), Inner(2, b"")],
    {"a": 1, "bb": -2}, Color.GREEN, Inner(3, b"nested"), ["x", "yz"], {"k": Inner(4, b"")},
)  # fmt: skip


def _angelia_codec_target(name: str) -> tuple[Target, list[bytes]]:
    codec = codec_named(name)
    decode = codec.decoder(Everything)
    seeds = [codec.encoder(Everything)(_SAMPLE), codec.encoder(Inner)(Inner(9, b"q"))]

    def target(data: bytes) -> None:
        try:
            value = decode(data)
        except AngeliaError as error:
            if error.code != errors.DECODE_FAILED:
                raise FuzzFinding(f"angelia_codecs/{name}: code {error.code}") from error
            return
        if not isinstance(value, Everything):
            raise FuzzFinding(f"angelia_codecs/{name}: decoded a {type(value).__name__}")

    return target, seeds


def angelia_codecs() -> tuple[Target, list[bytes]]:
    """One target over every codec: the input's first byte picks the codec."""
    parts = [_angelia_codec_target(name) for name in CODEC_NAMES]
    seeds = [bytes([index]) + seed for index, (_t, ss) in enumerate(parts) for seed in ss]

    def target(data: bytes) -> None:
        if data:
            parts[data[0] % len(parts)][0](data[1:])

    return target, seeds


# ------------------------------------------------------------------------------ remoting


def _remoting_seeds() -> list[bytes]:
    command = remoting.RemotingCommand(
        code=310, opaque=4, flag=0, language="JAVA", version=453, remark="",
        ext_fields={"a": "topic", "b": "0", "e": "3", "i": "KEYS\x01k\x02"}, body=b"hello",
        serialize_type=SerializeType.JSON,
    )  # fmt: skip
    binary = remoting.RemotingCommand(
        code=11, opaque=5, flag=2, language="CPP", version=1, remark="why",
        ext_fields={"topic": "t"}, body=b"", serialize_type=SerializeType.ROCKETMQ,
    )  # fmt: skip
    record = remoting_messages.format_batch(
        [remoting_messages.BatchRecord(0, b"body", {"KEYS": "k", "TAGS": "t"})] * 2
    )
    return [
        b"\0" + remoting.encode(command),
        b"\0" + remoting.encode(command) + remoting.encode(binary),
        b"\1" + record,
        b"\2" + b"KEYS\x01k\x02TAGS\x01t\x02",
    ]


def remoting_target(data: bytes) -> None:
    """The first byte picks the stream decoder (0), the batch parser (1) or the
    properties parser (2); the rest is the input."""
    if not data:
        return
    kind, rest = data[0] % 3, data[1:]
    if kind == 0:
        decoder = remoting.FrameDecoder(1 << 16)
        decoder.receive(rest)
        try:
            while (decoded := decoder.next_command()) is not None:
                if not isinstance(decoded, remoting.RemotingCommand | remoting.Malformed):
                    raise FuzzFinding(f"remoting: decoded a {type(decoded).__name__}")
        except FrameError:
            return
        decoder.end_of_stream()
    elif kind == 1:
        with contextlib.suppress(BodyError):
            remoting_messages.parse_batch(rest)
        with contextlib.suppress(BodyError):
            remoting_messages.parse_message_exts(rest)
    else:
        remoting_messages.parse_properties(rest.decode(errors="replace"))


# ------------------------------------------------------------------------------ sockets


async def exchange(port: int, data: bytes, timeout_s: float = 15.0) -> bytes:
    """Send ``data`` on a new connection to 127.0.0.1:``port``, half-close, and read what
    the server sends until it closes (empty when it reset the connection first)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        writer.write_eof()
        return await asyncio.wait_for(reader.read(), timeout_s)
    except ConnectionResetError:
        return b""  # the server closed before reading everything: a connection error
    finally:
        writer.close()


def open_fds() -> int:
    """This process's open file descriptors."""
    return len(os.listdir("/proc/self/fd"))


async def settled(tasks_before: int, fds_before: int) -> None:
    """Wait until no more tasks and descriptors are open than before the fuzzing."""
    await async_wait_until(
        lambda: len(asyncio.all_tasks()) <= tasks_before, what="the fuzzed calls' tasks to end"
    )
    await async_wait_until(lambda: open_fds() <= fds_before, what="the sockets to close")


# ------------------------------------------------------------------------------ driver


def targets() -> dict[str, tuple[Target, list[bytes]]]:
    """Every pure target by name, with its seed inputs."""
    return {
        "http2": (http2_target, _http2_seeds()),
        "angelia_frames": (angelia_frames_target, _angelia_frame_seeds()),
        "angelia_codecs": angelia_codecs(),
        "remoting": (remoting_target, _remoting_seeds()),
    }


@dataclass(frozen=True, slots=True)
class Run:
    """What one target's run did."""

    target: str
    inputs: int
    seconds: float


def run(name: str, count: int, seed: int, progress: Callable[[Run], None] | None = None) -> Run:
    """Run ``count`` inputs of target ``name`` from ``seed``; FuzzFinding on a broken
    contract (an unexpected exception is one too)."""
    target, seeds = targets()[name]
    return run_target(name, target, seeds, count, seed, progress)


def run_target(
    name: str,
    target: Target,
    seeds: Sequence[bytes],
    count: int,
    seed: int,
    progress: Callable[[Run], None] | None = None,
    progress_every: int = 100_000,
) -> Run:
    """Run ``count`` inputs drawn from ``seeds`` through ``target`` (see :func:`run`);
    ``progress`` hears the inputs run so far every ``progress_every`` inputs."""
    rng = random.Random(f"{name}:{seed}")
    started_s = time.monotonic()
    for index in range(count):
        if progress is not None and index and index % progress_every == 0:
            progress(Run(name, index, time.monotonic() - started_s))
        data = inputs(seeds, rng)
        try:
            target(data)
        except FuzzFinding:
            raise
        except Exception as error:
            raise FuzzFinding(
                f"{name} seed {seed} input {index} raised {type(error).__name__}: {error}; "
                f"input {data.hex()}"
            ) from error
    return Run(name, count, time.monotonic() - started_s)


def replay(name: str, data_hex: str) -> None:
    """Run target ``name`` on one input given as hex (from a FuzzFinding)."""
    targets()[name][0](bytes.fromhex(data_hex))


def _report(done: Run, note: str) -> None:
    rate = done.inputs / done.seconds if done.seconds else 0.0
    print(f"{done.target}: {done.inputs} inputs, {done.seconds:.0f} s ({rate:.0f}/s), {note}",
          flush=True)  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tests.fuzzing --inputs N --seed S [TARGET ...]``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("targets", nargs="*", help="targets to run (default: all)")
    parser.add_argument("--inputs", type=int, default=100_000, help="inputs per target")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    for name in args.targets or list(targets()):
        done = run(name, args.inputs, args.seed, progress=lambda so_far: _report(so_far, "so far"))
        _report(done, f"seed {args.seed}, no finding")
    return 0


if __name__ == "__main__":
    sys.exit(main())
