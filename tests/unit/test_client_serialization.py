"""rivulet.serialization against confluent_kafka.serialization: same bytes, same objects, same errors."""

from __future__ import annotations

import pytest

import rivulet
from rivulet import serialization as rs
from rivulet.error import ConsumeError, KeyDeserializationError, KeySerializationError, ValueSerializationError

pytestmark = pytest.mark.fast

CASES = [("StringSerializer", "StringDeserializer", ["", "héllo", "中文", None]),
         ("IntegerSerializer", "IntegerDeserializer", [0, 1, -1, 2**31 - 1, -(2**31), None]),
         ("DoubleSerializer", "DoubleDeserializer", [0.0, 1.5, -2.25e300, float("inf"), None])]


@pytest.mark.parametrize("ser,de,values", CASES)
def test_round_trip(ser, de, values):
    ctx = rs.SerializationContext("t", rs.MessageField.VALUE)
    for v in values:
        assert getattr(rs, de)()(getattr(rs, ser)()(v, ctx), ctx) == v


@pytest.mark.parametrize("ser,de,values", CASES)
def test_same_bytes_as_confluent_kafka(ser, de, values):
    cs = pytest.importorskip("confluent_kafka.serialization")
    ctx = cs.SerializationContext("t", cs.MessageField.KEY)
    for v in values:
        assert getattr(rs, ser)()(v) == getattr(cs, ser)()(v, ctx)


def test_bad_input_raises_serialization_error():
    with pytest.raises(rs.SerializationError):
        rs.StringSerializer()(5)
    with pytest.raises(rs.SerializationError):
        rs.IntegerSerializer()(2**31)
    with pytest.raises(rs.SerializationError):
        rs.IntegerDeserializer()(b"\x00\x01")
    with pytest.raises(rs.SerializationError):
        rs.StringDeserializer("ascii")(b"\xff")


def test_field_errors_are_kafka_exceptions_with_librdkafkas_codes():
    e = KeySerializationError(ValueError("bad"))
    assert isinstance(e, rs.SerializationError) and isinstance(e, rivulet.KafkaException)
    assert e.args[0].code() == rivulet.KafkaError._KEY_SERIALIZATION and isinstance(e.exception, ValueError)
    assert ValueSerializationError(ValueError()).args[0].code() == rivulet.KafkaError._VALUE_SERIALIZATION
    d = KeyDeserializationError(ValueError("x"), kafka_message=None)
    assert isinstance(d, ConsumeError) and isinstance(d, rs.SerializationError)
    assert d.args[0].code() == rivulet.KafkaError._KEY_DESERIALIZATION


def test_exported_like_confluent_kafka():
    ck = pytest.importorskip("confluent_kafka")
    import confluent_kafka.serialization as cs
    for name in ("SerializingProducer", "DeserializingConsumer", "Producer", "Consumer", "KafkaError",
                 "KafkaException", "TopicPartition", "murmur2", "consistent", "fnv1a"):
        assert hasattr(ck, name) and hasattr(rivulet, name), name
    for name in rs.__all__:
        assert hasattr(cs, name), name
    assert {n for n in dir(cs) if n.endswith(("Serializer", "Deserializer", "Context", "Error", "Field"))} <= set(rs.__all__)


def test_serializing_producer_refuses_what_its_serializer_cannot_take():
    p = rivulet.SerializingProducer({"bootstrap.servers": "127.0.0.1:1", "key.serializer": rs.StringSerializer(),
                                     "value.serializer": rs.IntegerSerializer()})
    try:
        with pytest.raises(KeySerializationError):
            p.produce("t", key=5, value=1)
        with pytest.raises(ValueSerializationError):
            p.produce("t", key="k", value="x")
        assert len(p) == 0
    finally:
        p.purge()
        p.flush(0)
