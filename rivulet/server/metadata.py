"""The cluster metadata of a single-node cluster: topics, their ids, partition counts, configs.

In KRaft this lives in the controller's metadata log. A single Rivulet node keeps the same
facts in one small JSON document per log dir, rewritten atomically on every change (topic
creation, deletion, partition growth, config change), so a restart sees exactly what was
acknowledged.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from rivulet.protocol.errors import ApiError, ErrorCode

MAX_TOPIC_NAME = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})  # Kafka 4's
FILE_NAME = "rivulet-metadata.json"


def validate_topic_name(name: str) -> None:
    """Kafka 4's checks of a topic name, with its messages."""
    if not name:
        problem = "the empty string is not allowed"
    elif name in (".", ".."):
        problem = f"'{name}' is not allowed"
    elif len(name) > MAX_TOPIC_NAME:
        problem = f"the length of '{name}' is longer than the max allowed length {MAX_TOPIC_NAME}"
    elif not _LEGAL.match(name):
        problem = f"'{name}' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"
    else:
        return
    raise ApiError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Topic name is invalid: {problem}")


@dataclass
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    num_partitions: int
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def is_internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


class MetadataStore:
    """Topics by name and by id, persisted in the first log dir."""

    def __init__(self, log_dir: str | Path, cluster_id: str) -> None:
        self.path = Path(log_dir) / FILE_NAME
        self.cluster_id = cluster_id
        self.topics: dict[str, TopicInfo] = {}
        self.by_id: dict[uuid.UUID, TopicInfo] = {}
        # How many changes this file has recorded, kept in it (a file from before counts from 0):
        # one node's metadata offset, as DescribeQuorum reports it.
        self.changes = 0
        self._load()

    def _load(self) -> None:
        if not self.path.exists():
            return
        doc = json.loads(self.path.read_text())
        self.changes = int(doc.get("changes", 0))
        for t in doc.get("topics", []):
            info = TopicInfo(t["name"], uuid.UUID(t["id"]), int(t["partitions"]), dict(t.get("configs", {})))
            self.topics[info.name] = info
            self.by_id[info.topic_id] = info

    def _save(self) -> None:
        doc = {"version": 1, "cluster_id": self.cluster_id, "changes": self.changes + 1, "topics": [
            {"name": t.name, "id": str(t.topic_id), "partitions": t.num_partitions, "configs": t.configs}
            for t in self.topics.values()
        ]}
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as fh:
            json.dump(doc, fh, indent=1)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
        self.changes += 1

    def get(self, name: str) -> TopicInfo | None:
        return self.topics.get(name)

    def holds(self, tp: tuple[str, int]) -> bool:
        """Whether the partition ``(topic, index)`` exists."""
        info = self.topics.get(tp[0])
        return info is not None and 0 <= tp[1] < info.num_partitions

    def collides(self, name: str) -> str | None:
        """Kafka forbids names that differ only by '.' versus '_' (they clash in metric names)."""
        key = name.replace(".", "_")
        for other in self.topics:
            if other != name and other.replace(".", "_") == key:
                return other
        return None

    def add(self, name: str, num_partitions: int, configs: dict[str, str],
            topic_id: uuid.UUID | None = None) -> TopicInfo:
        info = TopicInfo(name, topic_id or uuid.uuid4(), num_partitions, dict(configs))
        self.topics[name] = info
        self.by_id[info.topic_id] = info
        try:
            self._save()
        except OSError:
            # Not durable, so not created: the caller rolls back what it made for the topic.
            del self.topics[name]
            del self.by_id[info.topic_id]
            raise
        return info

    def remove(self, name: str) -> TopicInfo | None:
        info = self.topics.pop(name, None)
        if info is not None:
            self.by_id.pop(info.topic_id, None)
            try:
                self._save()
            except OSError:
                self.topics[name] = info
                self.by_id[info.topic_id] = info
                raise
        return info

    def set_partitions(self, name: str, count: int) -> None:
        info = self.topics[name]
        old, info.num_partitions = info.num_partitions, count
        try:
            self._save()
        except OSError:
            info.num_partitions = old
            raise

    def set_configs(self, name: str, configs: dict[str, str]) -> None:
        self.topics[name].configs = dict(configs)
        self._save()
