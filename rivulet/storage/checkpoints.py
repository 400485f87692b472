"""Small text files Kafka keeps next to the log, in Kafka's formats.

All writes are atomic: temp file, fsync, rename, fsync of the directory, so a
crash leaves either the old or the new content and never a torn file.
"""

from __future__ import annotations

import base64
import logging
import os
import time
import uuid
from collections.abc import Iterable, Mapping

from rivulet.common.config import load_properties
from rivulet.storage.log_dir_failure import discarding

log = logging.getLogger(__name__)

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
META_PROPERTIES = "meta.properties"
CLEAN_SHUTDOWN = ".kafka_cleanShutdown"


class CorruptCheckpointError(Exception):
    pass


def fsync_dir(path: str) -> None:
    """Make the creations, renames and deletions in a directory durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class DeferredSync:
    """A new log's small files (partition.metadata, leader-epoch-checkpoint) are written
    without fsync until the log's first flush of records syncs them, as Kafka defers the flush
    of partition.metadata: creating thousands of partitions then costs no fsync each.

    The owning log's lock guards it; after ``take`` its files are written with fsync again.
    """

    def __init__(self, deferring: bool) -> None:
        self._deferring = deferring
        self._paths: list[str] = []  # written without fsync since

    @property
    def deferring(self) -> bool:
        """No flush has made records of the log durable yet."""
        return self._deferring

    def wrote(self, path: str) -> None:
        if self._deferring and path not in self._paths:
            self._paths.append(path)

    def take(self) -> list[str]:
        """End the deferral (a flush of records is under way); the files it must sync first."""
        paths, self._paths = self._paths, []
        self._deferring = False
        return paths

    def restore(self, paths: list[str]) -> None:
        """That flush failed: its files wait for the next one."""
        if paths:
            self._deferring = True
            self._paths = paths + [p for p in self._paths if p not in paths]


def write_atomic(path: str, text: str, *, sync: bool = True) -> None:
    if discarding():
        return
    tmp = path + ".tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)  # no half-written file left behind (a full disk)
        except OSError:
            pass
        raise
    if sync:
        fsync_dir(os.path.dirname(path) or ".")


def _read_lines(path: str) -> list[str] | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return None


def _parse_versioned(path: str, fields: int) -> list[list[str]]:
    """Kafka's CheckpointFile layout: version line, count line, then ``count`` entries."""
    lines = _read_lines(path)
    if lines is None:
        return []
    try:
        if int(lines[0].strip()) != 0:
            raise CorruptCheckpointError(f"{path}: unsupported version {lines[0]!r}")
        count = int(lines[1].strip())
        entries = [line.split() for line in lines[2 : 2 + count]]
    except (IndexError, ValueError) as e:
        raise CorruptCheckpointError(f"{path}: malformed header") from e
    if len(entries) != count or any(len(e) != fields for e in entries):
        raise CorruptCheckpointError(f"{path}: expected {count} entries of {fields} fields")
    return entries


# -- offset checkpoints: "topic partition offset" ----------------------------------


def read_offset_checkpoint(path: str) -> dict[tuple[str, int], int]:
    """Read a recovery-point / log-start / replication checkpoint; missing file -> {}."""
    out: dict[tuple[str, int], int] = {}
    try:
        for topic, partition, offset in _parse_versioned(path, 3):
            out[(topic, int(partition))] = int(offset)
    except (CorruptCheckpointError, ValueError) as e:
        # Losing a checkpoint only costs a longer recovery (or an earlier log start),
        # which is safer than refusing to start.
        log.warning("ignoring unreadable checkpoint %s: %s", path, e)
        return {}
    return out


def write_offset_checkpoint(path: str, offsets: Mapping[tuple[str, int], int]) -> None:
    lines = ["0", str(len(offsets))]
    lines += [f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())]
    write_atomic(path, "\n".join(lines) + "\n")


# -- leader-epoch-checkpoint: "epoch startOffset" ----------------------------------


def read_epoch_checkpoint(path: str) -> list[tuple[int, int]]:
    return [(int(e), int(o)) for e, o in _parse_versioned(path, 2)]


def write_epoch_checkpoint(path: str, entries: Iterable[tuple[int, int]], *, sync: bool = True) -> None:
    entries = list(entries)
    lines = ["0", str(len(entries))] + [f"{e} {o}" for e, o in entries]
    write_atomic(path, "\n".join(lines) + "\n", sync=sync)


# -- Kafka's Uuid text form: URL-safe base64 without padding ----------------------


def uuid_to_kafka(u: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(u.bytes).decode("ascii").rstrip("=")


def uuid_from_kafka(s: str) -> uuid.UUID:
    s = s.strip()
    raw = base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
    if len(raw) != 16:
        raise ValueError(f"not a Kafka Uuid: {s!r}")
    return uuid.UUID(bytes=raw)


def random_kafka_uuid() -> str:
    # Kafka rejects ids starting with '-' (they look like CLI flags), so re-roll.
    while True:
        s = uuid_to_kafka(uuid.uuid4())
        if not s.startswith("-"):
            return s


# -- partition.metadata ------------------------------------------------------------


def write_partition_metadata(partition_dir: str, topic_id: uuid.UUID, *, sync: bool = True) -> str:
    """Write the file; returns its path (for a caller that syncs it later)."""
    path = os.path.join(partition_dir, PARTITION_METADATA)
    write_atomic(path, f"version: 0\ntopic_id: {uuid_to_kafka(topic_id)}\n", sync=sync)
    return path


def read_partition_metadata(partition_dir: str) -> uuid.UUID | None:
    lines = _read_lines(os.path.join(partition_dir, PARTITION_METADATA))
    if lines is None:
        return None
    fields = {}
    for line in lines:
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    try:
        if fields.get("version") != "0":
            raise ValueError(f"unsupported version {fields.get('version')!r}")
        return uuid_from_kafka(fields["topic_id"])
    except (KeyError, ValueError) as e:
        log.warning("ignoring malformed %s in %s: %s", PARTITION_METADATA, partition_dir, e)
        return None


# -- meta.properties (KRaft layout, version 1) ------------------------------------


def read_or_create_meta(log_dir: str, node_id: int, cluster_id: str | None = None) -> str:
    """Return the cluster id recorded in ``<log_dir>/meta.properties``, creating the file.

    A stored node id or cluster id that disagrees with the arguments is refused, as
    Kafka refuses to start on a log dir that belongs to another node or cluster.
    Pass the first dir's cluster id when handling further dirs.
    """
    os.makedirs(log_dir, exist_ok=True)
    path = os.path.join(log_dir, META_PROPERTIES)
    props = load_properties(path) if os.path.exists(path) else None
    if props is not None:
        stored_node = props.get("node.id", props.get("broker.id"))
        if stored_node is not None and int(stored_node) != node_id:
            raise RuntimeError(f"{path}: stored node.id {stored_node} does not match configured {node_id}")
        stored_cluster = props.get("cluster.id")
        if not stored_cluster:
            raise RuntimeError(f"{path}: no cluster.id")
        if cluster_id is not None and stored_cluster != cluster_id:
            raise RuntimeError(f"{path}: stored cluster.id {stored_cluster} does not match {cluster_id}")
        return stored_cluster
    cluster_id = cluster_id or random_kafka_uuid()
    text = (
        "#\n"
        f"#{time.strftime('%a %b %d %H:%M:%S %Z %Y')}\n"
        f"node.id={node_id}\n"
        f"directory.id={random_kafka_uuid()}\n"
        "version=1\n"
        f"cluster.id={cluster_id}\n"
    )
    write_atomic(path, text)
    return cluster_id
