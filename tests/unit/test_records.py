"""Magic v2 record batches: encoding, decoding and the broker's produce-path validation."""

from __future__ import annotations

import os
import struct

import pytest
from crc32c import crc32c

from rivulet.protocol import records as rec
from rivulet.protocol.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD, compress
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.protocol.records import (
    HEADER_SIZE,
    ControlRecordType,
    Record,
    decode_batch,
    decode_records,
    encode_batch,
    encode_control_batch,
    iter_batches,
    parse_batch_header,
    parse_control_record,
    validate_produce_records,
)

pytestmark = pytest.mark.fast

CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]
BIG = 1 << 30
T0 = 1_700_000_000_000


# --- an independent, deliberately naive writer for crafting (mal)formed batches --------------


def zz(n: int) -> bytes:
    v = n * 2 if n >= 0 else -n * 2 - 1
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def raw_bytes(b: bytes | None) -> bytes:
    return zz(-1) if b is None else zz(len(b)) + b


def raw_record(
    offset_delta: int,
    key: bytes | None = b"k",
    value: bytes | None = b"v",
    headers: list[tuple[bytes, bytes | None]] | None = None,
    ts_delta: int = 0,
    *,
    size_adjust: int = 0,
    header_count: int | None = None,
) -> bytes:
    headers = headers or []
    body = b"\x00" + zz(ts_delta) + zz(offset_delta) + raw_bytes(key) + raw_bytes(value)
    body += zz(len(headers) if header_count is None else header_count)
    for name, hv in headers:
        body += zz(len(name)) + name + raw_bytes(hv)
    return zz(len(body) + size_adjust) + body


def raw_batch(
    records_section: bytes,
    count: int,
    *,
    last_offset_delta: int | None = None,
    base_offset: int = 0,
    attributes: int = 0,
    base_timestamp: int = T0,
    max_timestamp: int = T0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    magic: int = 2,
    ple: int = -1,
) -> bytes:
    tail = struct.pack(
        ">hiqqqhii",
        attributes,
        count - 1 if last_offset_delta is None else last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    ) + records_section
    crc = crc32c(tail)
    return struct.pack(">qiibI", base_offset, len(tail) + 9, ple, magic, crc) + tail


def fix_crc(batch: bytes | bytearray, pos: int = 0) -> bytes:
    ba = bytearray(batch)
    (length,) = struct.unpack_from(">i", ba, pos + 8)
    struct.pack_into(">I", ba, pos + 17, crc32c(bytes(ba[pos + 21 : pos + 12 + length])))
    return bytes(ba)


def patch(batch: bytes, fmt: str, offset: int, value: int, *, recrc: bool = True) -> bytes:
    ba = bytearray(batch)
    struct.pack_into(fmt, ba, offset, value)
    return fix_crc(ba) if recrc else bytes(ba)


def sample_records(n: int = 50) -> list[Record]:
    out = []
    for i in range(n):
        key = None if i % 4 == 0 else b"key-%d" % i
        value = None if i % 7 == 3 else (b"" if i % 7 == 5 else os.urandom(i * 37 % 3000))
        headers: list[tuple[str, bytes | None]] = []
        if i % 3 == 0:
            headers = [("trace-id", b"abc%d" % i), ("flag", None), ("ünïcode", b"\x00\xff")]
        out.append(Record(0, T0 + (i * 13) % 500 - 100, key, value, headers))
    return out


def assert_same_records(decoded: list[Record], sent: list[Record], base_offset: int = 0) -> None:
    assert len(decoded) == len(sent)
    for i, (d, s) in enumerate(zip(decoded, sent)):
        assert d.offset == base_offset + i
        assert d.timestamp == s.timestamp
        assert d.key == s.key
        assert d.value == s.value
        assert d.headers == s.headers
        assert d.key is None or type(d.key) is bytes
        assert d.value is None or type(d.value) is bytes


def error_code(fn, *args, **kwargs) -> ErrorCode:  # type: ignore[no-untyped-def]
    with pytest.raises(ApiError) as err:
        fn(*args, **kwargs)
    return err.value.code


def validate(data: bytes | bytearray | memoryview, **kwargs) -> list[rec.BatchHeader]:  # type: ignore[no-untyped-def]
    kwargs.setdefault("max_batch_size", BIG)
    return validate_produce_records(data, **kwargs)


