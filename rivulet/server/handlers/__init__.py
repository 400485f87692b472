"""Request handlers, one module per area; ``KafkaApis`` (``server/apis.py``) dispatches to them.

A handler takes the request header, the decoded body and the connection, and returns a
response, a Future of one, or ``NO_RESPONSE`` (see ``server/answer.py``). Each module's class
receives the typed collaborators it needs and lists its handlers by API key; the supported
versions are in one table, ``apis.SUPPORTED_VERSIONS``.
"""

from __future__ import annotations

from typing import Any, Callable

from rivulet.common.cluster import MetadataView
from rivulet.protocol.framing import RequestHeader
from rivulet.replication.metadata_cache import MetadataCache
from rivulet.server.answer import Answer
from rivulet.server.network import KafkaConnection

# Any: each handler takes its own request class (a parameter type cannot be narrower).
Handler = Callable[[RequestHeader, Any, KafkaConnection], Answer]


def partition_count(metadata: MetadataView, cache: MetadataCache | None, topic: str) -> int:
    """How many partitions ``topic`` has (0: no such topic): the controller's word in cluster
    mode (UpdateMetadata), this node's topics otherwise."""
    if cache is not None:
        return cache.num_partitions(topic) or 0
    info = metadata.get(topic)
    return info.num_partitions if info is not None else 0
