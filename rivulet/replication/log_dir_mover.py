"""Moving a replica between this broker's log dirs: AlterReplicaLogDirs (Kafka's
ReplicaManager.alterReplicaLogDirs and its ReplicaAlterLogDirsManager).

The partition keeps being served from its current log while a future log in the other dir is
filled from it, batch by batch, as a follower fills its log from the leader: offsets, epochs
and producer state are kept. When the future log has caught up, it replaces the current one in
one step on the event loop, between two appends (``LogManager.replace_current_with_future``).
"""

from __future__ import annotations

import asyncio
import logging
import os

from rivulet.common.types import TopicPartition
from rivulet.protocol import records as rec
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.replication.replica_manager import ReplicaManager
from rivulet.storage.log import Log
from rivulet.storage.log_dir_failure import KafkaStorageError
from rivulet.storage.manager import LogManager

log = logging.getLogger(__name__)

# Bytes copied per step; the loop serves other requests between steps.
COPY_CHUNK_BYTES = 1 << 20


class ReplicaAlterLogDirsManager:
    def __init__(self, replica_manager: ReplicaManager, log_manager: LogManager,
                 chunk_bytes: int = COPY_CHUNK_BYTES) -> None:
        self.replica_manager = replica_manager
        self.log_manager = log_manager
        self.chunk_bytes = chunk_bytes
        self._tasks: dict[TopicPartition, asyncio.Task] = {}

    def alter_replica_log_dirs(self, dirs: dict[TopicPartition, str]) -> dict[TopicPartition, ErrorCode]:
        """Start moving each partition's replica to its dir; the error per partition as Kafka
        answers it. A partition this broker does not host yet gets REPLICA_NOT_AVAILABLE, and its
        log is created in that dir when it comes."""
        out: dict[TopicPartition, ErrorCode] = {}
        for tp, path in dirs.items():
            try:
                self._alter(tp, path)
                out[tp] = ErrorCode.NONE
            except ApiError as e:
                if e.code != ErrorCode.LOG_DIR_NOT_FOUND:
                    log.warning("cannot move %s-%d to %s: %s", tp.topic, tp.partition, path, e)
                out[tp] = ErrorCode(e.code)
        return out

    def _alter(self, tp: TopicPartition, path: str) -> None:
        if len(f"{tp.topic}-{tp.partition}.{'0' * 32}-future") > 255:
            raise ApiError(ErrorCode.INVALID_TOPIC_EXCEPTION, "the topic name is too long to move its replica")
        lm = self.log_manager
        target = lm.check_log_dir(path)
        if tp in self.replica_manager.offline_partitions:
            raise KafkaStorageError(f"{tp.topic}-{tp.partition} is offline")
        lm.prefer_dir(tp, target)
        p = self.replica_manager.partitions.get(tp)
        if p is None or p.deleted:
            raise ApiError(ErrorCode.REPLICA_NOT_AVAILABLE, f"{tp.topic}-{tp.partition} is not on this broker")
        if p.log.offline:
            raise KafkaStorageError(f"{tp.topic}-{tp.partition} is offline")
        if lm.future_log(tp) is not None and os.path.dirname(lm.future_log(tp).dir) != target:
            self._stop(tp)
        if lm.create_future_log(tp, target) is not None and tp not in self._tasks:
            log.info("moving %s-%d to %s", tp.topic, tp.partition, target)
            task = asyncio.get_running_loop().create_task(self._copy(tp))
            self._tasks[tp] = task
            task.add_done_callback(lambda _t, tp=tp: self._tasks.pop(tp, None))

    def _stop(self, tp: TopicPartition) -> None:
        task = self._tasks.pop(tp, None)
        if task is not None:
            task.cancel()
        self.log_manager.abort_future_log(tp)

    async def _copy(self, tp: TopicPartition) -> None:
        lm = self.log_manager
        try:
            while True:
                p = self.replica_manager.partitions.get(tp)
                future = lm.future_log(tp)
                if future is None:
                    return  # aborted, or the partition was deleted
                if p is None or p.deleted or p.log.offline or future.offline:
                    lm.abort_future_log(tp)
                    return
                if copy_step(p.log, future, self.chunk_bytes):
                    p.replace_log(lm.replace_current_with_future(tp))
                    log.info("moved %s-%d to %s", tp.topic, tp.partition, os.path.dirname(p.log.dir))
                    return
                await asyncio.sleep(0)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            if isinstance(e, OSError):
                log.error("moving %s-%d failed: %s", tp.topic, tp.partition, e)
            else:
                log.exception("moving %s-%d failed", tp.topic, tp.partition)
            lm.abort_future_log(tp)

    def shutdown(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()
        self._tasks.clear()


def copy_step(current: Log, future: Log, chunk_bytes: int = COPY_CHUNK_BYTES) -> bool:
    """Copy one chunk; True once the future log holds all of the current one."""
    # The current log may have been truncated (a new leader) or had its start raised
    # (retention, DeleteRecords) since the last step: the future log follows it.
    if current.log_start_offset > future.log_end_offset:
        future.truncate_fully_and_start_at(current.log_start_offset)
    epoch = future.latest_epoch
    if epoch is not None:
        same_epoch, end = current.end_offset_for_epoch(epoch)
        if same_epoch != epoch or end < future.log_end_offset:
            future.truncate_to(max(min(end, current.log_end_offset), future.log_start_offset))
    if future.log_end_offset > current.log_end_offset:
        future.truncate_to(current.log_end_offset)
    if current.log_start_offset > future.log_start_offset:
        future.maybe_increment_log_start_offset(current.log_start_offset)
    if future.log_end_offset >= current.log_end_offset:
        return True
    data = current.read(future.log_end_offset, chunk_bytes).records
    batches = list(rec.iter_batches(data)) if data else []
    if not batches:
        return False
    headers = [h for _, h in batches]
    end = batches[-1][0] + headers[-1].size
    future.append_as_follower(memoryview(data)[:end], headers)
    return future.log_end_offset >= current.log_end_offset