# --- encoding and decoding ------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip(codec: int) -> None:
    sent = sample_records()
    batch = encode_batch(sent, base_offset=1000, compression=codec)
    decoded = decode_batch(batch)
    assert_same_records(decoded.records, sent, base_offset=1000)
    h = decoded.header
    assert (h.base_offset, h.magic, h.records_count, h.last_offset_delta) == (1000, 2, 50, 49)
    assert h.compression == codec
    assert h.size == len(batch)
    assert h.base_timestamp == sent[0].timestamp
    assert h.max_timestamp == max(r.timestamp for r in sent)
    assert h.crc == crc32c(batch[21:])
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.partition_leader_epoch) == (-1, -1, -1, -1)
    assert not (h.is_transactional or h.is_control or h.is_log_append_time)


@pytest.mark.parametrize("codec", CODECS)
def test_produced_batches_validate(codec: int) -> None:
    batch = encode_batch(sample_records(), compression=codec, producer_id=42, producer_epoch=3, base_sequence=17)
    (header,) = validate(batch)
    assert header == parse_batch_header(batch)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, 17)


def test_encoding_matches_an_independent_writer_byte_for_byte() -> None:
    sent = [
        Record(0, T0, b"k", b"v", []),
        Record(0, T0 + 5, None, b"value", [("h", b"x"), ("n", None)]),
        Record(0, T0 - 3, b"key", None, []),
    ]
    section = (
        raw_record(0, b"k", b"v")
        + raw_record(1, None, b"value", [(b"h", b"x"), (b"n", None)], ts_delta=5)
        + raw_record(2, b"key", None, ts_delta=-3)
    )
    expected = raw_batch(
        section, 3, base_offset=7, max_timestamp=T0 + 5, producer_id=9, producer_epoch=1, base_sequence=4, ple=2
    )
    batch = encode_batch(sent, base_offset=7, producer_id=9, producer_epoch=1, base_sequence=4, partition_leader_epoch=2)
    assert batch == expected


def test_header_fields_and_flags() -> None:
    batch = encode_batch(
        [Record(0, T0, b"k", b"v", [])],
        compression=LZ4,
        timestamp_type=rec.LOG_APPEND_TIME,
        transactional=True,
        producer_id=5,
        producer_epoch=2,
        base_sequence=0,
        partition_leader_epoch=11,
    )
    h = parse_batch_header(batch)
    assert h.compression == LZ4 and h.is_log_append_time and h.is_transactional and not h.is_control
    assert h.attributes == LZ4 | rec.TIMESTAMP_TYPE_MASK | rec.TRANSACTIONAL_MASK
    assert h.partition_leader_epoch == 11


def test_aiokafka_reads_our_batches_and_we_read_theirs() -> None:
    default_records = pytest.importorskip("aiokafka.record.default_records")
    for codec in CODECS:
        sent = sample_records(30)
        ours = encode_batch(sent, compression=codec)
        theirs_reader = default_records.DefaultRecordBatch(bytearray(ours))
        assert theirs_reader.validate_crc()
        got = list(theirs_reader)
        assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in got] == [
            (i, s.timestamp, s.key, s.value, s.headers) for i, s in enumerate(sent)
        ]
        builder = default_records.DefaultRecordBatchBuilder(
            magic=2, compression_type=codec, is_transactional=0, producer_id=-1,
            producer_epoch=-1, base_sequence=-1, batch_size=1 << 24,
        )
        for i, s in enumerate(sent):
            builder.append(i, timestamp=s.timestamp, key=s.key, value=s.value, headers=s.headers)
        theirs = bytes(builder.build())
        validate(theirs)
        assert_same_records(decode_batch(theirs).records, sent)
        if codec == NONE:
            assert theirs[21:] == ours[21:]


def test_varint_boundaries() -> None:
    # More than 8192 records, values around the one/two/three-byte varint limits.
    sizes = [0, 1, 63, 64, 8191, 8192, 70_000]
    sent = [Record(0, T0 + i * 1000, b"k" * (i % 70), b"v" * sizes[i % len(sizes)], []) for i in range(9000)]
    for codec in (NONE, ZSTD):
        batch = encode_batch(sent, compression=codec)
        validate(batch)
        assert_same_records(decode_batch(batch).records, sent)


