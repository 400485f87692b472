"""confluent-kafka's serialization API: Serializer/Deserializer, the built-in ones for strings,
integers and doubles, and SerializingProducer/DeserializingConsumer that apply them.

A serializer is any callable ``(obj, ctx) -> bytes | None``; ``ctx`` names the topic, which
field (key or value) and the headers, so one serializer can serve keys and values.
"""

from __future__ import annotations

import struct
from typing import Any, Callable, cast

from rivulet.client.config import ClientConf
from rivulet.client.errors import LOCAL_CODES, KafkaError, KafkaException
from rivulet.client.sync import Consumer, Producer
from rivulet.client.types import Headers, Message

__all__ = [
    "MessageField", "SerializationContext", "SerializationError", "KeySerializationError", "ValueSerializationError",
    "KeyDeserializationError", "ValueDeserializationError", "ConsumeError", "Serializer", "Deserializer",
    "StringSerializer", "StringDeserializer", "IntegerSerializer", "IntegerDeserializer", "DoubleSerializer",
    "DoubleDeserializer", "SerializingProducer", "DeserializingConsumer",
]


class MessageField:
    """Which part of a record a (de)serializer is working on."""
    NONE = "none"
    KEY = "key"
    VALUE = "value"


class SerializationContext:
    """What a (de)serializer is told besides the object: topic, field and headers."""

    def __init__(self, topic: str, field: str, headers: Headers = None) -> None:
        self.topic = topic
        self.field = field
        self.headers = headers


class SerializationError(KafkaException):
    """A (de)serializer could not convert an object; made with a KafkaError or a message."""

    def __init__(self, error: KafkaError | str | None = None, reason: str | None = None) -> None:
        if not isinstance(error, KafkaError):
            error = KafkaError(KafkaError._FAIL, reason if error is None else str(error))
        super().__init__(error)


class ConsumeError(KafkaException):
    """poll() returned an error; ``kafka_message`` is the failed message."""

    def __init__(self, kafka_error: KafkaError | int | None = None, exception: BaseException | None = None,
                 kafka_message: Message | None = None) -> None:
        super().__init__(kafka_error, None if exception is None else str(exception))
        self.exception = exception
        self.kafka_message = kafka_message


class _FieldError(SerializationError):
    _field = MessageField.NONE

    def __init__(self, exception: BaseException | None = None, kafka_message: Message | None = None) -> None:
        super().__init__(KafkaError(KafkaError._KEY_SERIALIZATION if self._field == MessageField.KEY
                                    else KafkaError._VALUE_SERIALIZATION, str(exception)))
        self.exception = exception
        self.kafka_message = kafka_message


class KeySerializationError(_FieldError):
    _field = MessageField.KEY


class ValueSerializationError(_FieldError):
    _field = MessageField.VALUE


class _DeserializationError(ConsumeError):
    _code = "_VALUE_DESERIALIZATION"

    def __init__(self, exception: BaseException | None = None, kafka_message: Message | None = None) -> None:
        super().__init__(KafkaError(LOCAL_CODES[self._code], str(exception)), exception, kafka_message)


class KeyDeserializationError(_DeserializationError, SerializationError):
    _code = "_KEY_DESERIALIZATION"


class ValueDeserializationError(_DeserializationError, SerializationError):
    _code = "_VALUE_DESERIALIZATION"


class Serializer:
    """Turns an object into bytes (or None); subclasses implement ``__call__``."""

    def __call__(self, obj: Any, ctx: SerializationContext | None = None) -> bytes | None:
        raise NotImplementedError


class Deserializer:
    """Turns bytes (or None) into an object; subclasses implement ``__call__``."""

    def __call__(self, value: bytes | None, ctx: SerializationContext | None = None) -> Any:
        raise NotImplementedError


class _StructSerializer(Serializer):
    _fmt = ""

    def __call__(self, obj: Any, ctx: SerializationContext | None = None) -> bytes | None:
        if obj is None:
            return None
        try:
            return struct.pack(self._fmt, obj)
        except struct.error as e:
            raise SerializationError(str(e)) from e


class _StructDeserializer(Deserializer):
    _fmt = ""

    def __call__(self, value: bytes | None, ctx: SerializationContext | None = None) -> Any:
        if value is None:
            return None
        try:
            return struct.unpack(self._fmt, value)[0]
        except struct.error as e:
            raise SerializationError(str(e)) from e


