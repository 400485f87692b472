"""All partition logs of a broker across its log dirs (Kafka's LogManager)."""

from __future__ import annotations

import errno
import json
import logging
import os
import resource
import shutil
import threading
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field

from rivulet.common.time import SYSTEM_CLOCK
from rivulet.common.types import TopicPartition
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.storage.checkpoints import (
    CLEAN_SHUTDOWN,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    fsync_dir,
    read_offset_checkpoint,
    write_atomic,
    write_offset_checkpoint,
)
from rivulet.storage.config import LogConfig
from rivulet.storage.dir_lock import DirLock
from rivulet.storage.log import FUTURE_SUFFIX, Log, parse_topic_partition
from rivulet.storage.log_dir_failure import (
    NO_SPACE_ERRNOS,
    KafkaStorageError,
    LogDirFailureChannel,
    discarding,
    writes_discarded,
)

log = logging.getLogger(__name__)

_DELETE_SUFFIX = "-delete"
_IGNORED_SUFFIXES = ("-stray",)
# Out of descriptors (the process's or the system's): a limit to raise, not a disk fault.
_RESOURCE_ERRNOS = (errno.EMFILE, errno.ENFILE)


def _no_free_block(d: str) -> bool:
    try:
        return os.statvfs(d).f_bavail == 0
    except OSError:
        return False


class TooManyOpenFilesError(OSError):
    """Start-up ran out of file descriptors: the process's limit, not a fault of a log dir."""

    def __init__(self, path: str, loaded: int, error: OSError) -> None:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        super().__init__(error.errno, f"out of file descriptors loading {path} ({error.strerror}) with {loaded} "
                         f"logs open; the open-file limit is {soft}: raise it (ulimit -n, or LimitNOFILE= for "
                         "a systemd service) and start again")


class _NoSpace(Exception):
    """Loading a log dir ran out of space: it is loaded again read-only."""

    def __init__(self, path: str, error: OSError) -> None:
        super().__init__(path)
        self.path = path
        self.error = error


@dataclass(frozen=True)
class LogDirDescription:
    path: str
    offline_reason: str | None
    partition_sizes: dict[TopicPartition, int]
    total_bytes: int
    usable_bytes: int
    # Replicas being moved here (AlterReplicaLogDirs): size, and how far behind the current log.
    future_sizes: dict[TopicPartition, tuple[int, int]] = field(default_factory=dict)
    cordoned: bool = False  # takes no new partitions (cordoned.log.dirs, KIP-1066)


