"""The values users hold: TopicPartition, Message, and confluent-kafka's special offsets."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rivulet.client.errors import KafkaError

if TYPE_CHECKING:
    from rivulet.protocol.messages.metadata_response import MetadataResponse

OFFSET_BEGINNING = -2
OFFSET_END = -1
OFFSET_STORED = -1000
OFFSET_INVALID = -1001

Payload = bytes | bytearray | memoryview | str | None
"""A record's key or value, or a header's value, as the producer takes it (str as UTF-8)."""
Headers = Mapping[str | bytes, Payload] | Sequence[tuple[str | bytes, Payload]] | None
"""A record's headers as the producer takes them: a dict, or (name, value) pairs."""

TIMESTAMP_NOT_AVAILABLE = 0
TIMESTAMP_CREATE_TIME = 1
TIMESTAMP_LOG_APPEND_TIME = 2


class TopicPartition:
    """A topic partition, optionally with an offset: hashable by (topic, partition) only."""

    __slots__ = ("topic", "partition", "offset", "metadata", "leader_epoch", "error")

    def __init__(self, topic: str, partition: int = -1, offset: int = OFFSET_INVALID,
                 metadata: str | None = None, leader_epoch: int | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.metadata = metadata
        self.leader_epoch = leader_epoch
        self.error: KafkaError | None = None

    def __hash__(self) -> int:
        return hash((self.topic, self.partition))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TopicPartition):
            return NotImplemented
        return self.topic == other.topic and self.partition == other.partition

    def __lt__(self, other: TopicPartition) -> bool:
        return (self.topic, self.partition) < (other.topic, other.partition)

    def __repr__(self) -> str:
        return (f"TopicPartition{{topic={self.topic},partition={self.partition},offset={self.offset},"
                f"leader_epoch={self.leader_epoch},error={self.error}}}")

    __str__ = __repr__


class Message:
    """One consumed record, a delivery report, or an error event (``error()`` is set)."""

    __slots__ = ("_topic", "_partition", "_offset", "_key", "_value", "_headers", "_ts_type", "_ts",
                 "_error", "_leader_epoch", "_latency")

    def __init__(self, topic: str | None = None, partition: int = -1, offset: int = OFFSET_INVALID,
                 key: bytes | None = None, value: bytes | None = None, headers: list | None = None,
                 timestamp_type: int = TIMESTAMP_NOT_AVAILABLE, timestamp: int = 0,
                 error: KafkaError | None = None, leader_epoch: int | None = None) -> None:
        self._topic = topic
        self._partition = partition
        self._offset = offset
        self._key = key
        self._value = value
        self._headers = headers
        self._ts_type = timestamp_type
        self._ts = timestamp
        self._error = error
        self._leader_epoch = leader_epoch
        self._latency: float | None = None

    def topic(self) -> str | None:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    # Any, not bytes: a DeserializingConsumer's deserializer puts the application's objects here.
    def key(self) -> Any:
        return self._key

    def value(self) -> Any:  # as key()
        return self._value

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        """A list of (name, value) pairs, or None when the record has none (as confluent-kafka)."""
        return self._headers or None

    def timestamp(self) -> tuple[int, int]:
        return self._ts_type, self._ts

    def error(self) -> KafkaError | None:
        return self._error

    def leader_epoch(self) -> int | None:
        return self._leader_epoch

    def latency(self) -> float | None:
        return self._latency

    def delivery_count(self) -> int | None:
        """How often a share group delivered this record (None: not from a share consumer)."""
        return None

    def set_key(self, key: Any) -> None:  # as key()
        self._key = key

    def set_value(self, value: Any) -> None:  # as key()
        self._value = value

    def set_headers(self, headers: list) -> None:
        self._headers = headers

    def set_topic(self, topic: str) -> None:
        self._topic = topic

    def set_error(self, error: KafkaError | None) -> None:
        self._error = error

    def __len__(self) -> int:
        v = self._value
        return 0 if v is None else len(v)

    def __repr__(self) -> str:
        if self._error is not None:
            return f"Message(error={self._error}, topic={self._topic}, partition={self._partition})"
        return f"Message(topic={self._topic}, partition={self._partition}, offset={self._offset})"


class ShareMessage(Message):
    """A record a share consumer acquired, with its delivery count (1 the first time)."""

    __slots__ = ("_delivery_count",)

    def __init__(self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None,
                 headers: list | None, timestamp_type: int, timestamp: int, leader_epoch: int | None,
                 delivery_count: int) -> None:
        super().__init__(topic, partition, offset, key, value, headers, timestamp_type, timestamp, None,
                         leader_epoch)
        self._delivery_count = delivery_count

    def delivery_count(self) -> int | None:
        return self._delivery_count


def make_error_message(error: KafkaError, topic: str | None = None, partition: int = -1,
                       offset: int = OFFSET_INVALID) -> Message:
    return Message(topic, partition, offset, error=error)


class ConsumerGroupMetadata:
    """What ``Consumer.consumer_group_metadata()`` returns, for ``send_offsets_to_transaction``."""

    __slots__ = ("group_id", "generation_id", "member_id", "group_instance_id")

    def __init__(self, group_id: str, generation_id: int = -1, member_id: str = "",
                 group_instance_id: str | None = None) -> None:
        self.group_id = group_id
        self.generation_id = generation_id
        self.member_id = member_id
        self.group_instance_id = group_instance_id

    def __repr__(self) -> str:
        return (f"ConsumerGroupMetadata(group_id={self.group_id!r}, generation_id={self.generation_id}, "
                f"member_id={self.member_id!r})")


class BrokerMetadata:
    def __init__(self, id: int, host: str, port: int) -> None:
        self.id = id
        self.host = host
        self.port = port

    def __repr__(self) -> str:
        return f"BrokerMetadata({self.id}, {self.host}:{self.port})"


class PartitionMetadata:
    def __init__(self, id: int, leader: int, replicas: list[int], isrs: list[int], error: KafkaError | None) -> None:
        self.id = id
        self.leader = leader
        self.replicas = replicas
        self.isrs = isrs
        self.error = error

    def __repr__(self) -> str:
        return f"PartitionMetadata({self.id}, leader={self.leader})"


class TopicMetadata:
    def __init__(self, topic: str, partitions: dict[int, PartitionMetadata], error: KafkaError | None) -> None:
        self.topic = topic
        self.partitions = partitions
        self.error = error

    def __repr__(self) -> str:
        return f"TopicMetadata({self.topic}, {len(self.partitions)} partitions)"


class ClusterMetadata:
    """What list_topics() returns, shaped like confluent-kafka's."""

    def __init__(self) -> None:
        self.cluster_id: str | None = None
        self.controller_id = -1
        self.brokers: dict[int, BrokerMetadata] = {}
        self.topics: dict[str, TopicMetadata] = {}
        self.orig_broker_id = -1
        self.orig_broker_name: str | None = None

    @classmethod
    def from_response(cls, resp: MetadataResponse) -> ClusterMetadata:
        md = cls()
        md.cluster_id = resp.cluster_id
        md.controller_id = resp.controller_id
        for b in resp.brokers:
            md.brokers[b.node_id] = BrokerMetadata(b.node_id, b.host, b.port)
        for t in resp.topics:
            parts = {p.partition_index: PartitionMetadata(p.partition_index, p.leader_id, list(p.replica_nodes),
                                                          list(p.isr_nodes),
                                                          KafkaError(p.error_code) if p.error_code else None)
                     for p in t.partitions}
            md.topics[t.name] = TopicMetadata(t.name, parts, KafkaError(t.error_code) if t.error_code else None)
        return md
