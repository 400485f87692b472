"""Kafka's znodes: their paths and JSON formats, as a ZooKeeper-mode Kafka 3.x cluster writes
them, so that a ZooKeeper shell shows an operator what they expect. Pure: bytes in, bytes out.
"""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Iterable

from rivulet.common.types import TopicPartition
from rivulet.security.acls import (
    AccessControlEntry,
    PatternType,
    ResourcePattern,
    ResourceType,
    entries_from_json,
    entries_to_json,
)

CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKERS = "/brokers"
BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
SEQID = "/brokers/seqid"
CONFIG = "/config"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
ADMIN = "/admin"
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
LOG_DIR_EVENT_NOTIFICATION = "/log_dir_event_notification"
CLUSTER_ID = "/cluster/id"
LATEST_PRODUCER_ID_BLOCK = "/latest_producer_id_block"
CONSUMERS = "/consumers"  # the pre-0.9 consumers' root, still created by every broker
DELEGATION_TOKENS = "/delegation_token/tokens"  # <token id>: the token's information
TOKEN_CHANGES = "/delegation_token/token_changes"  # sequential notifications naming a changed token
TOKEN_CHANGE_PREFIX = "token_change_"
FEATURE = "/feature"  # the cluster's finalized feature levels (KIP-584's FeatureZNode)
# Rivulet's own (no Kafka znode): the broker epoch of each broker's last registration a
# controller accounted for (see encode_accounted_registrations).
ACCOUNTED_REGISTRATIONS = "/rivulet/accounted_registrations"
CONFIG_ENTITY_TYPES = ("topics", "clients", "users", "brokers", "ips")
# Group configs (Kafka keeps them in KRaft's metadata only): /config/groups/<group>, beside the others.
GROUP_CONFIG_ENTITY = "groups"
# Dynamic broker configs: /config/brokers/<id> per broker, /config/brokers/<default> cluster-wide.
BROKER_CONFIG_ENTITY = "brokers"
DEFAULT_ENTITY = "<default>"  # Kafka's ConfigEntityName.Default

# Created at start-up by every broker, as Kafka's KafkaZkClient.createTopLevelPaths does.
PERSISTENT_PATHS = (CONSUMERS, BROKER_IDS, TOPICS, CONFIG_CHANGES, DELETE_TOPICS, SEQID,
                    ISR_CHANGE_NOTIFICATION, LATEST_PRODUCER_ID_BLOCK, LOG_DIR_EVENT_NOTIFICATION,
                    DELEGATION_TOKENS, TOKEN_CHANGES,
                    *(f"{CONFIG}/{t}" for t in CONFIG_ENTITY_TYPES))