class LogManager:
    """Loads, creates and deletes partition logs; owns the per-dir checkpoint files.

    ``cleanup`` (it deletes segments that reads may be using) belongs on the event-loop
    thread. ``flush_dirty`` and ``checkpoint`` only fsync and write checkpoint files, and
    ``create_logs``, ``delete_logs`` and ``remove_deleted`` only touch logs no partition
    serves yet (or any more), so they may run in a worker thread: the table of logs is
    changed under a lock.
    """

    def __init__(self, log_dirs: list[str], defaults: LogConfig, *, producer_id_expiration_ms: int = 86_400_000,
                 time_ms: Callable[[], int] = SYSTEM_CLOCK.milliseconds) -> None:
        if not log_dirs:
            raise ValueError("at least one log dir is required")
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        self.defaults = defaults
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.time_ms = time_ms  # the broker's clock, for every Log
        self._logs: dict[TopicPartition, Log] = {}
        # Replicas being moved to another log dir (Kafka's future logs), and the dirs asked for
        # partitions this broker does not host yet.
        self._futures: dict[TopicPartition, Log] = {}
        self._preferred_dirs: dict[TopicPartition, str] = {}
        self._lock = threading.RLock()
        # Logs whose files a thread is making (without holding the lock), by partition: their dirs.
        self._being_created: dict[TopicPartition, str] = {}
        self._created = threading.Condition(self._lock)
        self._checkpoint_lock = threading.Lock()
        self.had_clean_shutdown: dict[str, bool] = {}
        # Set once startup() loaded every dir: only then may shutdown() write the checkpoints
        # and clean-shutdown markers (a start that failed before must not vouch for logs it
        # never recovered).
        self._started = False
        # Dirs loaded read-only because their disk was full at start-up, with why.
        self.read_only_dirs: dict[str, str] = {}
        # Dirs that take no new partitions while another online one can (cordoned.log.dirs).
        self.cordoned: frozenset[str] = frozenset()
        self.failure_channel = LogDirFailureChannel()
        # Partitions found on a dir that went offline while loading: never re-created elsewhere.
        self._offline_partitions: dict[TopicPartition, str] = {}
        self.failure_channel.add_listener(self._on_log_dir_failure)
        # Taken before anything is read or written: a second broker on these dirs stops here.
        self._dir_locks: list[DirLock] = []
        try:
            for d in self.log_dirs:
                os.makedirs(d, exist_ok=True)
                lock = DirLock(d)
                lock.acquire()
                self._dir_locks.append(lock)
        except OSError:
            self.release_locks()
            raise

    # -- start-up -------------------------------------------------------------------------

    def startup(self, topic_config: Callable[[str], LogConfig] | None = None,
                wanted: Callable[[TopicPartition], bool] | None = None) -> None:
        """Load every ``<topic>-<partition>`` dir, recovering logs after an unclean stop.

        ``topic_config`` maps a topic name to its LogConfig (defaults otherwise). A partition
        ``wanted`` refuses (left by a create or delete that a crash interrupted) is deleted
        unread. A dir whose disk is full is loaded again read-only (``read_only_dirs``).
        """
        futures: list[tuple[TopicPartition, str]] = []
        for d in self.log_dirs:
            os.makedirs(d, exist_ok=True)
            marker = os.path.join(d, CLEAN_SHUTDOWN)
            clean = os.path.exists(marker)
            self.had_clean_shutdown[d] = clean
            found: list[tuple[TopicPartition, str]] = []
            for name in sorted(os.listdir(d)):
                path = os.path.join(d, name)
                if not os.path.isdir(path):
                    continue
                if name.endswith(_DELETE_SUFFIX):
                    # A deletion that did not finish before the last stop.
                    shutil.rmtree(path, ignore_errors=True)
                    continue
                if name.endswith(_IGNORED_SUFFIXES):
                    log.warning("ignoring %s (future/stray replicas are not supported)", path)
                    continue
                parsed = parse_topic_partition(name)
                if parsed is None:
                    continue
                tp = TopicPartition(*parsed)
                if name.endswith(FUTURE_SUFFIX):
                    futures.append((tp, path))
                    continue
                if wanted is not None and not wanted(tp):
                    log.info("deleting %s: no such partition in the metadata (a topic creation or deletion "
                             "was interrupted)", path)
                    self._discard_dir(path)
                    continue
                if tp in self._logs or tp in self._offline_partitions:
                    other = self._logs[tp].dir if tp in self._logs else self._offline_partitions[tp]
                    raise RuntimeError(f"duplicate log directories for {tp[0]}-{tp[1]}: {other}, {path}")
                found.append((tp, path))
            try:
                if _no_free_block(d):
                    raise _NoSpace(d, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
                self._load_dir(d, found, clean, topic_config)
            except _NoSpace as full:
                # Kafka would take the dir offline. What is on it can still be read, so it is
                # loaded (again) by a recovery that writes nothing (torn tails and rebuilt
                # indexes kept in memory): reads are served, changes answer KAFKA_STORAGE_ERROR.
                self._unload_dir(d)
                self.read_only_dirs[d] = f"the disk is full ({full.error.strerror} at {full.path})"
                log.error("log directory %s: the disk is full (%s at %s). Its logs were recovered read-only: "
                          "reads are served, writes answer KAFKA_STORAGE_ERROR. Free space and restart the "
                          "broker to recover it fully", d, full.error.strerror, full.path)
                with writes_discarded():
                    self._load_dir(d, found, clean, topic_config)
                for lg in self.all_logs():
                    if os.path.dirname(lg.dir) == d:
                        lg.set_read_only(self.read_only_dirs[d])
            if self.failure_channel.is_offline(d):
                for tp, lg in self._unload_dir(d):
                    self._offline_partitions[tp] = lg.dir
                continue
            if clean:
                # From now on a crash must trigger recovery again.
                try:
                    os.unlink(marker)
                    fsync_dir(d)
                except OSError as e:
                    self.failure_channel.maybe_add_offline_log_dir(d, "removing the clean-shutdown marker failed", e)
        for tp, path in futures:
            self._resolve_future(tp, path, topic_config, wanted)
        self._started = True

    def _resolve_future(self, tp: TopicPartition, path: str, topic_config: Callable[[str], LogConfig] | None,
                        wanted: Callable[[TopicPartition], bool] | None) -> None:
        """A future replica left by a stop during a move between log dirs. With the current
        log still there the move had not finished: it is dropped (the request can be sent
        again). Without it the stop came during the swap, after the caught-up future log was
        flushed and the old one renamed for deletion: the future log is the partition's."""
        if tp in self._logs or tp in self._offline_partitions or (wanted is not None and not wanted(tp)) \
                or self.failure_channel.is_offline(os.path.dirname(path)):
            log.info("deleting %s: a move between log dirs that did not finish", path)
            self._discard_dir(path)
            return
        final = os.path.join(os.path.dirname(path), f"{tp.topic}-{tp.partition}")
        log.info("completing the move of %s-%d to %s", tp.topic, tp.partition, os.path.dirname(path))
        try:
            os.rename(path, final)
            fsync_dir(os.path.dirname(final))
            self._logs[tp] = Log(final, topic_config(tp.topic) if topic_config is not None else self.defaults,
                                 producer_id_expiration_ms=self.producer_id_expiration_ms, time_ms=self.time_ms,
                                 failure_channel=self.failure_channel)
        except OSError as e:
            self.failure_channel.maybe_add_offline_log_dir(os.path.dirname(path), f"loading {path} failed", e)
            self._offline_partitions[tp] = final

    def _load_dir(self, d: str, found: list[tuple[TopicPartition, str]], clean: bool,
                  topic_config: Callable[[str], LogConfig] | None) -> None:
        """Load the logs ``found`` in ``d``; raises _NoSpace on a full disk (unless writes are
        discarded), any other I/O error takes the dir offline."""
        recovery = read_offset_checkpoint(os.path.join(d, RECOVERY_POINT_CHECKPOINT))
        starts = read_offset_checkpoint(os.path.join(d, LOG_START_OFFSET_CHECKPOINT))
        hws = read_offset_checkpoint(os.path.join(d, REPLICATION_OFFSET_CHECKPOINT))
        for tp, path in found:
            if self.failure_channel.is_offline(d):
                self._offline_partitions[tp] = path
                continue
            config = topic_config(tp[0]) if topic_config is not None else self.defaults
            if not clean:
                log.info("recovering %s from offset %d", path, recovery.get(tp, 0))
            try:
                self._logs[tp] = Log(
                    path,
                    config,
                    recovery_point=recovery.get(tp, 0),
                    log_start_offset=starts.get(tp, 0),
                    high_watermark=hws.get(tp),
                    had_clean_shutdown=clean,
                    producer_id_expiration_ms=self.producer_id_expiration_ms,
                    time_ms=self.time_ms,
                    failure_channel=self.failure_channel,
                )
            except OSError as e:
                if e.errno in _RESOURCE_ERRNOS:
                    loaded = len(self._logs)
                    for other in self.log_dirs:
                        self._unload_dir(other)
                    raise TooManyOpenFilesError(path, loaded, e) from e
                if e.errno in NO_SPACE_ERRNOS and not discarding():
                    raise _NoSpace(path, e) from e
                # Kafka's rule: a dir that cannot be loaded goes offline as a whole; the
                # others are served. Nothing more is written to it, so it can be recovered
                # once the fault is fixed.
                self.failure_channel.maybe_add_offline_log_dir(d, f"loading {path} failed", e)
                self._offline_partitions[tp] = path

    def _unload_dir(self, d: str) -> list[tuple[TopicPartition, Log]]:
        """Close (writing nothing) and forget the logs loaded from ``d``."""
        with self._lock:
            gone = [(tp, lg) for tp, lg in self._logs.items() if os.path.dirname(lg.dir) == d]
            for tp, _lg in gone:
                del self._logs[tp]
        for _tp, lg in gone:
            lg.close(final=False)
        return gone

    # -- lookup, create, delete ---------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def all_logs(self) -> list[Log]:
        with self._lock:
            return list(self._logs.values())

    def _on_log_dir_failure(self, log_dir: str) -> None:
        # Kafka's handleLogDirFailure: every partition on the dir goes offline at once.
        for lg in self.all_logs():
            if os.path.dirname(lg.dir) == log_dir:
                lg.mark_offline()

    def is_offline_partition(self, tp: TopicPartition) -> bool:
        """On an offline dir since start-up (logs that fail later report ``Log.offline``)."""
        return tp in self._offline_partitions

    @property
    def clean_start(self) -> bool:
        """Every log dir had a clean-shutdown marker at ``startup`` and loaded: no record this
        broker acknowledged can be missing (KIP-966's clean shutdown, the registration's
        ``clean_start``)."""
        return all(self.had_clean_shutdown.get(d, False) for d in self.log_dirs) \
            and not self.failure_channel.offline_dirs()

    def online_dirs(self) -> list[str]:
        return [d for d in self.log_dirs if not self.failure_channel.is_offline(d)]

    def cordon(self, dirs: Collection[str]) -> None:
        """Take no new partitions on ``dirs`` (paths as configured; those of no log dir are
        ignored); the partitions already there stay."""
        self.cordoned = frozenset(os.path.abspath(d) for d in dirs) & frozenset(self.log_dirs)

    def all_cordoned(self) -> bool:
        """Whether no online dir may take a new partition (Kafka's broker then gets none)."""
        return all(d in self.cordoned for d in self.online_dirs())

    def describe_dirs(self) -> list[LogDirDescription]:
        """Each log dir: why it is offline (None if online), its partitions' sizes, its disk's
        total and usable bytes (-1 when unknown or offline), as DescribeLogDirs reports them."""
        offline = self.failure_channel.offline_dirs()
        out = []
        for d in self.log_dirs:
            if d in offline:
                out.append(LogDirDescription(d, offline[d], {}, -1, -1))
                continue
            sizes = {tp: lg.size_in_bytes for tp, lg in list(self._logs.items()) if os.path.dirname(lg.dir) == d}
            futures = {tp: (f.size_in_bytes, max(0, self._logs[tp].log_end_offset - f.log_end_offset))
                       for tp, f in list(self._futures.items()) if os.path.dirname(f.dir) == d and tp in self._logs}
            try:
                st = os.statvfs(d)
                total, usable = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
            except OSError:
                total = usable = -1
            out.append(LogDirDescription(d, None, sizes, total, usable, futures, d in self.cordoned))
        return out

    def _dir_counts(self) -> dict[str, int]:
        """Partitions per log dir (those being created included), for ``_choose_dir``."""
        counts: dict[str, int] = dict.fromkeys(self.log_dirs, 0)
        for path in [lg.dir for lg in self._logs.values()] + list(self._being_created.values()):
            parent = os.path.dirname(path)
            if parent in counts:
                counts[parent] += 1
        return counts

    def _choose_dir(self, tp: TopicPartition | None = None, counts: dict[str, int] | None = None) -> str:
        # Like Kafka: the dir AlterReplicaLogDirs asked for, else the online dir holding the
        # fewest partitions (a read-only dir takes none). ``counts`` (from _dir_counts, kept
        # up to date here) spares a batch of creations a walk over every log each.
        online = [d for d in self.online_dirs() if d not in self.read_only_dirs]
        if not online:
            raise KafkaStorageError("every log directory is offline or read-only (a full disk)")
        # A cordoned dir takes a new partition only when no other can (a cluster's controller,
        # which does not know of them, assigned it here; a single node refuses before).
        online = [d for d in online if d not in self.cordoned] or online
        preferred = self._preferred_dirs.pop(tp, None) if tp is not None else None
        if preferred in online:
            chosen = preferred
        elif len(online) == 1:
            chosen = online[0]
        else:
            if counts is None:
                counts = self._dir_counts()
            chosen = min(online, key=lambda d: counts.get(d, 0))
        if counts is not None:
            counts[chosen] = counts.get(chosen, 0) + 1
        return chosen

    def create_log(
        self, topic: str, partition: int, config: LogConfig | None = None, topic_id: uuid.UUID | None = None
    ) -> Log:
        """Return the partition's log, creating an empty one if needed.

        An existing log with another topic id raises INCONSISTENT_TOPIC_ID.
        """
        return self._create_log(topic, partition, config, topic_id, None, None)

    def _create_log(self, topic: str, partition: int, config: LogConfig | None, topic_id: uuid.UUID | None,
                    counts: dict[str, int] | None, new_dirs: set[str] | None) -> Log:
        """``create_log``; with ``new_dirs`` a new log's parent dir is added to it for the caller
        to fsync once for all (else it is fsynced here)."""
        if not topic or "/" in topic or "\x00" in topic or topic in (".", "..") or partition < 0:
            raise ApiError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"invalid topic partition {topic!r}-{partition}")
        tp = TopicPartition(topic, partition)
        with self._lock:
            while tp in self._being_created:  # by another thread
                self._created.wait()
            if tp in self._offline_partitions:
                raise KafkaStorageError(f"{topic}-{partition} is on an offline log directory")
            existing = self._logs.get(tp)
            if existing is not None:
                if topic_id is not None and existing.topic_id is not None and existing.topic_id != topic_id:
                    raise ApiError(
                        ErrorCode.INCONSISTENT_TOPIC_ID,
                        f"{topic}-{partition} exists with topic id {existing.topic_id}, not {topic_id}",
                    )
                if config is not None:
                    existing.update_config(config)
                return existing
            path = os.path.join(self._choose_dir(tp, counts), f"{topic}-{partition}")
            self._being_created[tp] = path
        # The files are made without the lock: the loop's own calls (all_logs) must not wait
        # for a worker thread's fsyncs.
        try:
            existed = os.path.exists(path)
            try:
                lg = Log(path, config or self.defaults, topic_id=topic_id,
                         producer_id_expiration_ms=self.producer_id_expiration_ms, time_ms=self.time_ms,
                         failure_channel=self.failure_channel, sync_parent=new_dirs is None)
            except OSError as e:
                if not existed:
                    self._discard_dir(path)
                if e.errno in _RESOURCE_ERRNOS:
                    # The process's limits, not the disk: the dir stays online, the caller rolls back.
                    raise KafkaStorageError(
                        f"creating the log of {topic}-{partition} failed: {e.strerror}; raise the broker's "
                        "open-file limit (ulimit -n) or hold fewer partitions") from e
                self.failure_channel.maybe_add_offline_log_dir(
                    os.path.dirname(path), f"creating the log of {topic}-{partition} failed", e)
                raise KafkaStorageError(f"creating the log of {topic}-{partition} failed: {e}") from e
            with self._lock:
                self._logs[tp] = lg
                if new_dirs is not None and not existed:
                    new_dirs.add(os.path.dirname(path))
            return lg
        finally:
            with self._lock:
                del self._being_created[tp]
                self._created.notify_all()

    def create_logs(self, topic: str, partitions: Iterable[int], config: LogConfig | None = None,
                    topic_id: uuid.UUID | None = None) -> list[Log]:
        """Create the logs of ``partitions``, all or none: on a failure those created here are
        removed again before the error is raised. Safe in a worker thread."""
        created: list[Log] = []
        new_dirs: set[str] = set()
        try:
            with self._lock:
                counts = self._dir_counts()
            for i in partitions:
                created.append(self._create_log(topic, i, config, topic_id, counts, new_dirs))
            for d in new_dirs:  # the new logs' dir entries, durable before any is used
                try:
                    fsync_dir(d)
                except OSError as e:
                    self.failure_channel.maybe_add_offline_log_dir(d, f"creating the logs of {topic} failed", e)
                    raise KafkaStorageError(f"creating the logs of {topic} failed: {e}") from e
        except BaseException:
            self.remove_deleted(self.delete_logs([(lg.topic, lg.partition) for lg in created]))
            # With descriptors free again, what a failed creation could not remove goes too.
            self.remove_deleted(self._renamed_for_deletion())
            raise
        return created

    def _discard_dir(self, path: str) -> None:
        """Renamed away at once (a rename needs no descriptor, which may be what ran out), then
        removed if possible; start-up removes what remains."""
        doomed = f"{path}.{uuid.uuid4().hex}{_DELETE_SUFFIX}"
        try:
            os.rename(path, doomed)
        except OSError:
            return
        shutil.rmtree(doomed, ignore_errors=True)

    def _renamed_for_deletion(self) -> list[str]:
        out = []
        for d in self.online_dirs():
            try:
                out += [os.path.join(d, n) for n in os.listdir(d) if n.endswith(_DELETE_SUFFIX)]
            except OSError:
                pass
        return out

    def delete_log(self, topic: str, partition: int) -> bool:
        """Remove a partition's log and its data; False if there is none."""
        doomed = self.delete_logs([(topic, partition)])
        self.remove_deleted(doomed)
        return bool(doomed)

    def delete_logs(self, partitions: Iterable[tuple[str, int]]) -> list[str]:
        """Close the logs and rename each dir to ``<topic>-<partition>.<uuid>-delete`` (one fsync
        per log dir makes the renames durable); returns the renamed dirs for ``remove_deleted``.
        After a crash start-up finishes the job. Safe in a worker thread."""
        partitions = [TopicPartition(*tp) for tp in partitions]
        with self._lock:
            logs = [lg for lg in (self._logs.pop(tp, None) for tp in partitions) if lg is not None]
            # A move under way of a deleted partition goes with it.
            logs += [f for f in (self._futures.pop(tp, None) for tp in partitions) if f is not None]
        doomed: list[str] = []
        parents: set[str] = set()
        for lg in logs:
            lg.close(final=False)
            parent = os.path.dirname(lg.dir)
            target = os.path.join(parent, f"{os.path.basename(lg.dir)}.{uuid.uuid4().hex}{_DELETE_SUFFIX}")
            try:
                os.rename(lg.dir, target)
            except FileNotFoundError:
                continue
            except OSError as e:
                log.warning("renaming %s for deletion failed (%s): its data goes at the next start", lg.dir, e)
                continue
            doomed.append(target)
            parents.add(parent)
        for parent in parents:
            try:
                fsync_dir(parent)  # the renames are what make the deletion survive a crash
            except OSError as e:
                log.warning("syncing %s after deleting logs failed: %s", parent, e)
        return doomed

    @staticmethod
    def remove_deleted(doomed: Iterable[str]) -> None:
        """Remove the data of dirs renamed by ``delete_logs``."""
        for path in doomed:
            shutil.rmtree(path, ignore_errors=True)

    # -- moving a replica between log dirs (AlterReplicaLogDirs) ----------------------------------

    def check_log_dir(self, path: str) -> str:
        """The configured log dir ``path`` names: LOG_DIR_NOT_FOUND if it is none of them,
        KAFKA_STORAGE_ERROR if it is offline."""
        d = os.path.abspath(path)
        if d not in self.log_dirs:
            raise ApiError(ErrorCode.LOG_DIR_NOT_FOUND, f"{path} is not one of this broker's log dirs")
        if self.failure_channel.is_offline(d):
            raise KafkaStorageError(f"log directory {path} is offline")
        return d

    def prefer_dir(self, tp: TopicPartition, log_dir: str) -> None:
        """Create ``tp``'s log in ``log_dir`` when this broker comes to host it."""
        if tp not in self._logs:
            self._preferred_dirs[tp] = log_dir

    def future_log(self, tp: TopicPartition) -> Log | None:
        return self._futures.get(tp)

    def create_future_log(self, tp: TopicPartition, log_dir: str) -> Log | None:
        """An empty replica of ``tp`` in ``log_dir`` that a mover fills from the current log;
        None when the current log is already there. A move to another dir replaces one under way."""
        with self._lock:
            current = self._logs.get(tp)
            if current is None:
                raise KafkaStorageError(f"{tp.topic}-{tp.partition} has no log on this broker")
            existing = self._futures.get(tp)
            if existing is not None:
                if os.path.dirname(existing.dir) == log_dir:
                    return existing
                self.abort_future_log(tp)
            if os.path.dirname(current.dir) == log_dir:
                return None
            path = os.path.join(log_dir, f"{tp.topic}-{tp.partition}.{uuid.uuid4().hex}{FUTURE_SUFFIX}")
            try:
                future = Log(path, current.config, topic_id=current.topic_id,
                             producer_id_expiration_ms=self.producer_id_expiration_ms, time_ms=self.time_ms,
                             failure_channel=self.failure_channel)
                future.truncate_fully_and_start_at(current.log_start_offset)
            except OSError as e:
                shutil.rmtree(path, ignore_errors=True)
                raise KafkaStorageError(f"creating a replica of {tp.topic}-{tp.partition} in {log_dir} failed: "
                                        f"{e.strerror or e}") from e
            self._futures[tp] = future
            return future

    def abort_future_log(self, tp: TopicPartition) -> None:
        """Stop a move: the future replica and its data go."""
        with self._lock:
            future = self._futures.pop(tp, None)
        if future is not None:
            future.delete()

    def replace_current_with_future(self, tp: TopicPartition) -> Log:
        """Make the caught-up future replica the partition's log, on the thread that appends
        (nothing may be written between the caller's check and this swap).

        The order survives a crash at any point: the future log is flushed and closed, the old
        dir is renamed for deletion, then the future dir takes the partition's name (start-up
        finishes a swap that stopped between the two renames; see ``_resolve_future``)."""
        with self._lock:
            future = self._futures.pop(tp)
            current = self._logs[tp]
            future.high_watermark = current.high_watermark
            future.flush()
            future.close()
            current.close(final=False)
            parent = os.path.dirname(current.dir)
            doomed = os.path.join(parent, f"{os.path.basename(current.dir)}.{uuid.uuid4().hex}{_DELETE_SUFFIX}")
            os.rename(current.dir, doomed)
            fsync_dir(parent)
            final = os.path.join(os.path.dirname(future.dir), f"{tp.topic}-{tp.partition}")
            os.rename(future.dir, final)
            fsync_dir(os.path.dirname(final))
            moved = Log(final, current.config, recovery_point=future.log_end_offset,
                        log_start_offset=future.log_start_offset, high_watermark=current.high_watermark,
                        had_clean_shutdown=True, producer_id_expiration_ms=self.producer_id_expiration_ms,
                        time_ms=self.time_ms, failure_channel=self.failure_channel)
            self._logs[tp] = moved
        self.remove_deleted([doomed])
        return moved

    # -- periodic work ----------------------------------------------------------------------------

    def checkpoint(self) -> None:
        """Atomically rewrite recovery-point, log-start and high-watermark checkpoints per dir."""
        with self._checkpoint_lock:
            by_dir: dict[str, list[tuple[TopicPartition, Log]]] = {d: [] for d in self.log_dirs}
            with self._lock:
                items = list(self._logs.items())
            for tp, lg in items:
                by_dir.setdefault(os.path.dirname(lg.dir), []).append((tp, lg))
            for d, logs in by_dir.items():
                if not os.path.isdir(d) or self.failure_channel.is_offline(d) or d in self.read_only_dirs:
                    continue
                try:
                    write_offset_checkpoint(
                        os.path.join(d, RECOVERY_POINT_CHECKPOINT), {tp: lg.recovery_point for tp, lg in logs}
                    )
                    # Like Kafka, only starts that differ from the first segment need recording.
                    write_offset_checkpoint(
                        os.path.join(d, LOG_START_OFFSET_CHECKPOINT),
                        {
                            tp: lg.log_start_offset
                            for tp, lg in logs
                            if lg.log_start_offset > lg.segment_base_offsets()[0]
                        },
                    )
                    write_offset_checkpoint(
                        os.path.join(d, REPLICATION_OFFSET_CHECKPOINT), {tp: lg.high_watermark for tp, lg in logs}
                    )
                except OSError as e:
                    self.failure_channel.maybe_add_offline_log_dir(d, "writing checkpoints failed", e)
            # With the recovery points durable, older producer snapshots are no longer needed.
            for _tp, lg in items:
                try:
                    lg.delete_snapshots_after_recovery_point_checkpoint()
                except OSError:
                    log.exception("deleting old producer snapshots of %s failed", lg.dir)

    def cleanup(self, now_ms: int) -> int:
        """Apply retention to every log; returns the number of segments deleted."""
        return sum(self.cleanup_steps(now_ms))

    def cleanup_steps(self, now_ms: int) -> Iterator[int]:
        """Retention one log at a time (segments deleted in each), so that the loop can serve
        requests between logs when thousands of partitions expire segments at once."""
        for lg in self.all_logs():
            try:
                yield lg.delete_retention_segments(now_ms)
            except Exception:
                log.exception("retention failed for %s", lg.dir)

    def take_due_deletions(self, now_ms: int) -> list[str]:
        """Files of deleted segments due for unlinking (``remove_files``, on a worker thread)."""
        return [p for lg in self.all_logs() for p in lg.take_due_deletions(now_ms)]

    @staticmethod
    def remove_files(paths: list[str]) -> None:
        for p in paths:
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
            except OSError as e:
                log.warning("deleting %s failed (%s): start-up removes it", p, e)

    def remove_expired_producers(self, now_ms: int) -> int:
        """producer.id.expiration.ms across every log; returns producers removed."""
        return sum(lg.remove_expired_producers(now_ms) for lg in self.all_logs())

    def flush_dirty(self, now_ms: int) -> int:
        """flush.ms: fsync logs whose last flush is at least flush.ms old. Returns logs flushed."""
        flushed = 0
        for lg in self.all_logs():
            if lg.closed or lg.offline or lg.unflushed_messages <= 0:
                continue
            if now_ms - lg.last_flush_ms >= lg.config.flush_ms:
                try:
                    if lg.flush(now_ms=now_ms):
                        flushed += 1
                except Exception:
                    log.exception("flush failed for %s", lg.dir)
        return flushed

    def shutdown(self) -> dict[str, str]:
        """Flush and close every log, write checkpoints and the clean-shutdown marker.

        A dir that fails (or had failed) gets no marker, so the next start recovers it, and a
        read-only dir is left as it was; returns those dirs with why. Before startup() has
        loaded every dir, it only closes what is open: the next start recovers."""
        if not self._started:
            for lg in self.all_logs():
                lg.close()
            with self._lock:
                self._logs.clear()
            self.release_locks()
            return {**self.read_only_dirs, **self.failure_channel.offline_dirs()}
        with self._lock:
            futures = list(self._futures.values())
            self._futures.clear()
        for f in futures:
            f.close(final=False)  # a move is not resumed: start-up drops what it copied
        logs = self.all_logs()
        for lg in logs:
            if lg.offline:
                continue
            try:
                lg.flush()
            except KafkaStorageError:
                pass  # the dir is offline now; recovery at the next start covers it
        self.checkpoint()
        for lg in logs:
            lg.close()
        for d in self.online_dirs():
            if os.path.isdir(d) and d not in self.read_only_dirs:
                try:
                    write_atomic(os.path.join(d, CLEAN_SHUTDOWN), json.dumps({"version": 0, "brokerEpoch": -1}))
                except OSError as e:
                    self.failure_channel.maybe_add_offline_log_dir(d, "writing the clean-shutdown marker failed", e)
        with self._lock:
            self._logs.clear()
        self.release_locks()
        return {**self.read_only_dirs, **self.failure_channel.offline_dirs()}

    def release_locks(self) -> None:
        for lock in self._dir_locks:
            lock.release()
        self._dir_locks.clear()
