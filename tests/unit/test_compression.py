"""Codecs as Kafka's clients write and read them."""

from __future__ import annotations

import gzip
import os
import struct
import zlib

import cramjam
import pytest

from rivulet.protocol import compression
from rivulet.protocol.compression import (
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    XERIAL_MAGIC,
    ZSTD,
    compress,
    decompress,
)
from rivulet.protocol.errors import ApiError, ErrorCode

pytestmark = pytest.mark.fast

CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]
COMPRESSING = [GZIP, SNAPPY, LZ4, ZSTD]

TEXT = b"".join(b'{"id": %d, "user": "user-%d", "event": "click"}\n' % (i, i % 97) for i in range(5000))
PAYLOADS = {
    "empty": b"",
    "one byte": b"x",
    "text": TEXT,
    "random": os.urandom(100_000),
    "zeros": bytes(300_000),
}


def test_codec_ids_match_kafka_attributes() -> None:
    assert (NONE, GZIP, SNAPPY, LZ4, ZSTD) == (0, 1, 2, 3, 4)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_round_trip(codec: int, name: str) -> None:
    data = PAYLOADS[name]
    packed = compress(codec, data)
    assert isinstance(packed, bytes)
    out = decompress(codec, packed)
    assert isinstance(out, bytes)
    assert out == data


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_accepts_bytearray_and_memoryview(codec: int) -> None:
    for data in (bytearray(TEXT), memoryview(TEXT)):
        assert decompress(codec, memoryview(compress(codec, data))) == TEXT


@pytest.mark.parametrize(("codec", "levels"), [(GZIP, [1, 6, 9]), (LZ4, [0, 1, 9]), (ZSTD, [1, 3, 10])])
def test_levels(codec: int, levels: list[int]) -> None:
    for level in levels:
        assert decompress(codec, compress(codec, TEXT, level)) == TEXT


def test_compression_shrinks_compressible_data() -> None:
    for codec in COMPRESSING:
        assert len(compress(codec, TEXT)) < len(TEXT) // 3, codec


# --- names ----------------------------------------------------------------------------


def test_producer_names() -> None:
    assert [compression.codec_id(n) for n in ("none", "gzip", "snappy", "lz4", "zstd")] == [0, 1, 2, 3, 4]
    assert [compression.codec_name(c) for c in CODECS] == ["none", "gzip", "snappy", "lz4", "zstd"]
    with pytest.raises(ValueError):
        compression.codec_id("brotli")
    with pytest.raises(ApiError) as err:
        compression.codec_name(5)
    assert err.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


def test_topic_names() -> None:
    assert compression.topic_codec("uncompressed") == NONE
    assert compression.topic_codec("zstd") == ZSTD
    assert compression.topic_codec("producer") is None
    # Kafka's topic config spells it "uncompressed"; "none" is a producer-only value.
    with pytest.raises(ValueError):
        compression.topic_codec("none")
    assert set(compression.TOPIC_COMPRESSION_TYPES) == {"uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"}
    assert compression.target_codec("producer", LZ4) == LZ4
    assert compression.target_codec("gzip", LZ4) == GZIP
    assert compression.target_codec("uncompressed", SNAPPY) == NONE


def test_unknown_codec() -> None:
    for codec in (5, 6, 7, -1):
        with pytest.raises(ApiError) as err:
            compress(codec, b"data")
        assert err.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
        with pytest.raises(ApiError) as err:
            decompress(codec, b"data")
        assert err.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


# --- snappy framing ------------------------------------------------------------------------


def xerial(blocks: list[bytes]) -> bytes:
    """xerial framing as snappy-java writes it, built by hand."""
    out = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
    for block in blocks:
        raw = bytes(cramjam.snappy.compress_raw(block))
        out += struct.pack(">i", len(raw)) + raw
    return out


def test_snappy_writes_xerial_in_32k_blocks_like_the_java_client() -> None:
    data = os.urandom(32 * 1024) * 3 + b"tail"
    packed = compress(SNAPPY, data)
    assert packed[:8] == b"\x82SNAPPY\x00"
    assert struct.unpack(">ii", packed[8:16]) == (1, 1)
    pos, uncompressed = 16, []
    while pos < len(packed):
        (length,) = struct.unpack_from(">i", packed, pos)
        block = packed[pos + 4 : pos + 4 + length]
        uncompressed.append(bytes(cramjam.snappy.decompress_raw(block)))
        pos += 4 + length
    assert pos == len(packed)
    assert [len(b) for b in uncompressed] == [32768, 32768, 32768, 4]
    assert b"".join(uncompressed) == data


