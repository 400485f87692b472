"""confluent-kafka's serialization API (``from rivulet.serialization import StringSerializer``)."""

from rivulet.client.serialization import (
    Deserializer,
    DoubleDeserializer,
    DoubleSerializer,
    IntegerDeserializer,
    IntegerSerializer,
    MessageField,
    SerializationContext,
    SerializationError,
    Serializer,
    StringDeserializer,
    StringSerializer,
)

__all__ = [
    "Deserializer", "DoubleDeserializer", "DoubleSerializer", "IntegerDeserializer", "IntegerSerializer",
    "MessageField", "SerializationContext", "SerializationError", "Serializer", "StringDeserializer",
    "StringSerializer",
]
