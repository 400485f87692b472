"""The generated codec: every message, every version, round trips; headers; bounded decoding."""

from __future__ import annotations

import importlib
import pkgutil
import random
import uuid

import pytest
from hypothesis import given, settings, strategies as st

import rivulet.protocol.messages as messages
from rivulet.protocol import framing
from rivulet.protocol.errors import ProtocolDecodeError
from rivulet.protocol.schema import Struct, _in

pytestmark = pytest.mark.fast


def all_message_classes() -> list[type[Struct]]:
    out = []
    for info in pkgutil.iter_modules(messages.__path__):
        mod = importlib.import_module(f"rivulet.protocol.messages.{info.name}")
        for obj in vars(mod).values():
            if isinstance(obj, type) and issubclass(obj, Struct) and obj.NAME and obj.__module__ == mod.__name__:
                out.append(obj)
    return out


def populate(cls: type[Struct], version: int, rnd: random.Random, depth: int = 0) -> Struct:
    obj = cls()
    for f in cls.FIELDS:
        if not _in(f.versions, version):
            continue
        def one():
            k = f.kind
            if k == "bool":
                return rnd.random() < 0.5
            if k == "int8":
                return rnd.randint(-128, 127)
            if k == "int16":
                return rnd.randint(-2**15, 2**15 - 1)
            if k == "uint16":
                return rnd.randint(0, 2**16 - 1)
            if k == "int32":
                return rnd.randint(-2**31, 2**31 - 1)
            if k == "uint32":
                return rnd.randint(0, 2**32 - 1)
            if k == "int64":
                return rnd.randint(-2**63, 2**63 - 1)
            if k == "float64":
                return rnd.random()
            if k == "string":
                return "".join(rnd.choice("abcé中-_") for _ in range(rnd.randint(0, 8)))
            if k in ("bytes", "records"):
                return bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 12)))
            if k == "uuid":
                return uuid.UUID(int=rnd.getrandbits(128))
            return populate(f.struct, version, rnd, depth + 1)
        if _in(f.nullable, version) and rnd.random() < 0.2:
            setattr(obj, f.name, None)
        elif f.is_array:
            setattr(obj, f.name, [one() for _ in range(rnd.randint(0, 3 if depth < 2 else 1))])
        else:
            setattr(obj, f.name, one())
    return obj


CLASSES = all_message_classes()


def test_every_api_has_a_request_and_response():
    assert len(framing.api_version_ranges()) >= 80
    for key in framing.api_version_ranges():
        assert framing.request_class(key).API_KEY == key
        assert framing.response_class(key).API_KEY == key


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.NAME)
def test_round_trip_every_version(cls):
    rnd = random.Random(hash(cls.NAME) & 0xFFFF)
    lo, hi = cls.VALID_VERSIONS
    for version in range(lo, hi + 1):
        for _ in range(3):
            obj = populate(cls, version, rnd)
            data = obj.encode(version)
            back = cls.decode(data, version)
            assert back.encode(version) == data, f"{cls.NAME} v{version}"


def test_known_bytes_metadata_v0():
    req = framing.request_class(3)(topics=[framing.request_class(3).FIELDS[0].struct(name="t")])
    frame = framing.encode_request(req, 0, 7, "cli")
    # size, key 3, version 0, correlation 7, client id "cli", one topic "t"
    assert frame == bytes.fromhex("00000014" "0003" "0000" "00000007" "0003636c69" "00000001" "000174")
    hdr, body = framing.decode_request(frame[4:])
    assert (hdr.api_key, hdr.api_version, hdr.correlation_id, hdr.client_id) == (3, 0, 7, "cli")
    assert [t.name for t in body.topics] == ["t"]


def test_flexible_request_header_and_compact_fields():
    cls = framing.request_class(3)
    req = cls(topics=None, allow_auto_topic_creation=True)
    frame = framing.encode_request(req, 12, 1, None)
    hdr, body = framing.decode_request(frame[4:])
    assert hdr.header_version == 2 and hdr.client_id is None
    assert body.topics is None and body.allow_auto_topic_creation is True


def test_api_versions_response_header_has_no_tagged_fields():
    resp = framing.response_class(18)(error_code=0, api_keys=[])
    frame = framing.encode_response(resp, 18, 3, 42)
    # size(4) correlation(4) then straight into the body: error_code int16
    assert frame[4:8] == (42).to_bytes(4, "big")
    assert frame[8:10] == b"\x00\x00"
    cid, back = framing.decode_response(frame[4:], 18, 3)
    assert cid == 42 and back.error_code == 0