def test_timestamps_default_and_base_timestamp() -> None:
    batch = encode_batch([Record(0, T0 + 10, None, b"a", []), Record(0, T0, None, b"b", [])], base_timestamp=T0 - 50)
    h = parse_batch_header(batch)
    assert (h.base_timestamp, h.max_timestamp) == (T0 - 50, T0 + 10)
    assert [r.timestamp for r in decode_batch(batch).records] == [T0 + 10, T0]

    class Pending:
        key = None
        value = b"x"
        headers = None
        timestamp = None

    batch = encode_batch([Pending()], base_timestamp=T0)
    assert decode_batch(batch).records[0].timestamp == T0
    assert decode_batch(batch).records[0].headers == []


def test_encode_rejects_empty_batches() -> None:
    with pytest.raises(ValueError):
        encode_batch([])


def test_header_keys_decode_leniently() -> None:
    section = raw_record(0, b"k", b"v", [(b"\xff\xfebad", b"x")])
    batch = raw_batch(section, 1)
    validate(batch)
    (record,) = decode_batch(batch).records
    assert record.headers == [("\ufffd\ufffdbad", b"x")]


def test_log_append_time_batches_report_max_timestamp() -> None:
    batch = bytearray(encode_batch(sample_records(5)))
    original = bytes(batch)
    rec.set_log_append_time(batch, 0, T0 + 999_999)
    h = parse_batch_header(batch)
    assert h.is_log_append_time and h.max_timestamp == T0 + 999_999
    assert h.crc == crc32c(bytes(batch[21:])) == rec.compute_batch_crc(batch)
    assert h.base_timestamp == parse_batch_header(original).base_timestamp
    assert batch[43:] == original[43:]  # only attributes, maxTimestamp and CRC changed
    assert {r.timestamp for r in decode_batch(batch).records} == {T0 + 999_999}


def test_log_append_time_at_a_position_inside_a_larger_buffer() -> None:
    first = encode_batch([Record(0, T0, None, b"a", [])])
    second = encode_batch([Record(0, T0, None, b"b", [])], base_offset=1)
    buf = bytearray(first + second)
    rec.set_log_append_time(memoryview(buf), len(first), T0 + 1)
    assert buf[: len(first)] == first
    batches = list(decode_records(buf))
    assert [b.records[0].timestamp for b in batches] == [T0, T0 + 1]
    with pytest.raises(ApiError):
        rec.set_log_append_time(bytearray(first[:40]), 0, T0)


def test_broker_rewrites_do_not_touch_the_crc() -> None:
    batch = bytearray(encode_batch(sample_records(3), compression=SNAPPY))
    rec.set_base_offset(batch, 0, 12345)
    rec.set_partition_leader_epoch(batch, 0, 7)
    decoded = decode_batch(batch)
    assert decoded.header.base_offset == 12345 and decoded.header.partition_leader_epoch == 7
    assert [r.offset for r in decoded.records] == [12345, 12346, 12347]


def _produced(*batches: bytes) -> tuple[bytearray, list]:
    buf = bytearray(b"".join(batches))
    return buf, validate_produce_records(buf, max_batch_size=BIG, allow_multiple_batches=True)


def test_patch_appended_batches_create_time_in_one_step() -> None:
    # The producer's header says maxTimestamp 0 (librdkafka without timestamps); the records say otherwise.
    first = bytearray(encode_batch(sample_records(5), compression=SNAPPY))
    expected = [max(r.timestamp for r in sample_records(n)) for n in (5, 2)]
    struct.pack_into(">q", first, rec.MAX_TIMESTAMP_OFFSET, 0)
    struct.pack_into(">I", first, rec.CRC_OFFSET, rec.compute_batch_crc(first))
    second = encode_batch(sample_records(2))
    buf, headers = _produced(bytes(first), second)
    assert [h.max_timestamp for h in headers] == expected
    untouched_crc = parse_batch_header(second).crc
    rec.patch_appended_batches(buf, headers, first_offset=100, leader_epoch=3)
    stored = [(pos, h) for pos, h in iter_batches(buf)]
    assert [h.base_offset for _, h in stored] == [100, 105]
    assert [h.partition_leader_epoch for _, h in stored] == [3, 3]
    assert [h.max_timestamp for _, h in stored] == expected
    assert stored[1][1].crc == untouched_crc  # nothing covered by the CRC changed
    for pos, h in stored:
        assert h.crc == rec.compute_batch_crc(buf, pos)
        assert not h.is_log_append_time
    assert headers == [h for _, h in stored]  # the facts now describe the stored bytes
    assert [r.offset for b in decode_records(buf) for r in b.records] == list(range(100, 107))


