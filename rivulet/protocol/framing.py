"""Request and response frames (sans-IO): size prefix, headers, and the message body.

Header versions follow Kafka's rules: a request whose API version is flexible uses request
header v2 (with tagged fields), otherwise v1; ControlledShutdown v0 uses header v0. A
response uses header v1 when flexible, except ApiVersions, whose response header is always
v0 so that a client that does not yet know the broker's versions can read it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from functools import lru_cache

from rivulet.protocol.errors import ProtocolDecodeError
from rivulet.protocol.messages import API_CLASSES, load
from rivulet.protocol.schema import OutBuf, Part, Struct, read_uvarint, write_uvarint

API_VERSIONS_KEY = 18
CONTROLLED_SHUTDOWN_KEY = 7
_HDR = struct.Struct(">hhi")
_SIZE = struct.Struct(">i")
_I16 = struct.Struct(">h")


class UnsupportedApi(ProtocolDecodeError):
    """The API key or version is not one this codec knows."""

    def __init__(self, api_key: int, api_version: int, correlation_id: int, message: str) -> None:
        super().__init__(message)
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


@dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None = None
    header_version: int = 1
    tagged_fields: dict[int, bytes] = field(default_factory=dict)


@lru_cache(maxsize=None)
def request_class(api_key: int) -> type[Struct]:
    try:
        mod, cls, _, _ = API_CLASSES[api_key]
    except KeyError:
        raise KeyError(api_key) from None
    return load(mod, cls)


@lru_cache(maxsize=None)
def response_class(api_key: int) -> type[Struct]:
    _, _, mod, cls = API_CLASSES[api_key]
    return load(mod, cls)


@lru_cache(maxsize=None)
def api_name(api_key: int) -> str:
    """The API's name as Kafka writes it (``ApiVersions``, ``Metadata``), for messages and metrics;
    an unknown key as ``API key N``."""
    if api_key not in API_CLASSES:
        return f"API key {api_key}"
    return API_CLASSES[api_key][1].removesuffix("Request")


def request_header_version(api_key: int, api_version: int) -> int:
    if api_key == CONTROLLED_SHUTDOWN_KEY and api_version == 0:
        return 0
    return 2 if request_class(api_key).is_flexible(api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    if api_key == API_VERSIONS_KEY:
        return 0
    return 1 if response_class(api_key).is_flexible(api_version) else 0


def _skip_tagged(buf: memoryview, pos: int) -> tuple[dict[int, bytes], int]:
    n, pos = read_uvarint(buf, pos)
    tags: dict[int, bytes] = {}
    for _ in range(n):
        tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        if pos + size > len(buf):
            raise ProtocolDecodeError("tagged field runs past the frame")
        tags[tag] = bytes(buf[pos:pos + size])
        pos += size
    return tags, pos


def decode_request_header(frame: bytes | bytearray | memoryview) -> tuple[RequestHeader, int]:
    """Parse the header of a request frame (without its size prefix).

    Returns the header and the position of the body. Raises UnsupportedApi when the key or
    version is unknown (the header is still returned through the exception's fields).
    """
    buf = frame if isinstance(frame, memoryview) else memoryview(frame)
    if len(buf) < 8:
        raise ProtocolDecodeError("request shorter than its header")
    api_key, api_version, correlation_id = _HDR.unpack_from(buf, 0)
    if api_key not in API_CLASSES:
        raise UnsupportedApi(api_key, api_version, correlation_id, f"unknown API key {api_key}")
    req_cls = request_class(api_key)
    lo, hi = req_cls.VALID_VERSIONS
    if not lo <= api_version <= hi:
        raise UnsupportedApi(api_key, api_version, correlation_id,
                             f"{req_cls.NAME} has no version {api_version}")
    hv = request_header_version(api_key, api_version)
    hdr = RequestHeader(api_key, api_version, correlation_id, None, hv)
    pos = 8
    if hv >= 1:
        # client_id is a plain nullable string even in header v2.
        if pos + 2 > len(buf):
            raise ProtocolDecodeError("truncated client id")
        n = _I16.unpack_from(buf, pos)[0]
        pos += 2
        if n >= 0:
            if pos + n > len(buf):
                raise ProtocolDecodeError("client id runs past the frame")
            try:
                hdr.client_id = str(buf[pos:pos + n], "utf-8")
            except UnicodeDecodeError as e:
                raise ProtocolDecodeError(f"client id is not UTF-8: {e}") from None
            pos += n
    if hv >= 2:
        try:
            hdr.tagged_fields, pos = _skip_tagged(buf, pos)
        except IndexError:
            raise ProtocolDecodeError("truncated request header tagged fields") from None
    return hdr, pos


def decode_request(frame: bytes | bytearray | memoryview) -> tuple[RequestHeader, Struct]:
    """Decode a request frame (without its size prefix) into its header and body."""
    hdr, pos = decode_request_header(frame)
    body = request_class(hdr.api_key).decode(frame, hdr.api_version, pos)
    return hdr, body


def encode_request(body: Struct, api_version: int, correlation_id: int, client_id: str | None) -> bytes:
    """A whole request frame, size prefix included."""
    api_key = body.API_KEY
    hv = request_header_version(api_key, api_version)
    out = bytearray(b"\0\0\0\0")
    out += _HDR.pack(api_key, api_version, correlation_id)
    if hv >= 1:
        if client_id is None:
            out += b"\xff\xff"
        else:
            cid = client_id.encode()
            out += _I16.pack(len(cid))
            out += cid
    if hv >= 2:
        out.append(0)
    body.encode_into(out, api_version)
    _SIZE.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def encode_response(body: Struct, api_key: int, api_version: int, correlation_id: int) -> bytearray:
    """A whole response frame, size prefix included, as one buffer."""
    return b"".join(encode_response_parts(body, api_key, api_version, correlation_id))


def encode_response_parts(body: Struct, api_key: int, api_version: int, correlation_id: int
                          ) -> list[Part]:
    """A whole response frame as buffers for a vectored write; large records are not copied."""
    out = OutBuf(8)
    _SIZE.pack_into(out, 4, correlation_id)
    if response_header_version(api_key, api_version) >= 1:
        out.append(0)
    body.encode_into(out, api_version)
    _SIZE.pack_into(out, 0, out.total_size() - 4)
    return out.parts()


def decode_response(frame: bytes | bytearray | memoryview, api_key: int, api_version: int) -> tuple[int, Struct]:
    """Decode a response frame (without its size prefix): (correlation id, body)."""
    buf = frame if isinstance(frame, memoryview) else memoryview(frame)
    if len(buf) < 4:
        raise ProtocolDecodeError("response shorter than its header")
    correlation_id = _SIZE.unpack_from(buf, 0)[0]
    pos = 4
    if response_header_version(api_key, api_version) >= 1:
        try:
            _, pos = _skip_tagged(buf, pos)
        except IndexError:
            raise ProtocolDecodeError("truncated response header") from None
    return correlation_id, response_class(api_key).decode(buf, api_version, pos)


def api_version_ranges() -> dict[int, tuple[int, int]]:
    """Every API key the codec knows, with the versions of its request schema."""
    return {k: request_class(k).VALID_VERSIONS for k in API_CLASSES}


__all__ = [
    "RequestHeader", "UnsupportedApi", "decode_request", "decode_request_header", "decode_response",
    "encode_request", "encode_response_parts", "encode_response", "request_class", "response_class", "write_uvarint",
    "api_version_ranges",
]
