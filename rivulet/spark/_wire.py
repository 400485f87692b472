"""A small blocking Kafka-protocol client for Spark's driver and executors, on Rivulet's codec.

Spark calls the data source from plain threads in short-lived Python workers; a blocking
socket per broker (no event loop, no background thread) is the cheapest thing that works
there, and it lets the reader pipeline one Fetch ahead while it decodes the previous one.
Works against any Kafka-compatible broker: versions are negotiated with ApiVersions and
capped where a newer version changes a request's shape (topic ids in Fetch v13+, grouped
OffsetFetch v8+, broker-side AddPartitionsToTxn v4+).
"""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time
from typing import Any, Iterable

from rivulet.client.client import parse_bootstrap
from rivulet.protocol import framing
from rivulet.protocol.errors import ErrorCode, KafkaError
from rivulet.protocol.messages import (
    api_versions_request as avq,
    find_coordinator_request as fcq,
    list_offsets_request as loq,
    metadata_request as mdq,
    offset_commit_request as ocq,
    offset_fetch_request as ofq,
)

log = logging.getLogger("rivulet.spark")

_SIZE = struct.Struct(">i")

MAX_VERSIONS: dict[int, int] = {
    0: 11,   # Produce: topic ids from v13
    1: 12,   # Fetch: topic ids from v13
    9: 7,    # OffsetFetch: grouped from v8
    24: 3,   # AddPartitionsToTxn: v4+ is broker-to-broker batching
}

# Errors after which metadata is stale: refresh and retry.
RETRIABLE = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.OFFSET_NOT_AVAILABLE, ErrorCode.REPLICA_NOT_AVAILABLE,
}
COORDINATOR_RETRIABLE = {
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
    ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.UNSTABLE_OFFSET_COMMIT, ErrorCode.REQUEST_TIMED_OUT,
}

EARLIEST = -2
LATEST = -1

TP = tuple[str, int]


