"""The consumer protocol embedded in classic groups: a member's subscription (JoinGroup's
protocol metadata) and its assignment (SyncGroup's), each Kafka's ConsumerProtocolSubscription or
ConsumerProtocolAssignment struct behind an int16 version, exactly as Java's client and
librdkafka write them. The client's assignors and the group coordinator (which reads them when a
classic group converts to a KIP-848 group, and writes them for classic members of one) share it.
A newer version than the codec knows is read with the highest known one: later versions only
append fields."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Iterable

from rivulet.protocol.messages import consumer_protocol_assignment as cpa
from rivulet.protocol.messages import consumer_protocol_subscription as cps

PROTOCOL_TYPE = "consumer"
SUBSCRIPTION_VERSION = 3
ASSIGNMENT_VERSION = 3
_I16 = struct.Struct(">h")

Partition = tuple[str, int]
"""(topic name, partition)."""


@dataclass
class Subscription:
    topics: list[str]
    user_data: bytes | None = None
    owned: list[Partition] = field(default_factory=list)
    generation: int = -1
    rack: str | None = None


def version_of(data: bytes) -> int:
    """The version a subscription or assignment was written with (an assignment answering a
    subscription is written with the subscription's version, as Kafka does)."""
    if len(data) < 2:
        raise ValueError("consumer protocol data is too short")
    return _I16.unpack_from(data, 0)[0]


def encode_subscription(s: Subscription, version: int = SUBSCRIPTION_VERSION) -> bytes:
    owned: dict[str, list[int]] = {}
    for t, p in s.owned:
        owned.setdefault(t, []).append(p)
    msg = cps.ConsumerProtocolSubscription(
        topics=list(s.topics), user_data=s.user_data,
        owned_partitions=[cps.TopicPartition(topic=t, partitions=sorted(ps)) for t, ps in sorted(owned.items())],
        generation_id=s.generation, rack_id=s.rack)
    return _I16.pack(version) + msg.encode(version)


def decode_subscription(data: bytes) -> Subscription:
    """Raises ValueError (or the codec's error) for data that is not a subscription."""
    version = version_of(data)
    if version < 0:
        raise ValueError(f"invalid subscription version {version}")
    v = min(version, cps.ConsumerProtocolSubscription.VALID_VERSIONS[1])
    msg = cps.ConsumerProtocolSubscription.decode(bytes(data), v, 2)
    owned = [(tp.topic, p) for tp in (msg.owned_partitions or []) for p in tp.partitions] if v >= 1 else []
    return Subscription(list(msg.topics), msg.user_data, owned,
                        msg.generation_id if v >= 2 else -1, msg.rack_id if v >= 3 else None)


def encode_assignment(partitions: Iterable[Partition], user_data: bytes | None = None,
                      version: int = ASSIGNMENT_VERSION) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for t, p in partitions:
        by_topic.setdefault(t, []).append(p)
    version = max(0, min(version, cpa.ConsumerProtocolAssignment.VALID_VERSIONS[1]))
    msg = cpa.ConsumerProtocolAssignment(
        assigned_partitions=[cpa.TopicPartition(topic=t, partitions=sorted(ps)) for t, ps in sorted(by_topic.items())],
        user_data=user_data)
    return _I16.pack(version) + msg.encode(version)


def decode_assignment(data: bytes | None) -> tuple[list[Partition], bytes | None]:
    if not data:
        return [], None  # an empty assignment may come as no bytes at all
    v = max(0, min(version_of(data), cpa.ConsumerProtocolAssignment.VALID_VERSIONS[1]))
    msg = cpa.ConsumerProtocolAssignment.decode(bytes(data), v, 2)
    return [(tp.topic, p) for tp in msg.assigned_partitions for p in tp.partitions], msg.user_data
