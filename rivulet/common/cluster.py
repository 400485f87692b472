"""Narrow views of the cluster that coordinators and request handlers receive instead of the
broker: what a topic looks like, where this node answers, and how an internal topic is made."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Protocol


class TopicView(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def topic_id(self) -> uuid.UUID: ...

    @property
    def num_partitions(self) -> int: ...


class MetadataView(Protocol):
    """Read access to the topics of the cluster."""

    def get(self, name: str) -> TopicView | None: ...

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        """The name of the topic with this id (requests that name topics by id), or None."""
        ...

    def topic_names(self) -> list[str]:
        """Every topic's name (consumer groups' regular-expression subscriptions)."""
        ...

    def partition_racks(self, topic: str, partition: int) -> frozenset[str]:
        """The racks of the brokers holding a replica of the partition (rack-aware assignment);
        empty when no rack is known."""
        ...


class InternalTopicCreator(Protocol):
    """Creates an internal topic (``__consumer_offsets``, ``__transaction_state``,
    ``__share_group_state``) on a single node when its coordinator first needs it, its logs made
    off the event loop; the topic as it is when it exists already."""

    async def ensure_internal_topic_off_loop(self, name: str, num_partitions: int,
                                             configs: dict[str, str]) -> TopicView: ...


class GroupTopicCreator(Protocol):
    """Creates the topics a streams group's topology needs (repartition and changelog topics) as
    CreateTopics would, as Kafka's coordinator has them created: ``replication_factor`` 0 or -1
    is the broker's default.replication.factor."""

    async def create_group_topic(self, name: str, num_partitions: int, replication_factor: int,
                                 configs: dict[str, str]) -> None: ...


@dataclass(slots=True)
class NodeEndpoint:
    """This node's id and advertised address. One shared instance: the broker fills in the
    port it bound when the listener asked for an ephemeral one (``take_bound_port``)."""

    node_id: int
    host: str
    port: int

    def take_bound_port(self, port: int) -> None:
        """An ephemeral port (0) advertises the one bound; a configured port stays."""
        if self.port == 0:
            self.port = port


class ConfigValues(Protocol):
    """Broker config values by property name (``BrokerConfig``, or a dict in tests)."""

    def __getitem__(self, name: str) -> Any: ...  # Any: each property's value has its own type
