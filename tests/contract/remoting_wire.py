"""A bare remoting connection for tests: write frames, read answers by opaque."""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field

from protocol.remoting.frames import FrameDecoder, RemotingCommand, encode

READ_TIMEOUT_S = 10.0


@dataclass
class WireClient:
    """One TCP connection to a remoting server."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    decoder: FrameDecoder = field(default_factory=FrameDecoder)
    opaque: int = 0

    @classmethod
    async def connect(cls, port: int) -> WireClient:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    def send(self, command: RemotingCommand) -> None:
        self.writer.write(encode(command))

    def request(
        self, code: int, fields: dict[str, str] | None = None, body: bytes = b"", flag: int = 0
    ) -> int:
        """Send a request; its opaque."""
        self.opaque += 1
        self.send(RemotingCommand(code, self.opaque, flag, "JAVA", 1, None, fields or {}, body))
        return self.opaque

    async def read(self) -> RemotingCommand:
        """The next answer (fails the test after READ_TIMEOUT_S)."""
        while True:
            item = self.decoder.next_command()
            if item is not None:
                assert isinstance(item, RemotingCommand), item
                return item
            data = await asyncio.wait_for(self.reader.read(65536), READ_TIMEOUT_S)
            assert data, "the server closed the connection"
            self.decoder.receive(data)

    async def call(
        self, code: int, fields: dict[str, str] | None = None, body: bytes = b""
    ) -> RemotingCommand:
        opaque = self.request(code, fields, body)
        answer = await self.read()
        assert answer.opaque == opaque
        assert answer.is_response
        return answer

    async def closed(self) -> bool:
        """Whether the server closes the connection (reads to its end; a reset counts)."""
        with contextlib.suppress(ConnectionResetError):
            while await asyncio.wait_for(self.reader.read(65536), READ_TIMEOUT_S):
                pass
        return True

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()


def json_body(command: RemotingCommand) -> object:
    return json.loads(command.body)
