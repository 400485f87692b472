"""Record-batch compression codecs, by the ids Kafka keeps in a batch's attributes.

Every codec comes from a maintained library (cramjam, or the stdlib's zlib where it
measured faster); nothing here implements a compression format itself, only the
framing Kafka's clients wrap around one (xerial snappy).

Decompression handles untrusted bytes: any failure surfaces as
``ApiError(CORRUPT_MESSAGE)``, and the output is capped so that a small batch cannot
expand into gigabytes (a decompression bomb).
"""

from __future__ import annotations

import struct
import threading
import zlib
from enum import IntEnum
from typing import Callable

import cramjam

from rivulet.protocol.errors import ApiError, ErrorCode


class Codec(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


NONE = Codec.NONE
GZIP = Codec.GZIP
SNAPPY = Codec.SNAPPY
LZ4 = Codec.LZ4
ZSTD = Codec.ZSTD

# 64 MiB is a generous batch; four times that leaves room for highly compressible data
# while still refusing bombs.
DEFAULT_MAX_DECOMPRESSED_SIZE = 4 * 64 * 1024 * 1024

# The producer's ``compression.type`` values.
CODEC_NAMES: dict[int, str] = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
CODEC_IDS: dict[str, int] = {name: codec for codec, name in CODEC_NAMES.items()}

# The topic/broker ``compression.type`` values. Kafka spells "no compression" as
# "uncompressed" here (not "none"), and "producer" keeps whatever the producer sent.
PRODUCER = "producer"
TOPIC_COMPRESSION_TYPES: tuple[str, ...] = ("uncompressed", "zstd", "lz4", "snappy", "gzip", PRODUCER)
_TOPIC_CODECS: dict[str, int | None] = {
    "uncompressed": NONE,
    "gzip": GZIP,
    "snappy": SNAPPY,
    "lz4": LZ4,
    "zstd": ZSTD,
    PRODUCER: None,
}


def codec_id(name: str) -> int:
    """Codec id for a producer ``compression.type`` value (``none``, ``gzip``, ...)."""
    try:
        return CODEC_IDS[name]
    except KeyError:
        raise ValueError(f"unknown compression type {name!r}") from None


def codec_name(codec: int) -> str:
    """Producer-style name of a codec id."""
    try:
        return CODEC_NAMES[codec]
    except KeyError:
        raise ApiError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression codec id {codec}") from None


def topic_codec(compression_type: str) -> int | None:
    """Codec id for a topic ``compression.type``; None for ``producer`` (keep the producer's)."""
    try:
        return _TOPIC_CODECS[compression_type]
    except KeyError:
        raise ValueError(
            f"invalid compression.type {compression_type!r}; expected one of {', '.join(TOPIC_COMPRESSION_TYPES)}"
        ) from None


def target_codec(compression_type: str, producer_codec: int) -> int:
    """The codec a topic stores a batch with, given the codec the producer used."""
    codec = topic_codec(compression_type)
    return producer_codec if codec is None else codec


# --- compression -----------------------------------------------------------------------

# Java's SnappyOutputStream (snappy-java) frame: magic, version, minimum compatible
# version, then [int32 compressed length, raw snappy block] per 32 KiB of input.
XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK_SIZE = 32 * 1024
_INT32 = struct.Struct(">i")

# Defaults as Kafka's clients use them: gzip 6 (zlib's default), lz4's fast mode (Java and
# librdkafka use the fast compressor unless a level is forced), zstd 3.
_GZIP_DEFAULT_LEVEL = 6
_LZ4_DEFAULT_LEVEL = 0
_ZSTD_DEFAULT_LEVEL = 3


def _compress_gzip(data: bytes | bytearray | memoryview, level: int | None) -> bytes:
    if level is None:
        level = _GZIP_DEFAULT_LEVEL
    # Measured on 1 MiB of JSON: cramjam is ~1.7x faster at level 1, zlib ~1.35x faster
    # at the default level 6.
    if level == 1:
        return bytes(cramjam.gzip.compress(data, level=1))
    co = zlib.compressobj(level, zlib.DEFLATED, 31)
    return co.compress(data) + co.flush()


def _compress_snappy(data: bytes | bytearray | memoryview, level: int | None) -> bytes:
    # xerial framing in 32 KiB blocks, as the Java client writes it. librdkafka, Java and
    # kafka-python/aiokafka all read both this and a raw block; matching Java keeps the
    # stored bytes identical to what a Java producer would have sent.
    view = memoryview(data)
    parts = [_XERIAL_HEADER]
    compress_raw = cramjam.snappy.compress_raw
    for start in range(0, len(view), _XERIAL_BLOCK_SIZE):
        block = bytes(compress_raw(view[start : start + _XERIAL_BLOCK_SIZE]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _compress_lz4(data: bytes | bytearray | memoryview, level: int | None) -> bytes:
    # Independent blocks: Java's Lz4BlockInputStream decompresses each block on its own
    # and cannot read linked blocks, which are the lz4 library's default.
    co = cramjam.lz4.Compressor(
        level=_LZ4_DEFAULT_LEVEL if level is None else level, content_checksum=False, block_linked=False
    )
    co.compress(data if isinstance(data, bytes) else bytes(data))  # it takes bytes only
    return bytes(co.finish())


def _compress_zstd(data: bytes | bytearray | memoryview, level: int | None) -> bytes:
    return bytes(cramjam.zstd.compress(data, level=_ZSTD_DEFAULT_LEVEL if level is None else level))


_COMPRESSORS: dict[int, Callable[[bytes | bytearray | memoryview, int | None], bytes]] = {
    GZIP: _compress_gzip,
    SNAPPY: _compress_snappy,
    LZ4: _compress_lz4,
    ZSTD: _compress_zstd,
}


def compress(codec: int, data: bytes | bytearray | memoryview, level: int | None = None) -> bytes:
    """Compress ``data`` as a batch's records section for ``codec``.

    ``level`` is the library's own level for the codec; None picks Kafka's client default.
    """
    if codec == NONE:
        return bytes(data)
    fn = _COMPRESSORS.get(codec)
    if fn is None:
        raise ApiError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression codec id {codec}")
    return fn(data, level)


# --- decompression ---------------------------------------------------------------------


def _corrupt(message: str) -> ApiError:
    return ApiError(ErrorCode.CORRUPT_MESSAGE, message)


class DecompressedTooLarge(ApiError):
    """CORRUPT_MESSAGE for records, but a caller with its own answer for size can tell it apart."""


def _too_large(max_size: int) -> ApiError:
    return DecompressedTooLarge(ErrorCode.CORRUPT_MESSAGE, f"decompressed records exceed {max_size} bytes")


def _decompress_gzip(data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    # zlib's max_length bounds the output exactly; cramjam measured no faster here.
    parts: list[bytes] = []
    total = 0
    remaining: bytes | bytearray | memoryview = data
    while True:
        d = zlib.decompressobj(31)  # gzip container only, as Kafka's clients write it
        chunk = d.decompress(remaining, max_size - total + 1)
        total += len(chunk)
        if total > max_size:
            raise _too_large(max_size)
        if not d.eof:
            raise _corrupt("gzip stream is truncated")
        parts.append(chunk)
        # Concatenated gzip members are legal and Java's GZIPInputStream reads them all.
        remaining = d.unused_data
        if not remaining:
            break
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _raw_snappy_length(block: bytes | bytearray | memoryview) -> int:
    # A raw snappy block starts with its uncompressed length as a varint; reading it
    # first lets the cap refuse a bomb before anything is allocated.
    return int(cramjam.snappy.decompress_raw_len(block))


def _decompress_snappy(data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    view = memoryview(data)
    if view[:8] != XERIAL_MAGIC:
        if _raw_snappy_length(view) > max_size:
            raise _too_large(max_size)
        return bytes(cramjam.snappy.decompress_raw(view))
    size = len(view)
    if size < 16:
        raise _corrupt("xerial snappy header is truncated")
    pos = 16  # magic + version + compatible version
    parts: list[bytes] = []
    total = 0
    decompress_raw = cramjam.snappy.decompress_raw
    while pos < size:
        if pos + 4 > size:
            raise _corrupt("xerial snappy block length is truncated")
        (length,) = _INT32.unpack_from(view, pos)
        pos += 4
        if length < 0 or pos + length > size:
            raise _corrupt("xerial snappy block runs past the end of the data")
        block = view[pos : pos + length]
        pos += length
        total += _raw_snappy_length(block)
        if total > max_size:
            raise _too_large(max_size)
        parts.append(bytes(decompress_raw(block)))
    return b"".join(parts)


def _lz4_content_size(data: bytes | bytearray | memoryview) -> int | None:
    # Frame header: magic (4), FLG, BD, then an optional 8-byte content size.
    if len(data) >= 14 and data[:4] == b"\x04\x22\x4d\x18" and data[4] & 0x08:
        return int.from_bytes(data[6:14], "little")
    return None


def _zstd_content_size(data: bytes | bytearray | memoryview) -> int | None:
    if len(data) < 5 or data[:4] != b"\x28\xb5\x2f\xfd":
        return None
    fhd = data[4]
    single_segment = (fhd >> 5) & 1
    fcs_size = (1 if single_segment else 0, 2, 4, 8)[fhd >> 6]
    if fcs_size == 0:
        return None
    pos = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[fhd & 3]
    if pos + fcs_size > len(data):
        return None
    value = int.from_bytes(data[pos : pos + fcs_size], "little")
    return value + 256 if fcs_size == 2 else value


# cramjam's message when the output buffer is too small. Telling it apart from corruption
# spares corrupt input a retry at every size; the round-trip tests on highly compressible
# data fail loudly should a cramjam upgrade reword it.
_BUFFER_FULL = "whole buffer"


# Each thread's reusable output buffer for decompress(..., reuse_buffer=True), kept up to this
# size: the broker's produce-path check decompresses every batch only to walk it, and a fresh
# zero-filled buffer per batch (and retries when the frame does not declare its size, as
# librdkafka's zstd frames do not) cost more than the decompression itself.
_SCRATCH_MAX = 16 * 1024 * 1024


class _Scratch(threading.local):
    buf: bytearray | None = None


_scratch = _Scratch()


def _decompress_bounded(
    decompress_into: Callable[[bytes | bytearray | memoryview, bytearray], int],
    data: bytes | bytearray | memoryview,
    declared: int | None,
    max_size: int,
    reuse_buffer: bool = False,
) -> bytes | memoryview:
    # cramjam's *_into stops as soon as the output buffer is full, so a buffer of at
    # most max_size bounds the work. Start from the frame's declared size (or a guess)
    # rather than max_size: zero-filling a huge buffer costs more than a retry.
    if declared is not None and declared > max_size:
        raise _too_large(max_size)
    size = min(max_size, max(declared if declared is not None else 4 * len(data), 1024))
    kept = _scratch.buf if reuse_buffer else None
    while True:
        if kept is not None and len(kept) >= size:
            out = kept
        else:
            out = bytearray(size)
            if reuse_buffer and size <= _SCRATCH_MAX:
                _scratch.buf = kept = out
        try:
            n = decompress_into(data, out)
        except Exception as exc:
            if _BUFFER_FULL not in str(exc):
                raise _corrupt(f"cannot decompress records: {exc}") from None
            if len(out) >= max_size:
                raise _too_large(max_size) from None
            size = min(max_size, len(out) * 4)
            continue
        if n > max_size:  # a reused buffer may be larger than this call's limit
            raise _too_large(max_size)
        return memoryview(out)[:n] if out is kept else bytes(memoryview(out)[:n])


def _decompress_lz4(data: bytes | bytearray | memoryview, max_size: int, reuse_buffer: bool = False
                    ) -> bytes | memoryview:
    return _decompress_bounded(cramjam.lz4.decompress_into, data, _lz4_content_size(data), max_size, reuse_buffer)


def _decompress_zstd(data: bytes | bytearray | memoryview, max_size: int, reuse_buffer: bool = False
                     ) -> bytes | memoryview:
    return _decompress_bounded(cramjam.zstd.decompress_into, data, _zstd_content_size(data), max_size, reuse_buffer)


_DECOMPRESSORS: dict[int, Callable[[bytes | bytearray | memoryview, int], bytes | memoryview]] = {
    GZIP: _decompress_gzip,
    SNAPPY: _decompress_snappy,
    LZ4: _decompress_lz4,
    ZSTD: _decompress_zstd,
}
_DECOMPRESSORS_INTO: dict[int, Callable[[bytes | bytearray | memoryview, int, bool], bytes | memoryview]] = {
    LZ4: _decompress_lz4,
    ZSTD: _decompress_zstd,
}


def decompress(
    codec: int, data: bytes | bytearray | memoryview, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
    *, reuse_buffer: bool = False,
) -> bytes | memoryview:
    """Decompress a batch's records section.

    Raises ``ApiError(CORRUPT_MESSAGE)`` if the payload is corrupt or would expand past
    ``max_size`` bytes, and ``ApiError(UNSUPPORTED_COMPRESSION_TYPE)`` for an unknown codec.
    Snappy accepts both raw blocks (librdkafka) and xerial framing (Java, kafka-python).
    With ``reuse_buffer`` (lz4 and zstd), the result may be a view of a buffer the calling
    thread reuses: valid only until its next such call.
    """
    if codec == NONE:
        if len(data) > max_size:
            raise _too_large(max_size)
        return bytes(data)
    fn = _DECOMPRESSORS.get(codec)
    if fn is None:
        raise ApiError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression codec id {codec}")
    try:
        if reuse_buffer and codec in (LZ4, ZSTD):
            return _DECOMPRESSORS_INTO[codec](data, max_size, True)
        return fn(data, max_size)
    except (ApiError, MemoryError):
        raise
    except Exception as exc:
        # Whatever a codec library throws on hostile input is, to us, a corrupt batch.
        raise _corrupt(f"cannot decompress records: {exc}") from None
    except BaseException as exc:
        # A Rust panic inside cramjam arrives as pyo3's PanicException, a BaseException;
        # left alone it would escape an asyncio task and take the event loop down.
        if type(exc).__name__ != "PanicException":
            raise
        raise _corrupt(f"codec library failed on the records: {exc}") from None
