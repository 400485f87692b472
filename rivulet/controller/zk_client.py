"""The typed ZooKeeper client of the control plane (Kafka's KafkaZkClient role), on kazoo.

Every method here blocks: kazoo talks to ZooKeeper from its own threads. The broker's asyncio
loop never calls them directly; it goes through ``ZkBridge``, which runs them on one thread
of their own (one, so that the writes of an event reach ZooKeeper in the order they were
made) and brings watch callbacks back onto the loop.

The controller's writes are fenced by the controller epoch as Kafka's: each one is a
ZooKeeper transaction whose first operation checks that ``/controller_epoch`` still has the
version this controller wrote when it was elected. A controller that lost its epoch gets
``ControllerMovedError`` from every write and must resign.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass
from typing import Callable, Iterable, ParamSpec, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError
from kazoo.protocol.states import WatchedEvent

from rivulet.common.types import TopicPartition
from rivulet.controller import zk_data as z
from rivulet.security.acls import SUPPORTED_OPERATIONS, AccessControlEntry, ResourcePattern

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")
Watcher = Callable[[WatchedEvent], object]


class ControllerMovedError(RuntimeError):
    """A fenced write found /controller_epoch changed: another controller was elected."""


class BrokerIdInUseError(RuntimeError):
    """/brokers/ids/<id> is held by another live session."""


@dataclass(frozen=True)
class ControllerEpoch:
    """What an elected controller fences its writes with: the epoch and the zkVersion of
    /controller_epoch it wrote."""

    epoch: int
    zk_version: int


class KafkaZkClient:
    def __init__(self, connect: str, session_timeout_ms: int = 18000, connection_timeout_ms: int | None = None
                 ) -> None:
        self.connect = connect
        self.session_timeout_s = session_timeout_ms / 1000
        self.connection_timeout_s = (connection_timeout_ms or session_timeout_ms) / 1000
        self.zk = KazooClient(hosts=connect, timeout=session_timeout_ms / 1000)

    # ------------------------------------------------------------ session
    def start(self) -> None:
        """Connect, creating the chroot (the connect string's path) when it is missing, as Kafka does."""
        host, slash, chroot = self.connect.partition("/")
        if slash and chroot:
            bootstrap = KazooClient(hosts=host, timeout=self.session_timeout_s)
            bootstrap.start(timeout=self.connection_timeout_s)
            try:
                bootstrap.ensure_path("/" + chroot)
            finally:
                bootstrap.stop()
                bootstrap.close()
        self.zk.start(timeout=self.connection_timeout_s)

    def close(self) -> None:
        self.zk.stop()
        self.zk.close()

    @property
    def connected(self) -> bool:
        """Whether the session is connected now (not SUSPENDED nor LOST): a call made while it
        is not waits, unbounded, until ZooKeeper answers again."""
        return self.zk.state == KazooState.CONNECTED

    def abandon_session(self) -> None:
        """Stop the client without waiting for ZooKeeper: every call waiting on it, on any
        thread, fails at once (ConnectionLoss), and so does every later one. Its ephemeral
        znodes go when ZooKeeper expires the session. Safe from any thread."""
        self.zk.stop()

    def add_state_listener(self, listener: Callable[[KazooState], object]) -> None:
        self.zk.add_listener(listener)

    @property
    def last_zxid(self) -> int:
        """The newest ZooKeeper transaction id this session has seen in an answer."""
        return int(self.zk.last_zxid)

    @property
    def session_id(self) -> int:
        return self.zk.client_id[0] if self.zk.client_id else 0

    # ------------------------------------------------------------ set-up, ids
    def create_top_level_paths(self) -> None:
        for path in z.PERSISTENT_PATHS:
            self.zk.ensure_path(path)

    def get_or_create_cluster_id(self, proposed: str) -> str:
        try:
            return z.decode_cluster_id(self.zk.get(z.CLUSTER_ID)[0])
        except NoNodeError:
            pass
        try:
            self.zk.create(z.CLUSTER_ID, z.encode_cluster_id(proposed), makepath=True)
            return proposed
        except NodeExistsError:  # another broker won the race
            return z.decode_cluster_id(self.zk.get(z.CLUSTER_ID)[0])

    def generate_broker_sequence_id(self) -> int:
        """The next value of /brokers/seqid's version (Kafka adds reserved.broker.max.id)."""
        self.zk.ensure_path(z.SEQID)
        return self.zk.set(z.SEQID, b"", version=-1).version

    # ------------------------------------------------------------ delegation tokens
    def get_delegation_token_ids(self) -> list[str]:
        return self.zk.get_children(z.DELEGATION_TOKENS)

    def get_delegation_token(self, token_id: str) -> bytes | None:
        try:
            return self.zk.get(f"{z.DELEGATION_TOKENS}/{token_id}")[0]
        except NoNodeError:
            return None

    def set_delegation_token(self, token_id: str, data: bytes | None) -> None:
        """Write (None: delete) a token's znode, then the notification that makes every broker re-read it."""
        path = f"{z.DELEGATION_TOKENS}/{token_id}"
        try:
            if data is None:
                self.zk.delete(path)
            else:
                try:
                    self.zk.set(path, data)
                except NoNodeError:
                    self.zk.create(path, data, makepath=True)
        except NoNodeError:  # already deleted (another broker's expiry check)
            pass
        self.zk.create(f"{z.TOKEN_CHANGES}/{z.TOKEN_CHANGE_PREFIX}", token_id.encode(), sequence=True, makepath=True)

    def get_token_changes(self, watch: Watcher | None = None) -> list[tuple[str, str]]:
        """(sequence znode name, token id) of every pending token change notification, oldest first."""
        out = []
        for child in sorted(self.zk.get_children(z.TOKEN_CHANGES, watch=watch)):
            try:
                out.append((child, self.zk.get(f"{z.TOKEN_CHANGES}/{child}")[0].decode()))
            except NoNodeError:
                continue
        return out

    # ------------------------------------------------------------ finalized features
    def get_or_create_features(self, defaults: dict[str, int]) -> tuple[dict[str, int], int]:
        """/feature's levels and znode version, created with ``defaults`` when absent."""
        try:
            self.zk.create(z.FEATURE, z.encode_features(defaults))
        except NodeExistsError:
            pass
        return self.get_features()

    def get_features(self, watch: Watcher | None = None) -> tuple[dict[str, int], int]:
        data, stat = self.zk.get(z.FEATURE, watch=watch)
        return z.decode_features(data), stat.version

    def set_features(self, levels: dict[str, int], expected_version: int) -> int | None:
        """Write /feature if its version is still ``expected_version``: the new version, or None."""
        try:
            return self.zk.set(z.FEATURE, z.encode_features(levels), version=expected_version).version
        except BadVersionError:
            return None

    # ------------------------------------------------------------ brokers
    def register_broker(self, info: z.BrokerRegistration, wait_s: float = 0.0) -> int:
        """Create the ephemeral /brokers/ids/<id>; returns the broker epoch (its czxid).

        A znode held by another session (this broker's previous life, killed less than a
        session timeout ago) is waited for, up to ``wait_s``, until ZooKeeper expires it;
        BrokerIdInUseError if it is still there then."""
        path = z.broker_path(info.broker_id)
        deadline = time.monotonic() + wait_s
        waiting = False
        while True:
            try:
                self.zk.create(path, info.encode(), ephemeral=True, makepath=True)
                break
            except NodeExistsError:
                pass
            gone = threading.Event()
            stat = self.zk.exists(path, watch=lambda _event: gone.set())
            if stat is None:
                continue
            if stat.ephemeralOwner == self.session_id:
                self.zk.set(path, info.encode())
                break
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrokerIdInUseError(f"broker id {info.broker_id} is already registered by another "
                                         f"broker (its znode is held by the live session 0x{stat.ephemeralOwner:x})")
            if not waiting:
                waiting = True
                log.warning("broker id %d is still registered by session 0x%x (an earlier life of this broker?): "
                            "waiting up to %.0f s for ZooKeeper to expire it", info.broker_id,
                            stat.ephemeralOwner, wait_s)
            gone.wait(left)
        stat = self.zk.exists(path)
        assert stat is not None
        return stat.czxid

    def deregister_broker(self, broker_id: int) -> None:
        with suppress(NoNodeError):
            self.zk.delete(z.broker_path(broker_id))

    def get_broker_ids(self, watch: Watcher | None = None) -> list[int]:
        return sorted(int(c) for c in self.zk.get_children(z.BROKER_IDS, watch=watch))

    def get_broker(self, broker_id: int) -> z.BrokerRegistration | None:
        try:
            data, stat = self.zk.get(z.broker_path(broker_id))
        except NoNodeError:
            return None
        return z.BrokerRegistration.decode(broker_id, data, epoch=stat.czxid)

    def get_all_brokers(self, watch: Watcher | None = None) -> dict[int, z.BrokerRegistration]:
        out = {}
        for broker_id in self.get_broker_ids(watch):
            b = self.get_broker(broker_id)
            if b is not None:
                out[broker_id] = b
        return out

    def get_accounted_registrations(self) -> dict[int, int] | None:
        """/rivulet/accounted_registrations, or None when no controller has written it yet."""
        try:
            data, _ = self.zk.get(z.ACCOUNTED_REGISTRATIONS)
        except NoNodeError:
            return None
        return z.decode_accounted_registrations(data)

    def set_accounted_registrations(self, epochs: dict[int, int], epoch: ControllerEpoch) -> None:
        """Write /rivulet/accounted_registrations, fenced by the controller epoch."""
        data = z.encode_accounted_registrations(epochs)
        if self.zk.exists(z.ACCOUNTED_REGISTRATIONS) is None:
            self.zk.ensure_path(z.ACCOUNTED_REGISTRATIONS.rsplit("/", 1)[0])
            (created,) = self._fenced(epoch, lambda t: t.create(z.ACCOUNTED_REGISTRATIONS, data))
            if not isinstance(created, Exception):
                return
            if not isinstance(created, NodeExistsError):
                raise created
        (written,) = self._fenced(epoch, lambda t: t.set_data(z.ACCOUNTED_REGISTRATIONS, data))
        if isinstance(written, Exception):
            raise written

    # ------------------------------------------------------------ controller
    def get_controller_id(self, watch: Watcher | None = None) -> int | None:
        """The elected controller, or None; ``watch`` fires on its creation or deletion."""
        while True:
            try:
                return z.decode_controller(self.zk.get(z.CONTROLLER, watch=watch)[0])
            except NoNodeError:
                # Watch for its creation; if it was created meanwhile, read it (and watch it) instead.
                if watch is None or self.zk.exists(z.CONTROLLER, watch=watch) is None:
                    return None

    def get_controller_epoch(self) -> ControllerEpoch | None:
        try:
            data, stat = self.zk.get(z.CONTROLLER_EPOCH)
        except NoNodeError:
            return None
        return ControllerEpoch(z.decode_controller_epoch(data), stat.version)

    def try_elect_controller(self, broker_id: int, timestamp_ms: int) -> ControllerEpoch | None:
        """Create /controller and bump /controller_epoch in one transaction, as Kafka's
        registerControllerAndIncrementControllerEpoch; None when another broker is controller."""
        while True:
            current = self.get_controller_epoch()
            if current is None:
                try:
                    self.zk.create(z.CONTROLLER_EPOCH, z.encode_controller_epoch(0))
                except NodeExistsError:
                    pass
                continue
            new_epoch = current.epoch + 1
            t = self.zk.transaction()
            t.create(z.CONTROLLER, z.encode_controller(broker_id, timestamp_ms), ephemeral=True)
            t.set_data(z.CONTROLLER_EPOCH, z.encode_controller_epoch(new_epoch), version=current.zk_version)
            results = t.commit()
            if not any(isinstance(r, Exception) for r in results):
                return ControllerEpoch(new_epoch, current.zk_version + 1)
            if isinstance(results[0], NodeExistsError):
                # Our own /controller from this session (a retried election) counts as won.
                stat = self.zk.exists(z.CONTROLLER)
                if stat is not None and stat.ephemeralOwner == self.session_id:
                    latest = self.get_controller_epoch()
                    assert latest is not None
                    return latest
                return None
            # /controller_epoch moved under us (another election): read it again and retry.

    def resign_controller(self, epoch: ControllerEpoch) -> None:
        """Delete /controller if this controller still holds its epoch."""
        t = self.zk.transaction()
        t.check(z.CONTROLLER_EPOCH, epoch.zk_version)
        t.delete(z.CONTROLLER)
        t.commit()

    def _fenced(self, epoch: ControllerEpoch, ops: Callable[[object], None]) -> list[object]:
        """Run ``ops`` in a transaction after the epoch check; raise ControllerMovedError when
        the check failed, else return the other operations' results."""
        t = self.zk.transaction()
        t.check(z.CONTROLLER_EPOCH, epoch.zk_version)
        ops(t)
        results = t.commit()
        if isinstance(results[0], (BadVersionError, NoNodeError)):
            raise ControllerMovedError(f"controller epoch {epoch.epoch} is no longer current")
        return results[1:]

    # ------------------------------------------------------------ topics
    def get_all_topics(self, watch: Watcher | None = None) -> list[str]:
        return sorted(self.zk.get_children(z.TOPICS, watch=watch))

    def get_topic_assignment(self, topic: str, watch: Watcher | None = None) -> z.TopicAssignment | None:
        try:
            data, _ = self.zk.get(z.topic_path(topic), watch=watch)
        except NoNodeError:
            return None
        return z.TopicAssignment.decode(topic, data)

    def create_topic(self, assignment: z.TopicAssignment, configs: dict[str, str]) -> None:
        """Write the topic's config, then its assignment (which the controller watches), as Kafka's
        AdminZkClient; NodeExistsError when the topic exists."""
        if self.zk.exists(z.topic_path(assignment.topic)):
            raise NodeExistsError()
        cpath = z.config_path("topics", assignment.topic)
        data = z.encode_entity_config(configs)
        try:
            self.zk.create(cpath, data, makepath=True)
        except NodeExistsError:
            self.zk.set(cpath, data)
        self.zk.create(z.topic_path(assignment.topic), assignment.encode(), makepath=True)

    def add_topic_partitions(self, topic: str, added: dict[int, list[int]]) -> bool:
        """Add partitions to a topic's assignment (a conditional write, retried on a race); False
        when the topic is gone."""
        while True:
            try:
                data, stat = self.zk.get(z.topic_path(topic))
            except NoNodeError:
                return False
            a = z.TopicAssignment.decode(topic, data)
            a.replicas.update(added)
            try:
                self.zk.set(z.topic_path(topic), a.encode(), version=stat.version)
                return True
            except BadVersionError:
                continue
            except NoNodeError:
                return False

    def set_topic_assignment(self, assignment: z.TopicAssignment, epoch: ControllerEpoch) -> None:
        self._fenced(epoch, lambda t: t.set_data(z.topic_path(assignment.topic), assignment.encode()))

    def delete_topic_znodes(self, topic: str, epoch: ControllerEpoch) -> None:
        """Remove a deleted topic's znodes: its assignment and partition states, its config and its
        deletion request (the controller's last step of a deletion)."""
        if self.zk.exists(z.partitions_path(topic)):
            for p in self.zk.get_children(z.partitions_path(topic)):
                base = f"{z.partitions_path(topic)}/{p}"
                for child in self.zk.get_children(base):
                    self._fenced(epoch, lambda t, c=f"{base}/{child}": t.delete(c))
                self._fenced(epoch, lambda t, b=base: t.delete(b))
            self._fenced(epoch, lambda t: t.delete(z.partitions_path(topic)))
        for path in (z.topic_path(topic), z.config_path("topics", topic), z.delete_topic_path(topic)):
            if self.zk.exists(path):
                self._fenced(epoch, lambda t, p=path: t.delete(p))

    # ------------------------------------------------------------ topic deletion requests
    def request_topic_deletion(self, topic: str) -> None:
        try:
            self.zk.create(z.delete_topic_path(topic), b"", makepath=True)
        except NodeExistsError:
            pass

    def drop_topic_deletion_request(self, topic: str) -> None:
        with suppress(NoNodeError):
            self.zk.delete(z.delete_topic_path(topic))

    def get_topic_deletions(self, watch: Watcher | None = None) -> list[str]:
        return sorted(self.zk.get_children(z.DELETE_TOPICS, watch=watch))

    def is_topic_marked_for_deletion(self, topic: str) -> bool:
        return self.zk.exists(z.delete_topic_path(topic)) is not None

    # ------------------------------------------------------------ partition state
    def get_partition_state(self, tp: TopicPartition) -> z.LeaderAndIsr | None:
        try:
            data, stat = self.zk.get(z.partition_state_path(tp))
        except NoNodeError:
            return None
        return z.LeaderAndIsr.decode(data, stat.version)

    def get_partition_states(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, z.LeaderAndIsr]:
        out = {}
        for tp in tps:
            s = self.get_partition_state(tp)
            if s is not None:
                out[tp] = s
        return out

    def create_partition_state(self, tp: TopicPartition, state: z.LeaderAndIsr, epoch: ControllerEpoch
                               ) -> z.LeaderAndIsr | None:
        """The first state of a new partition; None when it already has one."""
        return self.create_partition_states([(tp, state)], epoch)[0]

    def create_partition_states(self, states: list[tuple[TopicPartition, z.LeaderAndIsr]], epoch: ControllerEpoch
                                ) -> list[z.LeaderAndIsr | None]:
        """``create_partition_state`` of many partitions (a new topic's), in order, with the
        requests pipelined as Kafka's controller sends them: two round trips for the lot, not
        three for each partition."""
        for topic in sorted({tp.topic for tp, _ in states}):
            self.zk.ensure_path(z.partitions_path(topic))
        made = [self.zk.create_async(f"{z.partitions_path(tp.topic)}/{tp.partition}") for tp, _ in states]
        for r in made:
            with suppress(NodeExistsError):
                r.get()
        commits = []
        for tp, state in states:
            t = self.zk.transaction()
            t.check(z.CONTROLLER_EPOCH, epoch.zk_version)
            t.create(z.partition_state_path(tp), state.encode())
            commits.append(t.commit_async())
        out: list[z.LeaderAndIsr | None] = []
        for (_tp, state), commit in zip(states, commits, strict=True):
            results = commit.get()
            if isinstance(results[0], (BadVersionError, NoNodeError)):
                raise ControllerMovedError(f"controller epoch {epoch.epoch} is no longer current")
            if isinstance(results[1], NodeExistsError):
                out.append(None)
            elif isinstance(results[1], Exception):
                raise results[1]
            else:
                out.append(state.written(0))
        return out

    def update_partition_state(self, tp: TopicPartition, state: z.LeaderAndIsr, epoch: ControllerEpoch
                               ) -> z.LeaderAndIsr | None:
        """Write ``state`` if the znode still has version ``state.partition_epoch``; the written
        state with its new version, or None when the version moved (re-read and retry)."""
        results = self._fenced(epoch, lambda t: t.set_data(z.partition_state_path(tp), state.encode(),
                                                           version=state.partition_epoch))
        r = results[0]
        if isinstance(r, (BadVersionError, NoNodeError, RolledBackError)):
            return None
        if isinstance(r, Exception):
            raise r
        return state.written(r.version)

    # ------------------------------------------------------------ configs
    def get_entity_config(self, entity_type: str, name: str) -> dict[str, str]:
        try:
            return z.decode_entity_config(self.zk.get(z.config_path(entity_type, name))[0])
        except NoNodeError:
            return {}

    def set_entity_config(self, entity_type: str, name: str, configs: dict[str, str],
                          altered: Iterable[str] | None = None) -> None:
        """Write the entity's config, then a change notification for the brokers to re-read it,
        naming the ``altered`` configs when given."""
        path = z.config_path(entity_type, name)
        data = z.encode_entity_config(configs)
        try:
            self.zk.set(path, data)
        except NoNodeError:
            self.zk.create(path, data, makepath=True)
        self.zk.create(f"{z.CONFIG_CHANGES}/{z.CONFIG_CHANGE_PREFIX}",
                       z.encode_config_change(f"{entity_type}/{name}", altered), sequence=True, makepath=True)

    def find_entity_config(self, entity_type: str, name: str) -> dict[str, str] | None:
        """The entity's config; None when it has no znode (never written)."""
        try:
            return z.decode_entity_config(self.zk.get(z.config_path(entity_type, name))[0])
        except NoNodeError:
            return None

    def create_entity_config(self, entity_type: str, name: str, configs: dict[str, str]) -> dict[str, str]:
        """Write the entity's config unless it has one already (another writer came first), with
        a change notification when written; the config it holds then."""
        try:
            self.zk.create(z.config_path(entity_type, name), z.encode_entity_config(configs), makepath=True)
        except NodeExistsError:
            return self.get_entity_config(entity_type, name)
        self.zk.create(f"{z.CONFIG_CHANGES}/{z.CONFIG_CHANGE_PREFIX}", z.encode_config_change(f"{entity_type}/{name}"),
                       sequence=True, makepath=True)
        return dict(configs)

    def get_entity_names(self, entity_type: str) -> list[str]:
        """The entities of ``entity_type`` that have a config znode (/config/<type>/<name>)."""
        try:
            return self.zk.get_children(f"{z.CONFIG}/{entity_type}")
        except NoNodeError:
            return []

    def update_entity_config(self, entity_type: str, name: str, keys: Iterable[str], configs: dict[str, str]) -> None:
        """Replace the entries named in ``keys`` of an entity's config, keeping the others (a
        user's znode holds its quotas and its SCRAM credentials), with a change notification."""
        merged = {k: v for k, v in self.get_entity_config(entity_type, name).items() if k not in set(keys)}
        self.set_entity_config(entity_type, name, {**merged, **configs})

    def get_config_changes(self, watch: Watcher | None = None) -> list[tuple[str, z.ConfigChange]]:
        """(sequence znode name, change) of every pending change notification, oldest first."""
        out = []
        for child in sorted(self.zk.get_children(z.CONFIG_CHANGES, watch=watch)):
            try:
                out.append((child, z.decode_config_change(self.zk.get(f"{z.CONFIG_CHANGES}/{child}")[0])))
            except NoNodeError:
                continue
        return out

    def delete_config_changes(self, names: Iterable[str]) -> None:
        for child in names:
            with suppress(NoNodeError):
                self.zk.delete(f"{z.CONFIG_CHANGES}/{child}")

    # ------------------------------------------------------------ ACLs
    def create_acl_paths(self) -> None:
        """The ACL roots and change paths, as Kafka's ZooKeeper-mode authorizer creates them."""
        for pattern_type in z.ACL_PATTERN_TYPES:
            for rt in SUPPORTED_OPERATIONS:
                self.zk.ensure_path(f"{z.acl_store_root(pattern_type)}/{rt.pascal}")
        for path in z.ACL_CHANGE_PATHS:
            self.zk.ensure_path(path)

    def get_acls(self, pattern: ResourcePattern) -> tuple[set[AccessControlEntry], int]:
        """A pattern's entries and its znode's version (-1: no znode)."""
        try:
            data, stat = self.zk.get(z.acl_path(pattern))
        except NoNodeError:
            return set(), -1
        return z.decode_acls(data), stat.version

    def get_all_acls(self) -> dict[ResourcePattern, set[AccessControlEntry]]:
        out: dict[ResourcePattern, set[AccessControlEntry]] = {}
        for pattern_type in z.ACL_PATTERN_TYPES:
            root = z.acl_store_root(pattern_type)
            for rt in SUPPORTED_OPERATIONS:
                try:
                    names = self.zk.get_children(f"{root}/{rt.pascal}")
                except NoNodeError:
                    continue
                for name in names:
                    pattern = ResourcePattern(rt, name, pattern_type)
                    entries, _ = self.get_acls(pattern)
                    if entries:
                        out[pattern] = entries
        return out

    def update_acls(self, pattern: ResourcePattern, added: Iterable[AccessControlEntry],
                    removed: Iterable[AccessControlEntry]) -> set[AccessControlEntry]:
        """Add and remove entries of one pattern by a conditional write on the znode's version
        (retried when another broker wrote first), then a change notification for every broker;
        answers the entries now stored."""
        added, removed = set(added), set(removed)
        path = z.acl_path(pattern)
        while True:
            current, version = self.get_acls(pattern)
            new = (current | added) - removed
            if new == current:
                return current
            try:
                if not new:
                    self.zk.delete(path, version=version)
                elif version < 0:
                    self.zk.create(path, z.encode_acls(new), makepath=True)
                else:
                    self.zk.set(path, z.encode_acls(new), version=version)
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue
            break
        self.zk.create(f"{z.acl_change_path(pattern.pattern_type)}/{z.ACL_CHANGE_PREFIX}",
                       z.encode_acl_change(pattern), sequence=True, makepath=True)
        return new

    def get_acl_changes(self, change_path: str, watch: Watcher | None = None) -> list[tuple[str, ResourcePattern]]:
        """(sequence znode name, pattern) of every ACL change notification under ``change_path``."""
        out = []
        for child in sorted(self.zk.get_children(change_path, watch=watch)):
            try:
                out.append((child, z.decode_acl_change(change_path, self.zk.get(f"{change_path}/{child}")[0])))
            except NoNodeError:
                continue
        return out


class ZkBridge:
    """Runs a ``KafkaZkClient``'s blocking calls on one thread of their own and brings watch
    events back onto the asyncio loop."""

    def __init__(self, client: KafkaZkClient, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.client = client
        self.loop = loop or asyncio.get_running_loop()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="zk")
        self._closed = threading.Event()

    async def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        return await self.loop.run_in_executor(self._executor, lambda: fn(*args, **kwargs))

    def on_loop(self, callback: Callable[[], object]) -> Watcher:
        """A kazoo watcher (called on kazoo's thread) that calls ``callback`` on the loop."""
        def watcher(_event: WatchedEvent) -> None:
            if not self._closed.is_set() and not self.loop.is_closed():
                self.loop.call_soon_threadsafe(callback)
        return watcher

    def on_state(self, callback: Callable[[KazooState], object]) -> None:
        """Session state changes (CONNECTED, SUSPENDED, LOST) delivered on the loop."""
        def listener(state: KazooState) -> None:
            if not self._closed.is_set() and not self.loop.is_closed():
                self.loop.call_soon_threadsafe(callback, state)
        self.client.add_state_listener(listener)

    async def close(self) -> None:
        self._closed.set()
        try:
            await self.run(self.client.close)
        finally:
            self._executor.shutdown(wait=False)