class IntegerSerializer(_StructSerializer):
    """A 32-bit big-endian signed int (Java's IntegerSerializer)."""
    _fmt = ">i"


class IntegerDeserializer(_StructDeserializer):
    _fmt = ">i"


class DoubleSerializer(_StructSerializer):
    """An IEEE 754 64-bit big-endian float (Java's DoubleSerializer)."""
    _fmt = ">d"


class DoubleDeserializer(_StructDeserializer):
    _fmt = ">d"


class StringSerializer(Serializer):
    """A str encoded with ``codec`` (UTF-8 by default)."""

    def __init__(self, codec: str = "utf_8") -> None:
        self.codec = codec

    def __call__(self, obj: Any, ctx: SerializationContext | None = None) -> bytes | None:
        if obj is None:
            return None
        if not isinstance(obj, str):
            raise SerializationError(f"Unsupported type {type(obj)}")
        try:
            return obj.encode(self.codec)
        except UnicodeError as e:
            raise SerializationError(str(e)) from e


class StringDeserializer(Deserializer):
    def __init__(self, codec: str = "utf_8") -> None:
        self.codec = codec

    def __call__(self, value: bytes | None, ctx: SerializationContext | None = None) -> str | None:
        if value is None:
            return None
        try:
            return value.decode(self.codec)
        except UnicodeError as e:
            raise SerializationError(str(e)) from e


# Any: the application's own objects, whatever its (de)serializers take and make.
Converter = Callable[[Any, SerializationContext], Any]


def _convert(fn: Converter | None, obj: Any, ctx: SerializationContext, error: type[_FieldError] |
             type[_DeserializationError], msg: Message | None = None) -> Any:
    """``fn(obj, ctx)`` (``obj`` itself without a converter); its failure raised as ``error``."""
    if fn is None:
        return obj
    try:
        return fn(obj, ctx)
    except Exception as e:
        raise error(e, msg) from e


class SerializingProducer(Producer):
    """A Producer that runs ``key.serializer`` and ``value.serializer`` (from its config) on
    every record it produces."""

    def __init__(self, conf: ClientConf) -> None:
        conf = dict(conf)
        # Called as given, as confluent-kafka does: one that is not a function fails at produce().
        self._key_serializer: Converter | None = cast("Converter | None", conf.pop("key.serializer", None))
        self._value_serializer: Converter | None = cast("Converter | None", conf.pop("value.serializer", None))
        super().__init__(conf)

    def produce(self, topic: str, key: Any = None, value: Any = None, partition: int | None = -1,  # type: ignore[override]
                on_delivery: Callable | None = None, timestamp: int | None = 0, headers: Headers = None) -> None:
        key = _convert(self._key_serializer, key, SerializationContext(topic, MessageField.KEY, headers),
                       KeySerializationError)
        value = _convert(self._value_serializer, value, SerializationContext(topic, MessageField.VALUE, headers),
                         ValueSerializationError)
        super().produce(topic, value, key, partition, on_delivery=on_delivery, timestamp=timestamp, headers=headers)


class DeserializingConsumer(Consumer):
    """A Consumer whose poll() runs ``key.deserializer`` and ``value.deserializer`` (from its
    config) and raises ConsumeError for an error instead of returning it."""

    def __init__(self, conf: ClientConf) -> None:
        conf = dict(conf)
        self._key_deserializer: Converter | None = cast("Converter | None", conf.pop("key.deserializer", None))
        self._value_deserializer: Converter | None = cast("Converter | None", conf.pop("value.deserializer", None))
        super().__init__(conf)

    def poll(self, timeout: float | None = -1) -> Message | None:
        msg = super().poll(timeout)
        if msg is None:
            return None
        if msg.error() is not None:
            raise ConsumeError(msg.error(), kafka_message=msg)
        topic, headers = msg.topic(), msg.headers()
        msg.set_key(_convert(self._key_deserializer, msg.key(), SerializationContext(topic, MessageField.KEY, headers),
                             KeyDeserializationError, msg))
        msg.set_value(_convert(self._value_deserializer, msg.value(),
                               SerializationContext(topic, MessageField.VALUE, headers), ValueDeserializationError, msg))
        return msg

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        raise NotImplementedError("DeserializingConsumer does not support consume(); use poll()")