class Conn:
    """One blocking connection. Requests may be pipelined: ``submit`` then ``receive`` in order."""

    def __init__(self, host: str, port: int, client_id: str = "rivulet-spark", timeout: float = 60.0) -> None:
        self.host, self.port = host, port
        self.client_id = client_id
        self.timeout = timeout
        self.sock = socket.create_connection((host, port), timeout=min(timeout, 30.0))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:  # big fetch responses: let the kernel buffer the one in flight while we decode
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        except OSError:
            pass
        self.sock.settimeout(timeout)
        self._cid = 0
        self._pending: list[tuple[int, int, int]] = []
        self.api_versions: dict[int, tuple[int, int]] = {}
        self._handshake()

    def _handshake(self) -> None:
        try:
            resp = self.request(avq.ApiVersionsRequest(client_software_name="rivulet-spark",
                                                       client_software_version="0.1.0"), version=3)
        except KafkaError:
            resp = None
        if resp is None or resp.error_code == ErrorCode.UNSUPPORTED_VERSION:
            resp = self.request(avq.ApiVersionsRequest(), version=0)
        if resp.error_code:
            raise KafkaError(ErrorCode(resp.error_code), f"ApiVersions to {self.host}:{self.port}")
        self.api_versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}

    def version(self, api_key: int) -> int:
        ours = framing.request_class(api_key).VALID_VERSIONS
        theirs = self.api_versions.get(api_key)
        if theirs is None:
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, f"the broker does not support API key {api_key}")
        hi = min(ours[1], theirs[1], MAX_VERSIONS.get(api_key, ours[1]))
        if hi < max(ours[0], theirs[0]):
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, f"no common version for API key {api_key}")
        return hi

    def submit(self, req: Any, version: int | None = None) -> None:
        if version is None:
            version = self.version(req.API_KEY)
        self._cid = (self._cid + 1) & 0x7FFFFFFF
        self.sock.sendall(framing.encode_request(req, version, self._cid, self.client_id))
        self._pending.append((self._cid, req.API_KEY, version))

    def receive(self) -> Any:
        cid, api_key, version = self._pending.pop(0)
        size = _SIZE.unpack(self._read(4))[0]
        frame = self._read(size)
        got, body = framing.decode_response(frame, api_key, version)
        if got != cid:
            self.close()
            raise ConnectionError(f"correlation id {got} from {self.host}:{self.port}, expected {cid}")
        return body

    def request(self, req: Any, version: int | None = None) -> Any:
        self.submit(req, version)
        return self.receive()

    def _read(self, n: int) -> bytearray:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        recv_into = self.sock.recv_into
        while got < n:
            k = recv_into(view[got:], n - got)
            if k == 0:
                raise ConnectionError(f"connection to {self.host}:{self.port} closed")
            got += k
        return buf

    @property
    def busy(self) -> bool:
        return bool(self._pending)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class Cluster:
    """Bootstrap, metadata and one connection per broker; what driver and executors share."""

    def __init__(self, bootstrap: str, client_id: str = "rivulet-spark", timeout: float = 60.0) -> None:
        self.bootstrap = parse_bootstrap(bootstrap)
        self.client_id = client_id
        self.timeout = timeout
        self.brokers: dict[int, tuple[str, int]] = {}
        self.leaders: dict[TP, int] = {}
        self.partition_counts: dict[str, int] = {}
        self._conns: dict[int, Conn] = {}
        self._any: Conn | None = None

    # ------------------------------------------------------------ connections
    def conn(self, node: int) -> Conn:
        c = self._conns.get(node)
        if c is None:
            host, port = self.brokers[node]
            c = self._conns[node] = Conn(host, port, self.client_id, self.timeout)
        return c

    def drop(self, node: int) -> None:
        c = self._conns.pop(node, None)
        if c is not None:
            c.close()

    def any_conn(self) -> Conn:
        for node in list(self._conns):
            c = self._conns[node]
            if not c.busy:
                return c
        if self._any is not None:
            return self._any
        last: Exception | None = None
        for host, port in self.bootstrap:
            try:
                self._any = Conn(host, port, self.client_id, self.timeout)
                return self._any
            except OSError as e:
                last = e
        raise ConnectionError(f"no bootstrap server reachable ({self.bootstrap}): {last}")

    def close(self) -> None:
        for c in self._conns.values():
            c.close()
        self._conns.clear()
        if self._any is not None:
            self._any.close()
            self._any = None

    def _any_request(self, req: Any) -> Any:
        try:
            return self.any_conn().request(req)
        except (OSError, ConnectionError):
            self._reset_any()
            return self.any_conn().request(req)

    def _reset_any(self) -> None:
        if self._any is not None:
            self._any.close()
            self._any = None
        for node in list(self._conns):
            self.drop(node)

    # ------------------------------------------------------------ metadata
    def metadata(self, topics: Iterable[str] | None = None, auto_create: bool = False) -> dict[str, int]:
        """Refresh brokers and leaders; returns {topic: partition count} for the topics found."""
        names = None if topics is None else sorted(set(topics))
        req = mdq.MetadataRequest(
            topics=None if names is None else [mdq.MetadataRequestTopic(name=t) for t in names],
            allow_auto_topic_creation=auto_create)
        resp = self._any_request(req)
        self.brokers = {b.node_id: (b.host, b.port) for b in resp.brokers}
        found: dict[str, int] = {}
        for t in resp.topics:
            if t.error_code or t.name is None or (names is None and t.name.startswith("__")):
                continue
            found[t.name] = len(t.partitions)
            self.partition_counts[t.name] = len(t.partitions)
            for p in t.partitions:
                self.leaders[(t.name, p.partition_index)] = p.leader_id if p.error_code == 0 else -1
        return found

    def leader(self, tp: TP) -> int:
        node = self.leaders.get(tp, -1)
        if node < 0 or node not in self.brokers:
            self.metadata([tp[0]])
            node = self.leaders.get(tp, -1)
            if node < 0 or node not in self.brokers:
                raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"no leader for {tp[0]}-{tp[1]}")
        return node

    # ------------------------------------------------------------ offsets
    def list_offsets(self, specs: dict[TP, int], isolation_level: int = 0, attempts: int = 6) -> dict[TP, int]:
        """{tp: offset} for timestamps (EARLIEST, LATEST or ms); -1 when nothing matches a time.
        Under read_committed, LATEST is the last stable offset."""
        out: dict[TP, int] = {}
        remaining = dict(specs)
        for attempt in range(attempts):
            by_node: dict[int, dict[TP, int]] = {}
            for tp, ts in remaining.items():
                try:
                    by_node.setdefault(self.leader(tp), {})[tp] = ts
                except KafkaError:
                    pass
            for node, tps in by_node.items():
                topics: dict[str, list] = {}
                for (t, p), ts in tps.items():
                    topics.setdefault(t, []).append(loq.ListOffsetsPartition(partition_index=p, timestamp=ts))
                req = loq.ListOffsetsRequest(replica_id=-1, isolation_level=isolation_level, timeout_ms=30000,
                                             topics=[loq.ListOffsetsTopic(name=t, partitions=ps)
                                                     for t, ps in topics.items()])
                try:
                    resp = self.conn(node).request(req)
                except (OSError, ConnectionError):
                    self.drop(node)
                    continue
                for t in resp.topics:
                    for p in t.partitions:
                        tp = (t.name, p.partition_index)
                        if p.error_code == 0:
                            out[tp] = p.offset
                            remaining.pop(tp, None)
                        elif p.error_code in RETRIABLE:
                            self.leaders.pop(tp, None)
                        else:
                            raise KafkaError(ErrorCode(p.error_code), f"ListOffsets {tp[0]}-{tp[1]}")
            if not remaining:
                return out
            time.sleep(min(0.05 * 2 ** attempt, 1.0))
            self.metadata({t for t, _ in remaining})
        raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE,
                         f"cannot list offsets for {sorted(remaining)[:5]}")

    # ------------------------------------------------------------ coordinators and groups
    def coordinator(self, key: str, key_type: int = 0, attempts: int = 10) -> int:
        """Node id of the group (0) or transaction (1) coordinator for ``key``."""
        for attempt in range(attempts):
            c = self.any_conn()
            v = c.version(fcq.FindCoordinatorRequest.API_KEY)
            req = fcq.FindCoordinatorRequest(key=key, key_type=key_type, coordinator_keys=[key])
            resp = c.request(req, v)
            if v >= 4:
                co = resp.coordinators[0]
                code, node, host, port = co.error_code, co.node_id, co.host, co.port
            else:
                code, node, host, port = resp.error_code, resp.node_id, resp.host, resp.port
            if code == 0:
                self.brokers.setdefault(node, (host, port))
                return node
            if code not in COORDINATOR_RETRIABLE:
                raise KafkaError(ErrorCode(code), f"FindCoordinator {key!r}")
            time.sleep(min(0.05 * 2 ** attempt, 1.0))
        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"no coordinator for {key!r}")

    def commit_offsets(self, group: str, offsets: dict[TP, int], metadata: str = "") -> None:
        """A standalone commit (generation -1, no member), as a consumer with assign() does."""
        by_topic: dict[str, list] = {}
        for (t, p), o in sorted(offsets.items()):
            by_topic.setdefault(t, []).append(ocq.OffsetCommitRequestPartition(
                partition_index=p, committed_offset=o, committed_metadata=metadata))
        req = ocq.OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                                      topics=[ocq.OffsetCommitRequestTopic(name=t, partitions=ps)
                                              for t, ps in by_topic.items()])
        self._group_call(group, req, lambda r: [p.error_code for t in r.topics for p in t.partitions])

    def committed(self, group: str, tps: Iterable[TP] | None, require_stable: bool = True
                  ) -> dict[TP, tuple[int, str]]:
        """{tp: (offset, metadata)} committed by ``group`` (every partition it has committed
        when ``tps`` is None); offset -1 when none."""
        topics = None
        if tps is not None:
            by_topic: dict[str, list[int]] = {}
            for t, p in tps:
                by_topic.setdefault(t, []).append(p)
            topics = [ofq.OffsetFetchRequestTopic(name=t, partition_indexes=ps) for t, ps in by_topic.items()]
        req = ofq.OffsetFetchRequest(group_id=group, require_stable=require_stable, topics=topics)
        resp = self._group_call(group, req, lambda r: [r.error_code] + [p.error_code for t in r.topics
                                                                         for p in t.partitions])
        return {(t.name, p.partition_index): (p.committed_offset, p.metadata or "")
                for t in resp.topics for p in t.partitions}

    def _group_call(self, group: str, req: Any, codes: Any, attempts: int = 12) -> Any:
        last = ErrorCode.NONE
        for attempt in range(attempts):
            node = self.coordinator(group, 0)
            try:
                resp = self.conn(node).request(req)
            except (OSError, ConnectionError):
                self.drop(node)
                time.sleep(0.1)
                continue
            errs = [ErrorCode(c) for c in codes(resp) if c]
            if not errs:
                return resp
            last = errs[0]
            if not all(e in COORDINATOR_RETRIABLE for e in errs):
                raise KafkaError(last, f"{type(req).__name__} for group {group!r}")
            time.sleep(min(0.05 * 2 ** attempt, 1.0))
        raise KafkaError(last, f"{type(req).__name__} for group {group!r}: retries exhausted")


# ---------------------------------------------------------------- executor-side pool
# Python workers are reused across tasks (spark.python.worker.reuse), and one worker runs one
# task at a time; keeping its connections saves a handshake per partition per micro-batch.
_POOL: dict[str, Cluster] = {}
_POOL_LOCK = threading.Lock()


def pooled(bootstrap: str) -> Cluster:
    with _POOL_LOCK:
        c = _POOL.get(bootstrap)
        if c is None:
            c = _POOL[bootstrap] = Cluster(bootstrap)
        return c


def discard(bootstrap: str) -> None:
    with _POOL_LOCK:
        c = _POOL.pop(bootstrap, None)
    if c is not None:
        c.close()