# Any in this module: the JSON of Kafka's znodes.
def _dump(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def _load(data: bytes) -> dict[str, Any]:
    doc = json.loads(data.decode())
    if not isinstance(doc, dict):
        raise ValueError(f"expected a JSON object, got {data[:100]!r}")
    return doc


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{TOPICS}/{topic}/partitions"


def partition_state_path(tp: TopicPartition) -> str:
    return f"{TOPICS}/{tp.topic}/partitions/{tp.partition}/state"


def config_path(entity_type: str, name: str) -> str:
    return f"{CONFIG}/{entity_type}/{name}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


# ---------------------------------------------------------------- /brokers/ids/<id>
@dataclass(frozen=True)
class EndPoint:
    listener: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    @property
    def connection_string(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener}://{host}:{self.port}"


@dataclass(frozen=True)
class BrokerRegistration:
    """A live broker: the ephemeral znode it wrote. ``epoch`` is the znode's creation zxid, the
    broker epoch that fences requests from an earlier life of the same broker id.

    ``clean_start`` (Rivulet's, in place of KRaft's ``previousBrokerEpoch``): this process found
    a clean-shutdown marker in every log dir, so no acknowledged record of its replicas can be
    missing. A znode without it (an older Rivulet, a ZooKeeper-era Kafka) proves nothing and
    reads as False, as Kafka's controller takes a registration without a previous epoch as an
    unclean restart."""

    broker_id: int
    endpoints: tuple[EndPoint, ...]
    rack: str | None = None
    jmx_port: int = -1
    timestamp_ms: int = 0
    epoch: int = -1
    # feature name -> (min_version, max_version) this broker supports
    features: dict[str, tuple[int, int]] = field(default_factory=dict, hash=False)
    clean_start: bool = False

    def endpoint(self, listener: str) -> EndPoint | None:
        for e in self.endpoints:
            if e.listener == listener:
                return e
        return None

    def encode(self) -> bytes:
        # host/port are the first PLAINTEXT endpoint, for clients older than endpoint lists.
        plain = next((e for e in self.endpoints if e.security_protocol == "PLAINTEXT"), None)
        doc: dict[str, Any] = {
            "version": 5,
            "host": plain.host if plain else None,
            "port": plain.port if plain else -1,
            "endpoints": [e.connection_string for e in self.endpoints],
            "jmx_port": self.jmx_port,
            "timestamp": str(self.timestamp_ms),
            "listener_security_protocol_map": {e.listener: e.security_protocol for e in self.endpoints},
            "features": {name: {"min_version": lo, "max_version": hi}
                         for name, (lo, hi) in self.features.items()},
        }
        if self.rack is not None:
            doc["rack"] = self.rack
        if self.clean_start:  # absent means False: an unclean start writes Kafka's own znode
            doc["clean_start"] = True
        return _dump(doc)

    @classmethod
    def decode(cls, broker_id: int, data: bytes, epoch: int = -1) -> "BrokerRegistration":
        doc = _load(data)
        version = int(doc["version"])
        if version < 1:
            raise ValueError(f"unsupported broker registration version {version}")
        if version == 1:
            endpoints = (EndPoint("PLAINTEXT", doc["host"], int(doc["port"])),)
        else:
            protocols: dict[str, str] = doc.get("listener_security_protocol_map") or {}
            endpoints = tuple(_parse_endpoint(s, protocols) for s in doc["endpoints"])
        features = {name: (int(v["min_version"]), int(v["max_version"]))
                    for name, v in (doc.get("features") or {}).items()}
        return cls(broker_id, endpoints, doc.get("rack"), int(doc.get("jmx_port", -1)),
                   int(doc.get("timestamp", 0)), epoch, features, doc.get("clean_start") is True)


def encode_features(levels: dict[str, int]) -> bytes:
    """The FeatureZNode: status 1 (enabled), each finalized feature's level as its max."""
    return _dump({"version": 1, "status": 1, "features": {
        name: {"min_version_level": 1, "max_version_level": level} for name, level in sorted(levels.items())}})


def decode_features(data: bytes) -> dict[str, int]:
    doc = _load(data)
    if doc.get("status", 1) != 1:  # a disabled FeatureZNode finalizes nothing
        return {}
    return {name: int(v["max_version_level"]) for name, v in (doc.get("features") or {}).items()
            if int(v["max_version_level"]) > 0}


def _parse_endpoint(s: str, protocols: dict[str, str]) -> EndPoint:
    listener, _, rest = s.partition("://")
    host, _, port = rest.rpartition(":")
    host = host.strip("[]")
    return EndPoint(listener, host, int(port), protocols.get(listener, listener))


# ---------------------------------------------------------------- /rivulet/accounted_registrations
def encode_accounted_registrations(epochs: dict[int, int]) -> bytes:
    """broker id -> the broker epoch (registration czxid) of its last registration an active
    controller has dealt with, unclean start included. KRaft's controller keeps each broker's
    registration in its metadata log, so a new controller knows which registrations it has
    handled; a ZooKeeper-era failover only sees the live znodes, and needs this to tell an
    unclean start that happened while no controller was active from one handled long ago."""
    return _dump({"version": 1, "brokers": {str(b): e for b, e in sorted(epochs.items())}})


def decode_accounted_registrations(data: bytes) -> dict[int, int]:
    return {int(b): int(e) for b, e in (_load(data).get("brokers") or {}).items()}


# ---------------------------------------------------------------- /controller, /controller_epoch
def encode_controller(broker_id: int, timestamp_ms: int) -> bytes:
    return _dump({"version": 1, "brokerid": broker_id, "timestamp": str(timestamp_ms)})


def decode_controller(data: bytes) -> int:
    return int(_load(data)["brokerid"])


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode()


def decode_controller_epoch(data: bytes) -> int:
    return int(data.decode())


# ---------------------------------------------------------------- /cluster/id
def encode_cluster_id(cluster_id: str) -> bytes:
    return _dump({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    return str(_load(data)["id"])


# ---------------------------------------------------------------- /brokers/topics/<topic>
@dataclass
class TopicAssignment:
    """A topic's replica assignment; ``adding``/``removing`` are set during a reassignment."""

    topic: str
    topic_id: uuid.UUID | None
    replicas: dict[int, list[int]]
    adding: dict[int, list[int]] = field(default_factory=dict)
    removing: dict[int, list[int]] = field(default_factory=dict)

    def encode(self) -> bytes:
        doc: dict[str, Any] = {
            "version": 3,
            "partitions": {str(p): r for p, r in sorted(self.replicas.items())},
            "adding_replicas": {str(p): r for p, r in sorted(self.adding.items()) if r},
            "removing_replicas": {str(p): r for p, r in sorted(self.removing.items()) if r},
        }
        if self.topic_id is not None:
            doc["topic_id"] = _uuid_to_kafka(self.topic_id)
        return _dump(doc)

    @classmethod
    def decode(cls, topic: str, data: bytes) -> "TopicAssignment":
        doc = _load(data)
        tid = doc.get("topic_id")

        def by_partition(key: str) -> dict[int, list[int]]:
            return {int(p): [int(b) for b in r] for p, r in (doc.get(key) or {}).items()}

        return cls(topic, _uuid_from_kafka(tid) if tid else None, by_partition("partitions"),
                   by_partition("adding_replicas"), by_partition("removing_replicas"))


def _uuid_to_kafka(u: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def _uuid_from_kafka(s: str) -> uuid.UUID:
    if len(s) == 36:  # a UUID in hex form, as a hand-written znode may hold
        return uuid.UUID(s)
    return uuid.UUID(bytes=base64.urlsafe_b64decode(s + "=" * (-len(s) % 4)))


# ---------------------------------------------------------------- .../partitions/<p>/state
@dataclass(frozen=True)
class LeaderAndIsr:
    """A partition's state znode; ``partition_epoch`` is the znode's version (Kafka's zkVersion),
    what AlterPartition and conditional writes compare."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    partition_epoch: int = 0
    leader_recovery_state: int = 0  # 0 RECOVERED, 1 RECOVERING
    # KIP-966 (eligible.leader.replicas.version 1), Kafka's PartitionRecord fields: replicas that
    # left the ISR while it was below min.insync.replicas and may still lead cleanly, and the
    # last leader of a partition whose ISR emptied. Written only when non-empty, so that a
    # cluster that never used them keeps Kafka 3.x's znode byte for byte.
    eligible_leader_replicas: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()

    def encode(self) -> bytes:
        doc: dict[str, Any] = {"controller_epoch": self.controller_epoch, "leader": self.leader, "version": 1,
                               "leader_epoch": self.leader_epoch, "isr": list(self.isr)}
        if self.leader_recovery_state != 0:
            doc["leader_recovery_state"] = self.leader_recovery_state
        if self.eligible_leader_replicas:
            doc["eligible_leader_replicas"] = list(self.eligible_leader_replicas)
        if self.last_known_elr:
            doc["last_known_elr"] = list(self.last_known_elr)
        return _dump(doc)

    @classmethod
    def decode(cls, data: bytes, zk_version: int) -> "LeaderAndIsr":
        doc = _load(data)
        return cls(int(doc["leader"]), int(doc["leader_epoch"]), tuple(int(b) for b in doc["isr"]),
                   int(doc["controller_epoch"]), zk_version, int(doc.get("leader_recovery_state", 0)),
                   tuple(int(b) for b in doc.get("eligible_leader_replicas") or ()),
                   tuple(int(b) for b in doc.get("last_known_elr") or ()))

    def new_leader(self, leader: int, isr: tuple[int, ...], controller_epoch: int) -> "LeaderAndIsr":
        return replace(self, leader=leader, leader_epoch=self.leader_epoch + 1, isr=isr,
                       controller_epoch=controller_epoch)

    def new_isr(self, isr: tuple[int, ...], controller_epoch: int) -> "LeaderAndIsr":
        return replace(self, isr=isr, controller_epoch=controller_epoch)

    def written(self, zk_version: int) -> "LeaderAndIsr":
        """This state as stored: its znode's version is the new partition epoch."""
        return replace(self, partition_epoch=zk_version)


# ---------------------------------------------------------------- /config/<type>/<name>, /config/changes
def encode_entity_config(configs: dict[str, str]) -> bytes:
    return _dump({"version": 1, "config": dict(configs)})


def decode_entity_config(data: bytes | None) -> dict[str, str]:
    if not data:
        return {}
    return {k: str(v) for k, v in (_load(data).get("config") or {}).items()}


@dataclass(frozen=True)
class ConfigChange:
    """A change notification: the entity whose config znode changed and, when the writer said,
    the config names it altered (None: not said, as by Kafka's tools)."""

    entity_path: str
    altered: frozenset[str] | None = None


def encode_config_change(entity_path: str, altered: Iterable[str] | None = None) -> bytes:
    """Kafka's version 2 notification. ``altered`` goes in a Rivulet-only key, which Kafka's
    readers skip (they take ``entity_path`` only): a cluster-level min.insync.replicas set to
    the value it had still clears the ELR (KIP-966), which the config alone cannot tell."""
    doc: dict[str, Any] = {"version": 2, "entity_path": entity_path}
    if altered is not None:
        doc["altered"] = sorted(altered)
    return _dump(doc)


def decode_config_change(data: bytes) -> ConfigChange:
    doc = _load(data)
    altered = doc.get("altered")
    return ConfigChange(str(doc["entity_path"]),
                        None if not isinstance(altered, list) else frozenset(str(n) for n in altered))


# ---------------------------------------------------------------- /admin/reassign_partitions
def encode_reassignment(moves: dict[TopicPartition, list[int]]) -> bytes:
    return _dump({"version": 1, "partitions": [
        {"topic": tp.topic, "partition": tp.partition, "replicas": r} for tp, r in moves.items()]})


def decode_reassignment(data: bytes) -> dict[TopicPartition, list[int]]:
    return {TopicPartition(p["topic"], int(p["partition"])): [int(b) for b in p["replicas"]]
            for p in _load(data).get("partitions", [])}


# ---------------------------------------------------------------- ACLs (Kafka's ZooKeeper-mode authorizer)
ACL_ROOT = "/kafka-acl"                      # literal patterns: /kafka-acl/<ResourceType>/<name>
EXTENDED_ACL_ROOT = "/kafka-acl-extended"    # others: /kafka-acl-extended/prefixed/<ResourceType>/<name>
ACL_CHANGES = "/kafka-acl-changes"
EXTENDED_ACL_CHANGES = "/kafka-acl-extended-changes"
ACL_CHANGE_PREFIX = "acl_changes_"
ACL_CHANGE_PATHS = (ACL_CHANGES, EXTENDED_ACL_CHANGES)
ACL_PATTERN_TYPES = (PatternType.LITERAL, PatternType.PREFIXED)


def acl_store_root(pattern_type: PatternType) -> str:
    if pattern_type is PatternType.LITERAL:
        return ACL_ROOT
    return f"{EXTENDED_ACL_ROOT}/{pattern_type.name.lower()}"


def acl_path(pattern: ResourcePattern) -> str:
    return f"{acl_store_root(pattern.pattern_type)}/{pattern.resource_type.pascal}/{pattern.name}"


def acl_change_path(pattern_type: PatternType) -> str:
    return ACL_CHANGES if pattern_type is PatternType.LITERAL else EXTENDED_ACL_CHANGES


def encode_acls(entries: Iterable[AccessControlEntry]) -> bytes:
    return _dump(entries_to_json(entries))


def decode_acls(data: bytes) -> set[AccessControlEntry]:
    return entries_from_json(_load(data)) if data else set()


def encode_acl_change(pattern: ResourcePattern) -> bytes:
    """A literal pattern's change is ``TYPE:name``; the others' a small JSON document."""
    if pattern.pattern_type is PatternType.LITERAL:
        return f"{pattern.resource_type.name}:{pattern.name}".encode()
    return _dump({"version": 1, "resourceType": pattern.resource_type.name, "name": pattern.name,
                  "patternType": pattern.pattern_type.name})


def decode_acl_change(change_path: str, data: bytes) -> ResourcePattern:
    if change_path == ACL_CHANGES:
        kind, _, name = data.decode().partition(":")
        return ResourcePattern(ResourceType.parse(kind), name, PatternType.LITERAL)
    doc = _load(data)
    return ResourcePattern(ResourceType.parse(str(doc["resourceType"])), str(doc["name"]),
                           PatternType.parse(str(doc["patternType"])))
