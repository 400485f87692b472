"""Hostile bytes must only ever surface as ApiError: never IndexError, struct.error, a
codec library's exception or a hang."""

from __future__ import annotations

import os
import struct
from typing import Any, Callable

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rivulet.protocol.compression import XERIAL_MAGIC, compress, decompress
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.protocol.records import (
    HEADER_SIZE,
    Record,
    decode_batch,
    decode_records,
    encode_batch,
    iter_batches,
    validate_produce_records,
)

pytestmark = pytest.mark.fast

# RIVULET_FUZZ_EXAMPLES raises the count for a longer campaign than the fast suite runs.
FUZZ = settings(
    max_examples=int(os.environ.get("RIVULET_FUZZ_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
T0 = 1_700_000_000_000
CAP = 1 << 20  # small decompression cap so that bombs fail fast


def outcome(fn: Callable[[], Any]) -> Any:
    """Run ``fn``; return its result or the ApiError it raised. Anything else fails the test."""
    try:
        return fn()
    except ApiError as exc:
        assert isinstance(exc.code, ErrorCode)
        assert exc.code != ErrorCode.NONE
        return exc


def exercise(data: bytes) -> None:
    """Feed ``data`` to every reader and check what each one promises."""
    headers = outcome(lambda: validate_produce_records(data, max_batch_size=1 << 30, max_decompressed_size=CAP))
    # bytearray and memoryview inputs are walked in place rather than copied: same verdict.
    for other in (bytearray(data), memoryview(data)):
        again = outcome(lambda: validate_produce_records(other, max_batch_size=1 << 30, max_decompressed_size=CAP))
        if isinstance(headers, ApiError):
            assert isinstance(again, ApiError) and again.code == headers.code
        else:
            assert again == headers
    if not isinstance(headers, ApiError):
        # Whatever the broker accepts, a consumer can read back in full.
        for header in headers:
            assert header.magic == 2 and header.base_offset == 0
        decoded = decode_batch(data, max_decompressed_size=CAP)
        assert len(decoded.records) == decoded.header.records_count
        assert [r.offset for r in decoded.records] == list(range(decoded.header.records_count))
    batches = outcome(lambda: list(decode_records(data, max_decompressed_size=CAP)))
    walked = outcome(lambda: list(iter_batches(data)))
    if not isinstance(walked, ApiError):
        end = 0
        for pos, header in walked:
            assert pos == end
            end = pos + header.size
            assert end <= len(data)
    if not isinstance(batches, ApiError):
        assert not isinstance(walked, ApiError) and len(batches) == len(walked)
    outcome(lambda: decode_batch(data, max_decompressed_size=CAP))
    outcome(lambda: decode_batch(data, verify_crc=False, max_decompressed_size=CAP))


def with_crc(batch: bytes | bytearray) -> bytes:
    """Make the CRC match whatever the bytes now say, so mutations reach past the CRC check."""
    ba = bytearray(batch)
    if len(ba) >= HEADER_SIZE:
        ba[17:21] = struct.pack(">I", crc32c(bytes(ba[21:])))
    return bytes(ba)


# --- strategies ---------------------------------------------------------------------------

blobs = st.binary(max_size=64) | st.binary(min_size=HEADER_SIZE, max_size=600)
header_names = st.text(max_size=8)
optional_bytes = st.none() | st.binary(max_size=300)
records_strategy = st.lists(
    st.builds(
        Record,
        offset=st.just(0),
        timestamp=st.integers(T0 - 10**6, T0 + 10**6),
        key=optional_bytes,
        value=optional_bytes,
        headers=st.lists(st.tuples(header_names, st.none() | st.binary(max_size=20)), max_size=3),
    ),
    min_size=1,
    max_size=12,
)
codecs = st.sampled_from([0, 1, 2, 3, 4])


@st.composite
def mutated_batches(draw: st.DrawFn) -> bytes:
    batch = bytearray(encode_batch(draw(records_strategy), compression=draw(codecs)))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "set", "truncate", "insert", "delete", "field"]))
        pos = draw(st.integers(0, max(0, len(batch) - 1)))
        if kind == "flip" and batch:
            batch[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set" and batch:
            batch[pos] = draw(st.integers(0, 255))
        elif kind == "truncate":
            del batch[pos:]
        elif kind == "insert":
            batch[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del batch[pos : pos + draw(st.integers(1, 8))]
        elif kind == "field" and len(batch) >= HEADER_SIZE:
            # Overwrite a header field with an extreme or nearby value.
            offset, fmt = draw(
                st.sampled_from([(8, ">i"), (21, ">h"), (23, ">i"), (43, ">q"), (53, ">i"), (57, ">i")])
            )
            (current,) = struct.unpack_from(fmt, batch, offset)
            bits = struct.calcsize(fmt) * 8
            value = draw(
                st.sampled_from([0, -1, 1, current - 1, current + 1, -(1 << (bits - 1)), (1 << (bits - 1)) - 1])
            )
            struct.pack_into(fmt, batch, offset, max(-(1 << (bits - 1)), min((1 << (bits - 1)) - 1, value)))
    return with_crc(batch) if draw(st.booleans()) else bytes(batch)


@st.composite
def v2_header_over_random_records(draw: st.DrawFn) -> bytes:
    """A well-formed, CRC-valid header whose records section is random (optionally compressed)."""
    codec = draw(codecs)
    section = draw(st.binary(max_size=400))
    if codec and draw(st.booleans()):
        section = compress(codec, section)
    count = draw(st.integers(-2, 20))
    last_delta = count - 1 if draw(st.booleans()) else draw(st.integers(-2, 20))
    tail = struct.pack(">hiqqqhii", codec, last_delta, T0, T0, -1, -1, -1, count) + section
    return struct.pack(">qiibI", 0, len(tail) + 9, -1, 2, crc32c(tail)) + tail


# --- properties ---------------------------------------------------------------------------


@FUZZ
@given(blobs)
def test_random_bytes(data: bytes) -> None:
    exercise(data)


@FUZZ
@given(mutated_batches())
def test_mutated_valid_batches(data: bytes) -> None:
    exercise(data)


@FUZZ
@given(v2_header_over_random_records())
def test_valid_header_over_random_records(data: bytes) -> None:
    exercise(data)


@FUZZ
@given(st.lists(mutated_batches(), min_size=2, max_size=3))
def test_concatenated_mutated_batches(parts: list[bytes]) -> None:
    exercise(b"".join(parts))


@FUZZ
@given(records_strategy, codecs, st.integers(0, 1 << 40))
def test_round_trip(records: list[Record], codec: int, base_offset: int) -> None:
    produced = encode_batch(records, compression=codec)
    (header,) = validate_produce_records(produced, max_batch_size=1 << 30)
    assert header.records_count == len(records)
    decoded = decode_batch(encode_batch(records, compression=codec, base_offset=base_offset)).records
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decoded] == [
        (base_offset + i, s.timestamp, s.key, s.value, s.headers) for i, s in enumerate(records)
    ]


@FUZZ
@given(st.integers(0, 7), st.binary(max_size=300))
def test_decompress_random_bytes(codec: int, data: bytes) -> None:
    result = outcome(lambda: decompress(codec, data, max_size=CAP))
    assert isinstance(result, (bytes, ApiError))
    xerial = outcome(lambda: decompress(2, XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01" + data, max_size=CAP))
    assert isinstance(xerial, (bytes, ApiError))


@FUZZ
@given(st.sampled_from([1, 2, 3, 4]), st.binary(max_size=2000), st.data())
def test_decompress_mutated_payloads(codec: int, plain: bytes, data: st.DataObject) -> None:
    packed = bytearray(compress(codec, plain))
    assert decompress(codec, bytes(packed)) == plain
    for _ in range(data.draw(st.integers(1, 3))):
        pos = data.draw(st.integers(0, len(packed) - 1))
        if data.draw(st.booleans()):
            packed[pos] = data.draw(st.integers(0, 255))
        else:
            del packed[pos:]
            if not packed:
                break
    result = outcome(lambda: decompress(codec, bytes(packed), max_size=CAP))
    assert isinstance(result, (bytes, ApiError))
    if isinstance(result, bytes):
        assert len(result) <= CAP
