"""confluent-kafka's ``confluent_kafka.error`` names (``from rivulet.error import ConsumeError``)."""

from rivulet.client.errors import KafkaError, KafkaException
from rivulet.client.serialization import (
    ConsumeError,
    KeyDeserializationError,
    KeySerializationError,
    SerializationError,
    ValueDeserializationError,
    ValueSerializationError,
)

__all__ = [
    "ConsumeError", "KafkaError", "KafkaException", "KeyDeserializationError", "KeySerializationError",
    "SerializationError", "ValueDeserializationError", "ValueSerializationError",
]
