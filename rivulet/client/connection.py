"""One client connection to one broker: requests out, responses matched by correlation id.

On connect it asks ApiVersions and afterwards sends every request at the highest version
both sides support (capped by what the caller's code understands).
"""

from __future__ import annotations

import asyncio
import struct
from collections import deque
from typing import Any

from rivulet.protocol import framing
from rivulet.protocol.errors import ErrorCode, KafkaError, ProtocolDecodeError
from rivulet.protocol.messages import api_versions_request as avq

_SIZE = struct.Struct(">i")


class ConnectionClosed(ConnectionError):
    pass


class BrokerConnection:
    def __init__(self, host: str, port: int, client_id: str = "rivulet", request_timeout_ms: int = 30000) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.request_timeout = request_timeout_ms / 1000
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.api_versions: dict[int, tuple[int, int]] = {}
        self._next_id = 0
        self._inflight: deque[tuple[int, int, int, asyncio.Future]] = deque()
        self._read_task: asyncio.Task | None = None
        self.closed = False

    async def connect(self) -> BrokerConnection:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        self._read_task = asyncio.get_running_loop().create_task(self._read_loop())
        resp = await self.send(avq.ApiVersionsRequest(client_software_name="rivulet",
                                                      client_software_version="0.1.0"), version=3)
        if resp.error_code != 0:
            raise KafkaError(ErrorCode(resp.error_code), "ApiVersions failed")
        self.api_versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        return self

    def version_for(self, api_key: int, max_known: int | None = None) -> int:
        ours = framing.request_class(api_key).VALID_VERSIONS
        theirs = self.api_versions.get(api_key)
        if theirs is None:
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, f"broker does not support API {api_key}")
        hi = min(ours[1], theirs[1], max_known if max_known is not None else ours[1])
        lo = max(ours[0], theirs[0])
        if hi < lo:
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, f"no common version for API {api_key}")
        return hi

    async def send(self, request: Any, version: int | None = None, expect_response: bool = True) -> Any:
        if self.closed or self.writer is None:
            raise ConnectionClosed(f"connection to {self.host}:{self.port} is closed")
        api_key = request.API_KEY
        if version is None:
            version = self.version_for(api_key)
        self._next_id = (self._next_id + 1) & 0x7FFFFFFF
        cid = self._next_id
        frame = framing.encode_request(request, version, cid, self.client_id)
        self.writer.write(frame)
        if not expect_response:
            await self.writer.drain()
            return None
        fut = asyncio.get_running_loop().create_future()
        self._inflight.append((cid, api_key, version, fut))
        await self.writer.drain()
        return await asyncio.wait_for(fut, self.request_timeout + 5)

    async def _read_loop(self) -> None:
        err: BaseException = ConnectionClosed("connection closed by the broker")
        try:
            while True:
                head = await self.reader.readexactly(4)
                size = _SIZE.unpack(head)[0]
                frame = await self.reader.readexactly(size)
                if not self._inflight:
                    raise ProtocolDecodeError("response with no request waiting")
                cid, api_key, version, fut = self._inflight.popleft()
                got_cid, body = framing.decode_response(frame, api_key, version)
                if got_cid != cid:
                    raise ProtocolDecodeError(f"correlation id {got_cid}, expected {cid}")
                if not fut.done():
                    fut.set_result(body)
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as e:
            err = ConnectionClosed(str(e) or "connection closed")
        except ProtocolDecodeError as e:
            err = e
        except asyncio.CancelledError:
            err = ConnectionClosed("connection closed")
        finally:
            self.closed = True
            while self._inflight:
                fut = self._inflight.popleft()[3]
                if not fut.done():
                    fut.set_exception(err)
            if self.writer is not None:
                self.writer.close()

    async def close(self) -> None:
        self.closed = True
        if self._read_task is not None:
            self._read_task.cancel()
            try:
                await self._read_task
            except BaseException:
                pass
        if self.writer is not None:
            self.writer.close()