def test_tagged_fields_round_trip():
    # FetchRequest v12+ carries ClusterId as a tagged field (tag 0).
    cls = framing.request_class(1)
    req = cls(cluster_id="abc", replica_id=-1, max_wait_ms=5, topics=[])
    data = req.encode(12)
    assert cls.decode(data, 12).cluster_id == "abc"
    assert cls.decode(cls(replica_id=-1).encode(12), 12).cluster_id is None


def test_unknown_api_and_version():
    with pytest.raises(framing.UnsupportedApi):
        framing.decode_request_header(bytes.fromhex("7fff0000000000010000"))
    with pytest.raises(framing.UnsupportedApi) as e:
        framing.decode_request_header(bytes.fromhex("0012" "0063" "00000009" "0000"))
    assert e.value.correlation_id == 9 and e.value.api_version == 99


def test_truncated_frames_raise_decode_error():
    cls = framing.request_class(0)
    good = framing.encode_request(populate(cls, 9, random.Random(1)), 9, 1, "c")[4:]
    for cut in range(len(good)):
        try:
            framing.decode_request(good[:cut])
        except ProtocolDecodeError:
            continue
        # A prefix may decode only if it is a complete message on its own (never past the end).


def test_oversized_length_does_not_allocate():
    cls = framing.request_class(3)
    # Metadata v0 with an array claiming two billion topics.
    body = bytes.fromhex("7fffffff")
    with pytest.raises(ProtocolDecodeError):
        cls.decode(body, 0)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200))
def test_fuzz_request_decoder(data):
    try:
        framing.decode_request(data)
    except ProtocolDecodeError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(framing.api_version_ranges())), st.binary(max_size=120))
def test_fuzz_every_request_body(api_key, data):
    cls = framing.request_class(api_key)
    lo, hi = cls.VALID_VERSIONS
    for version in {lo, hi}:
        try:
            cls.decode(data, version)
        except ProtocolDecodeError:
            pass


def test_struct_equality_is_compiled_per_class_and_field_by_field():
    from rivulet.protocol.messages import fetch_response as fr
    a, b = fr.PartitionData(partition_index=3, records=b"x"), fr.PartitionData(partition_index=3, records=b"x")
    assert a == b and not a != b
    # The first comparison installs the class's own __eq__; nested structs get theirs too.
    assert fr.PartitionData.__dict__["__eq__"] is not Struct.__eq__
    b.current_leader.leader_epoch = 7
    assert a != b
    assert fr.LeaderIdAndEpoch.__dict__["__eq__"] is not Struct.__eq__
    b.current_leader.leader_epoch = -1
    b.aborted_transactions = [fr.AbortedTransaction(producer_id=1, first_offset=2)]
    assert a != b
    # Another type is never equal, even one with the same fields.
    assert fr.EpochEndOffset() != fr.LeaderIdAndEpoch()
    assert fr.EpochEndOffset() != (-1, -1)
    assert fr.EpochEndOffset(epoch=1, end_offset=2) == fr.EpochEndOffset(epoch=1, end_offset=2)


def test_fields_given_only_tagged_versions_are_written_and_read():
    """Kafka's generator gives a field without "versions" its taggedVersions: such fields were
    dropped from every version before (TransactionLogValue's producer ids, a streams group's
    last assignment configs)."""
    from rivulet.protocol.messages import streams_group_metadata_value as sgmv
    from rivulet.protocol.messages import transaction_log_value as tlv

    v = tlv.TransactionLogValue(producer_id=5, previous_producer_id=4, next_producer_id=9, producer_epoch=3,
                                transaction_timeout_ms=60000, transaction_status=2, transaction_partitions=[],
                                transaction_last_update_timestamp_ms=2, transaction_start_timestamp_ms=1,
                                client_transaction_version=2)
    back = tlv.TransactionLogValue.decode(v.encode(1), 1, 0)
    assert (back.previous_producer_id, back.next_producer_id, back.client_transaction_version) == (4, 9, 2)
    # Version 0 is not flexible: no place for them, the defaults come back.
    old = tlv.TransactionLogValue.decode(v.encode(0), 0, 0)
    assert (old.previous_producer_id, old.next_producer_id, old.client_transaction_version) == (-1, -1, 0)

    s = sgmv.StreamsGroupMetadataValue(epoch=3, metadata_hash=7, validated_topology_epoch=1,
                                       last_assignment_configs=[sgmv.LastAssignmentConfig(key="k", value="v")])
    s_back = sgmv.StreamsGroupMetadataValue.decode(s.encode(0), 0, 0)
    assert [(c.key, c.value) for c in s_back.last_assignment_configs] == [("k", "v")]