def test_patch_appended_batches_log_append_time() -> None:
    buf, headers = _produced(encode_batch(sample_records(3)), encode_batch(sample_records(1), compression=GZIP))
    rec.patch_appended_batches(buf, headers, first_offset=7, leader_epoch=0, log_append_time=T0 + 50_000)
    for (pos, h), fact in zip(iter_batches(buf), headers):
        assert h.is_log_append_time and h.max_timestamp == T0 + 50_000
        assert h.crc == rec.compute_batch_crc(buf, pos) == fact.crc
        assert fact.is_log_append_time and fact.max_timestamp == T0 + 50_000
    assert [(r.offset, r.timestamp) for b in decode_records(buf) for r in b.records] == \
        [(7, T0 + 50_000), (8, T0 + 50_000), (9, T0 + 50_000), (10, T0 + 50_000)]


def test_first_batch_is_transactional() -> None:
    txn = encode_batch(sample_records(1), producer_id=5, producer_epoch=0, base_sequence=0, transactional=True)
    assert rec.first_batch_is_transactional(txn)
    assert not rec.first_batch_is_transactional(encode_batch(sample_records(1)))
    assert not rec.first_batch_is_transactional(b"")
    assert not rec.first_batch_is_transactional(None)
    assert not rec.first_batch_is_transactional(txn[:20])


@pytest.mark.parametrize("codec", CODECS)
def test_record_offsets_and_timestamps(codec: int) -> None:
    records = [Record(0, T0 + d, b"k", b"v", []) for d in (0, 70_000, -5, 9)]
    batch = encode_batch(records, base_offset=40, compression=codec)
    assert rec.record_offsets_and_timestamps(batch) == [(40, T0), (41, T0 + 70_000), (42, T0 - 5), (43, T0 + 9)]
    stamped = bytearray(batch)
    rec.set_log_append_time(stamped, 0, T0 + 1)
    assert rec.record_offsets_and_timestamps(stamped) == [(40 + i, T0 + 1) for i in range(4)]


def test_encode_record_and_assemble_batch_match_the_encoder() -> None:
    records = [Record(0, T0 + i, b"key%d" % i if i else None, None if i == 2 else b"v" * 300 * i,
                      [("h", b"x"), ("n", None)] if i == 1 else []) for i in range(4)]
    expected = encode_batch(records, producer_id=9, producer_epoch=1, base_sequence=4, partition_leader_epoch=2)
    h = parse_batch_header(expected)
    body = b"".join(rec.encode_record(i, r.timestamp - T0, r.key, r.value, r.headers) for i, r in enumerate(records))
    built = rec.assemble_batch([body], base_offset=0, partition_leader_epoch=2, attributes=0, last_offset_delta=3,
                               base_timestamp=T0, max_timestamp=T0 + 3, producer_id=9, producer_epoch=1,
                               base_sequence=4, records_count=4)
    assert built == expected and h.crc == rec.compute_batch_crc(built)


# --- multiple batches and partial data ----------------------------------------------------


def test_iter_batches_and_decode_records_across_codecs() -> None:
    parts = [encode_batch(sample_records(5), base_offset=i * 5, compression=codec) for i, codec in enumerate(CODECS)]
    blob = b"".join(parts)
    positions = [pos for pos, _ in iter_batches(blob)]
    assert positions == [sum(len(p) for p in parts[:i]) for i in range(len(parts))]
    batches = list(decode_records(blob))
    assert [r.offset for b in batches for r in b.records] == list(range(25))
    assert [b.header.compression for b in batches] == CODECS


@pytest.mark.parametrize("cut", [1, 11, 12, 16, 17, 60, 61, 100])
def test_trailing_partial_batch_is_skipped(cut: int) -> None:
    first = encode_batch(sample_records(4))
    second = encode_batch(sample_records(4), base_offset=4)
    blob = first + second[:cut]
    assert [pos for pos, _ in iter_batches(blob)] == [0]
    assert len(list(decode_records(memoryview(blob)))) == 1
    assert list(decode_records(second[:cut])) == []