def test_snappy_reads_raw_blocks_like_librdkafka_writes() -> None:
    raw = bytes(cramjam.snappy.compress_raw(TEXT))
    assert raw[:8] != XERIAL_MAGIC
    assert decompress(SNAPPY, raw) == TEXT


def test_snappy_reads_hand_built_xerial() -> None:
    blocks = [b"a" * 10, os.urandom(5000), b"", TEXT[:40000]]
    assert decompress(SNAPPY, xerial(blocks)) == b"".join(blocks)
    assert decompress(SNAPPY, xerial([])) == b""


@pytest.mark.parametrize(
    "bad",
    [
        XERIAL_MAGIC + b"\x00\x00\x00\x01",  # header cut short
        xerial([TEXT[:1000]])[:-3],  # block cut short
        xerial([TEXT[:1000]]) + b"\x00\x00",  # partial length field
        XERIAL_MAGIC + struct.pack(">iii", 1, 1, -5),  # negative block length
        XERIAL_MAGIC + struct.pack(">iii", 1, 1, 1 << 30) + b"xx",  # block past the end
        XERIAL_MAGIC + struct.pack(">iii", 1, 1, 3) + b"\xff\xff\xff",  # garbage block
        b"\xff\xff\xff\xff\xff\xff",  # raw: varint length too long
        b"\x10abc",  # raw: declares 16 bytes, holds 3
    ],
)
def test_corrupt_snappy(bad: bytes) -> None:
    with pytest.raises(ApiError) as err:
        decompress(SNAPPY, bad)
    assert err.value.code == ErrorCode.CORRUPT_MESSAGE


def test_aiokafka_snappy_interop() -> None:
    codec = pytest.importorskip("aiokafka.codec")
    if not codec.has_snappy():
        pytest.skip("aiokafka without snappy")
    assert decompress(SNAPPY, codec.snappy_encode(TEXT)) == TEXT
    assert codec.snappy_decode(compress(SNAPPY, TEXT)) == TEXT


# --- lz4 / gzip / zstd specifics -------------------------------------------------------------


def test_lz4_frame_has_independent_blocks() -> None:
    # Java's Lz4BlockInputStream decompresses every block on its own.
    packed = compress(LZ4, TEXT)
    assert packed[:4] == b"\x04\x22\x4d\x18"
    flg = packed[4]
    assert flg >> 6 == 1  # frame version
    assert flg & 0x20  # block independence


def test_aiokafka_lz4_interop() -> None:
    codec = pytest.importorskip("aiokafka.codec")
    if not codec.has_lz4():
        pytest.skip("aiokafka without lz4")
    assert decompress(LZ4, codec.lz4_encode(TEXT)) == TEXT
    assert codec.lz4_decode(compress(LZ4, TEXT)) == TEXT


def test_gzip_is_readable_by_the_stdlib_and_reads_concatenated_members() -> None:
    assert gzip.decompress(compress(GZIP, TEXT)) == TEXT
    two = gzip.compress(b"first ") + gzip.compress(b"second")
    assert decompress(GZIP, two) == b"first second"


def test_gzip_rejects_zlib_container_and_truncation() -> None:
    for bad in (zlib.compress(TEXT), gzip.compress(TEXT)[:-5], gzip.compress(TEXT) + b"junk"):
        with pytest.raises(ApiError) as err:
            decompress(GZIP, bad)
        assert err.value.code == ErrorCode.CORRUPT_MESSAGE


def test_zstd_without_declared_content_size() -> None:
    co = cramjam.zstd.Compressor()
    co.compress(TEXT)
    streamed = bytes(co.finish())
    assert decompress(ZSTD, streamed) == TEXT


# --- corruption and bombs -------------------------------------------------------------------


@pytest.mark.parametrize("codec", COMPRESSING)
@pytest.mark.parametrize("bad", [b"", b"\x00", b"garbage", os.urandom(64), bytes(64)],
                         ids=["empty", "zero", "word", "random", "zeros"])