def test_decode_batch_of_truncated_data_is_corrupt() -> None:
    batch = encode_batch(sample_records(4))
    for cut in (0, 5, 20, 60, len(batch) - 1):
        assert error_code(decode_batch, batch[:cut]) == ErrorCode.CORRUPT_MESSAGE
    assert error_code(decode_batch, batch, len(batch)) == ErrorCode.CORRUPT_MESSAGE


def test_decode_batch_at_an_offset() -> None:
    first = encode_batch(sample_records(2))
    second = encode_batch(sample_records(3), base_offset=2)
    blob = first + second
    for buf in (blob, bytearray(blob), memoryview(blob)):
        assert [r.offset for r in decode_batch(buf, len(first)).records] == [2, 3, 4]


# --- CRC ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [NONE, LZ4])
def test_crc_corruption_is_detected(codec: int) -> None:
    batch = encode_batch(sample_records(10), compression=codec)
    for offset in (17, 21, 22, 30, 57, 61, len(batch) // 2, len(batch) - 1):
        bad = bytearray(batch)
        bad[offset] ^= 0x40
        assert error_code(decode_batch, bytes(bad)) == ErrorCode.CORRUPT_MESSAGE
        assert error_code(validate, bytes(bad)) == ErrorCode.CORRUPT_MESSAGE


def test_verify_crc_can_be_skipped() -> None:
    batch = bytearray(encode_batch([Record(0, T0, b"k", b"value", [])]))
    batch[17] ^= 0xFF
    assert decode_batch(batch, verify_crc=False).records[0].value == b"value"
    assert error_code(decode_batch, batch) == ErrorCode.CORRUPT_MESSAGE


# --- produce-path validation -------------------------------------------------------------------


def test_validate_accepts_all_buffer_types_and_leaves_data_alone() -> None:
    batch = encode_batch(sample_records(8))
    for buf in (batch, bytearray(batch), memoryview(batch), memoryview(bytearray(batch))):
        snapshot = bytes(buf)
        assert validate(buf)[0].records_count == 8
        assert bytes(buf) == snapshot


def test_validate_empty_and_truncated() -> None:
    batch = encode_batch(sample_records(4))
    assert error_code(validate, b"") == ErrorCode.INVALID_RECORD
    for cut in (1, 11, 12, 16, 17, 40, 61, len(batch) - 1):
        assert error_code(validate, batch[:cut]) == ErrorCode.INVALID_RECORD, cut


def test_validate_rejects_trailing_bytes_and_multiple_batches() -> None:
    batch = encode_batch(sample_records(4))
    assert error_code(validate, batch + b"\x00" * 5) == ErrorCode.INVALID_RECORD
    assert error_code(validate, batch + batch[:30]) == ErrorCode.INVALID_RECORD
    assert error_code(validate, batch + batch) == ErrorCode.INVALID_RECORD
    assert len(validate(batch + batch, allow_multiple_batches=True)) == 2


def test_validate_rejects_impossible_lengths_as_corrupt() -> None:
    batch = encode_batch(sample_records(4))
    for length in (-1, 0, 13):
        assert error_code(validate, patch(batch, ">i", 8, length, recrc=False)) == ErrorCode.CORRUPT_MESSAGE
    # Long enough for a legacy message, too short for a v2 header.
    short = patch(batch, ">i", 8, 30, recrc=False)[:42]
    assert error_code(validate, short) == ErrorCode.CORRUPT_MESSAGE
    assert error_code(decode_batch, short) == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("magic", [0, 1])
def test_validate_rejects_old_message_formats(magic: int) -> None:
    # A produced one is INVALID_RECORD, as Kafka 4's ProduceRequest.validateRecords answers
    # (4.3.1 checked: 87, no message); read, it is UNSUPPORTED_FOR_MESSAGE_FORMAT.
    assert error_code(validate, patch(encode_batch(sample_records(2)), ">b", 16, magic)) == ErrorCode.INVALID_RECORD
    # A genuine legacy message: offset, size, crc, magic, attributes, [timestamp], key, value.
    body = struct.pack(">bb", magic, 0) + (struct.pack(">q", T0) if magic else b"") + struct.pack(">i", -1)
    body += struct.pack(">i", 5) + b"hello"
    message = struct.pack(">I", 0) + body
    legacy = struct.pack(">qi", 0, len(message)) + message
    assert error_code(validate, legacy) == ErrorCode.INVALID_RECORD
    with pytest.raises(ApiError) as e:
        validate(legacy)
    assert e.value.message is None
    assert error_code(validate, legacy + legacy) == ErrorCode.INVALID_RECORD
    assert error_code(lambda: list(decode_records(legacy))) == ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT


@pytest.mark.parametrize("magic", [3, 127, -1])
def test_validate_rejects_unknown_magic_as_corrupt(magic: int) -> None:
    assert error_code(validate, patch(encode_batch(sample_records(2)), ">b", 16, magic)) == ErrorCode.CORRUPT_MESSAGE


def test_validate_rejects_non_zero_base_offset() -> None:
    assert error_code(validate, encode_batch(sample_records(2), base_offset=5)) == ErrorCode.INVALID_RECORD


def test_validate_enforces_max_batch_size() -> None:
    batch = encode_batch(sample_records(5))
    assert validate(batch, max_batch_size=len(batch))
    assert error_code(validate, batch, max_batch_size=len(batch) - 1) == ErrorCode.MESSAGE_TOO_LARGE


@pytest.mark.parametrize("codec_id", [5, 6, 7])
def test_validate_rejects_unknown_codec(codec_id: int) -> None:
    batch = patch(encode_batch(sample_records(2)), ">h", 21, codec_id)
    assert error_code(validate, batch) == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    assert error_code(decode_batch, batch) == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


@pytest.mark.parametrize("codec", CODECS)
def test_validate_count_mismatch(codec: int) -> None:
    batch = encode_batch(sample_records(6), compression=codec)
    # Header disagrees with itself.
    assert error_code(validate, patch(batch, ">i", 57, 7)) == ErrorCode.INVALID_RECORD
    assert error_code(validate, patch(batch, ">i", 23, 6)) == ErrorCode.INVALID_RECORD
    assert error_code(validate, patch(batch, ">i", 23, -1)) == ErrorCode.INVALID_RECORD
    assert error_code(validate, patch(patch(batch, ">i", 57, 0), ">i", 23, -1)) == ErrorCode.INVALID_RECORD
    # Consistent header, but more or fewer records than it declares.
    more = patch(patch(batch, ">i", 57, 7), ">i", 23, 6)
    fewer = patch(patch(batch, ">i", 57, 5), ">i", 23, 4)
    assert error_code(validate, more) == ErrorCode.INVALID_RECORD
    assert error_code(validate, fewer) == ErrorCode.INVALID_RECORD
    assert error_code(decode_batch, more) == ErrorCode.INVALID_RECORD
    assert error_code(decode_batch, fewer) == ErrorCode.INVALID_RECORD


@pytest.mark.parametrize("codec", [NONE, GZIP, ZSTD])
def test_validate_requires_consecutive_offset_deltas(codec: int) -> None:
    for deltas in ([0, 2, 3], [1, 2, 3], [0, 0, 2], [0, 1, -2], [0, 1, 64]):
        section = b"".join(raw_record(d) for d in deltas)
        records = compress(codec, section) if codec else section
        batch = raw_batch(records, 3, attributes=codec)
        assert error_code(validate, batch) == ErrorCode.INVALID_RECORD, deltas
        # Readers accept gaps: compacted logs have them.
        assert [r.offset for r in decode_batch(batch).records] == deltas
    good = b"".join(raw_record(d) for d in range(200))
    validate(raw_batch(compress(codec, good) if codec else good, 200, attributes=codec))


def test_validate_rejects_control_batches_from_clients() -> None:
    marker = encode_control_batch(ControlRecordType.COMMIT, producer_id=1, producer_epoch=0, coordinator_epoch=0,
                                  timestamp=T0)
    assert error_code(validate, marker) == ErrorCode.INVALID_RECORD
    plain_control = encode_batch([Record(0, T0, b"\x00\x00\x00\x01", b"\x00" * 6, [])], control=True)
    assert error_code(validate, plain_control) == ErrorCode.INVALID_RECORD


def test_validate_producer_id_rules() -> None:
    records = sample_records(3)
    assert error_code(validate, encode_batch(records, transactional=True)) == ErrorCode.INVALID_RECORD
    assert error_code(validate, encode_batch(records, producer_id=3, producer_epoch=0)) == ErrorCode.INVALID_RECORD
    validate(encode_batch(records, producer_id=3, producer_epoch=0, base_sequence=0))
    validate(encode_batch(records, producer_id=3, producer_epoch=0, base_sequence=0, transactional=True))


@pytest.mark.parametrize("codec", CODECS)
def test_validate_corrupt_compressed_payload(codec: int) -> None:
    if codec == NONE:
        return
    good = encode_batch(sample_records(6), compression=codec)
    # A valid CRC over a payload the codec cannot read (snappy has no checksum of its
    # own, so flipping a literal byte would go unnoticed: replace the whole payload).
    garbage = (b"\xde\xad\xbe\xef" * len(good))[: len(good) - HEADER_SIZE]
    bad = fix_crc(good[:HEADER_SIZE] + garbage)
    assert error_code(validate, bad) == ErrorCode.CORRUPT_MESSAGE
    assert error_code(decode_batch, bad) == ErrorCode.CORRUPT_MESSAGE
    truncated = fix_crc(patch(good[:-10], ">i", 8, len(good) - 10 - 12, recrc=False))
    assert error_code(validate, truncated) == ErrorCode.CORRUPT_MESSAGE
    assert error_code(decode_batch, truncated) == ErrorCode.CORRUPT_MESSAGE


def test_validate_decompression_cap() -> None:
    batch = encode_batch([Record(0, T0, None, bytes(1 << 20), [])], compression=ZSTD)
    assert len(batch) < 1000
    validate(batch)
    assert error_code(validate, batch, max_decompressed_size=1 << 19) == ErrorCode.CORRUPT_MESSAGE
    assert error_code(decode_batch, batch, max_decompressed_size=1 << 19) == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize(
    ("name", "section"),
    [
        ("record size too large", raw_record(0, size_adjust=1)),
        ("record size too small", raw_record(0, size_adjust=-1)),
        ("record size negative", zz(-5) + b"\x00" * 10),
        ("record size below minimum", zz(3) + b"\x00\x00\x00"),
        ("key length below -1", raw_record(0)[:4] + zz(-2) + raw_record(0)[5:]),
        ("value runs past record", raw_record(0, value=b"abc")[:-5] + zz(20) + b"abc\x00"),
        ("negative header count", raw_record(0, header_count=-1)),
        ("header count too high", raw_record(0, headers=[(b"a", b"b")], header_count=2)),
        ("header count huge", raw_record(0, header_count=1 << 30)),
        ("negative header key length", raw_record(0, headers=[(b"", b"b")])[:-3] + zz(-1) + b"\x02b"),
        ("header value below -1", raw_record(0, headers=[(b"a", b"b")])[:-2] + zz(-2) + b"b"),
        ("overlong varint", b"\x80\x80\x80\x80\x80\x01" + b"\x00" * 20),
        ("trailing garbage", raw_record(0) + b"\x00"),
        ("nothing at all", b""),
    ],
)
def test_malformed_records_are_invalid(name: str, section: bytes) -> None:
    for codec in (NONE, SNAPPY):
        records = compress(codec, section) if codec else section
        batch = raw_batch(records, 1, attributes=codec)
        assert error_code(validate, batch) == ErrorCode.INVALID_RECORD, name
        assert error_code(decode_batch, batch) == ErrorCode.INVALID_RECORD, name


def test_validate_require_keys() -> None:
    keyed = encode_batch([Record(0, T0, b"k", b"v", [])] * 3)
    validate(keyed, require_keys=True)
    unkeyed = encode_batch([Record(0, T0, b"k", b"v", []), Record(0, T0, None, b"v", [])])
    validate(unkeyed)
    assert error_code(validate, unkeyed, require_keys=True) == ErrorCode.INVALID_RECORD
    empty_key = encode_batch([Record(0, T0, b"", b"v", [])])
    validate(empty_key, require_keys=True)


def test_validate_timestamp_bounds() -> None:
    batch = encode_batch([Record(0, T0, None, b"a", []), Record(0, T0 + 5000, None, b"b", [])])
    validate(batch, timestamp_bounds=(T0, T0 + 5000))
    assert error_code(validate, batch, timestamp_bounds=(T0 + 1, T0 + 9000)) == ErrorCode.INVALID_TIMESTAMP
    assert error_code(validate, batch, timestamp_bounds=(T0 - 10, T0 + 4999)) == ErrorCode.INVALID_TIMESTAMP
    # As in Kafka, a record without a timestamp (-1) is not range-checked.
    untimed = encode_batch([Record(0, -1, None, b"a", [])])
    validate(untimed, timestamp_bounds=(T0, T0 + 1))


def test_a_keyless_record_out_of_range_is_refused_for_its_key_as_kafka() -> None:
    # Kafka's LogValidator checks a record's key before its timestamp: one error per record.
    batch = encode_batch([Record(0, T0, None, b"a", []), Record(0, T0 + 9000, b"k", b"b", [])])
    with pytest.raises(rec.RecordValidationError) as e:
        validate(batch, require_keys=True, timestamp_bounds=(T0 - 1, T0 + 1), topic_partition="t-0")
    assert e.value.code == ErrorCode.INVALID_TIMESTAMP  # any timestamp error names the batch's error
    assert e.value.record_errors == [
        (0, "Compacted topic cannot accept message without key in topic partition t-0"),
        (1, f"Timestamp {T0 + 9000} of message with offset 1 is out of range. The timestamp should be within "
            f"[{T0 - 1}, {T0 + 1}]")]


def test_validate_check_order_matches_kafka() -> None:
    batch = encode_batch(sample_records(3), base_offset=3)
    # baseOffset before size, size before CRC.
    assert error_code(validate, batch, max_batch_size=10) == ErrorCode.INVALID_RECORD
    corrupt = bytearray(encode_batch(sample_records(3)))
    corrupt[-1] ^= 1
    assert error_code(validate, bytes(corrupt), max_batch_size=10) == ErrorCode.MESSAGE_TOO_LARGE
    # Framing of the whole request before anything inside a batch.
    assert error_code(validate, bytes(corrupt) + bytes(corrupt)) == ErrorCode.INVALID_RECORD


# --- control records ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [ControlRecordType.COMMIT, ControlRecordType.ABORT])
def test_control_batches(kind: ControlRecordType) -> None:
    batch = encode_control_batch(kind, producer_id=77, producer_epoch=4, coordinator_epoch=9, base_offset=500,
                                 timestamp=T0)
    decoded = decode_batch(batch)
    h = decoded.header
    assert h.is_control and h.is_transactional and h.compression == NONE
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.base_offset) == (77, 4, -1, 500)
    (record,) = decoded.records
    assert record.key == struct.pack(">hh", 0, kind)
    assert record.value == struct.pack(">hi", 0, 9)
    assert (record.offset, record.timestamp) == (500, T0)
    marker = parse_control_record(record)
    assert (marker.type, marker.version, marker.coordinator_epoch) == (kind, 0, 9)


def test_control_record_parser_errors_and_unknown_types() -> None:
    def control(key: bytes | None, value: bytes | None) -> Record:
        return Record(0, T0, key, value, [])

    for key in (None, b"", b"\x00\x00\x00"):
        assert error_code(parse_control_record, control(key, b"\x00" * 6)) == ErrorCode.INVALID_RECORD
    assert error_code(parse_control_record, control(struct.pack(">hh", -1, 1), b"\x00" * 6)) == ErrorCode.INVALID_RECORD
    for value in (None, b"\x00\x00\x00\x00\x00"):
        assert error_code(parse_control_record, control(struct.pack(">hh", 0, 0), value)) == ErrorCode.INVALID_RECORD
    assert error_code(parse_control_record, control(struct.pack(">hh", 0, 1), struct.pack(">hi", -1, 0))) == (
        ErrorCode.INVALID_RECORD
    )
    # A newer key version with extra fields still parses, as does a non-marker type.
    newer = parse_control_record(control(struct.pack(">hh", 3, 1) + b"extra", struct.pack(">hi", 1, 5) + b"more"))
    assert (newer.type, newer.version, newer.coordinator_epoch) == (ControlRecordType.COMMIT, 3, 5)
    other = parse_control_record(control(struct.pack(">hh", 0, 2), b"anything"))
    assert (other.type, other.coordinator_epoch) == (2, None)
    with pytest.raises(ValueError):
        encode_control_batch(2, producer_id=1, producer_epoch=0, coordinator_epoch=0, timestamp=T0)