def test_garbage_is_corrupt_message(codec: int, bad: bytes) -> None:
    if codec == SNAPPY and bad in (b"\x00",):
        # A raw snappy block for the empty string is exactly b"\x00".
        assert decompress(codec, bad) == b""
        return
    with pytest.raises(ApiError) as err:
        decompress(codec, bad)
    assert err.value.code == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("codec", COMPRESSING)
def test_truncated_payload_is_corrupt_message(codec: int) -> None:
    packed = compress(codec, TEXT)
    for cut in (1, len(packed) // 2, len(packed) - 1):
        with pytest.raises(ApiError) as err:
            decompress(codec, packed[:cut])
        assert err.value.code == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("codec", CODECS)
def test_output_cap(codec: int) -> None:
    data = bytes(200_000)
    packed = compress(codec, data)
    assert decompress(codec, packed, max_size=len(data)) == data
    with pytest.raises(ApiError) as err:
        decompress(codec, packed, max_size=len(data) - 1)
    assert err.value.code == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("codec", COMPRESSING)
def test_bomb_is_refused(codec: int) -> None:
    cap = 8 * 1024 * 1024
    packed = compress(codec, bytes(cap + 1))
    assert len(packed) < cap // 20
    with pytest.raises(ApiError) as err:
        decompress(codec, packed, max_size=cap)
    assert err.value.code == ErrorCode.CORRUPT_MESSAGE
    assert compression.DEFAULT_MAX_DECOMPRESSED_SIZE >= 64 * 1024 * 1024


def forge_zstd_content_size(frame: bytes, size: int) -> bytes:
    # The frame header carries no checksum, so a hostile producer can claim any size.
    fhd = frame[4]
    assert fhd >> 6 == 2 and fhd & 0x20, "expected a single-segment frame with a 4-byte size"
    return frame[:5] + struct.pack("<I", size) + frame[9:]


def test_declared_sizes_are_checked_but_not_trusted() -> None:
    frame = bytes(cramjam.zstd.compress(TEXT))
    assert compression._zstd_content_size(frame) == len(TEXT)
    # Claiming more than the cap is refused before anything is allocated.
    with pytest.raises(ApiError) as err:
        decompress(ZSTD, forge_zstd_content_size(frame, 0xFFFFFFFF), max_size=1 << 20)
    assert err.value.code == ErrorCode.CORRUPT_MESSAGE
    # Claiming less cannot smuggle more than the cap through.
    for claimed in (1, 100, len(TEXT) - 1):
        try:
            out = decompress(ZSTD, forge_zstd_content_size(frame, claimed))
        except ApiError as exc:
            assert exc.code == ErrorCode.CORRUPT_MESSAGE
        else:
            assert out == TEXT
    # A raw snappy block's length prefix is checked against the cap up front too.
    raw = bytes(cramjam.snappy.compress_raw(TEXT))
    with pytest.raises(ApiError) as err:
        decompress(SNAPPY, raw, max_size=100)
    assert err.value.code == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_reused_buffer_gives_the_same_bytes(codec: int, name: str) -> None:
    packed = compress(codec, PAYLOADS[name])
    assert bytes(decompress(codec, packed, reuse_buffer=True)) == decompress(codec, packed) == PAYLOADS[name]


def test_reused_buffer_serves_undeclared_sizes_and_keeps_the_cap() -> None:
    co = cramjam.zstd.Compressor()
    co.compress(bytes(3_000_000))
    streamed = bytes(co.finish())  # no declared size, 1000:1: the first guess is far too small
    assert compression._zstd_content_size(streamed) is None
    first = decompress(ZSTD, streamed, reuse_buffer=True)
    assert isinstance(first, memoryview) and bytes(first) == bytes(3_000_000)
    del first
    # The kept buffer is now larger than a smaller call's cap: the cap still holds.
    co = cramjam.zstd.Compressor()
    co.compress(bytes(500_000))
    small = bytes(co.finish())
    with pytest.raises(ApiError) as err:
        decompress(ZSTD, small, max_size=400_000, reuse_buffer=True)
    assert err.value.code == ErrorCode.CORRUPT_MESSAGE
    assert bytes(decompress(LZ4, compress(LZ4, TEXT), reuse_buffer=True)) == TEXT
    with pytest.raises(ApiError):
        decompress(ZSTD, streamed, max_size=1_000_000, reuse_buffer=True)
