"""DescribeLogDirs (API 35): each log dir with its partitions (and replicas being moved into
it), or KAFKA_STORAGE_ERROR when an I/O error took it offline; AlterReplicaLogDirs (API 34):
move replicas between this broker's log dirs."""

from __future__ import annotations

from rivulet.common.types import TopicPartition
from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.framing import RequestHeader
from rivulet.protocol.messages import alter_replica_log_dirs_response as arlr
from rivulet.protocol.messages import describe_log_dirs_response as dlr
from rivulet.protocol.messages.alter_replica_log_dirs_request import AlterReplicaLogDirsRequest
from rivulet.protocol.messages.describe_log_dirs_request import DescribeLogDirsRequest
from rivulet.replication.log_dir_mover import ReplicaAlterLogDirsManager
from rivulet.security.acls import AclOperation
from rivulet.server.acls import Authz
from rivulet.server.answer import Answer
from rivulet.server.handlers import Handler
from rivulet.server.network import KafkaConnection
from rivulet.storage.manager import LogManager


class LogDirHandlers:
    def __init__(self, log_manager: LogManager, mover: ReplicaAlterLogDirsManager | None = None,
                 authz: Authz | None = None) -> None:
        """``mover`` serves AlterReplicaLogDirs; without it only DescribeLogDirs is served.
        Without ``authz`` nothing is checked (no authorizer)."""
        self.log_manager = log_manager
        self.mover = mover
        self.authz = authz or Authz(None)

    def handlers(self) -> dict[int, Handler]:
        out: dict[int, Handler] = {35: self.handle_describe_log_dirs}
        if self.mover is not None:
            out[34] = self.handle_alter_replica_log_dirs
        return out

    def handle_describe_log_dirs(self, header: RequestHeader, req: DescribeLogDirsRequest,
                                 conn: KafkaConnection) -> Answer:
        # Null topics ask for every partition; otherwise only the ones named.
        wanted = None if req.topics is None else {(t.topic, p) for t in req.topics for p in t.partitions}
        if not self.authz.cluster(conn, AclOperation.DESCRIBE):
            return dlr.DescribeLogDirsResponse(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                               results=[])
        results = []
        for d in self.log_manager.describe_dirs():
            if d.offline_reason is not None:
                results.append(dlr.DescribeLogDirsResult(error_code=ErrorCode.KAFKA_STORAGE_ERROR, log_dir=d.path,
                                                         topics=[], total_bytes=-1, usable_bytes=-1))
                continue
            by_topic: dict[str, list[dlr.DescribeLogDirsPartition]] = {}
            entries = [(tp, size, 0, False) for tp, size in d.partition_sizes.items()]
            entries += [(tp, size, lag, True) for tp, (size, lag) in d.future_sizes.items()]
            for tp, size, lag, future in sorted(entries):
                if wanted is not None and (tp.topic, tp.partition) not in wanted:
                    continue
                by_topic.setdefault(tp.topic, []).append(dlr.DescribeLogDirsPartition(
                    partition_index=tp.partition, partition_size=size, offset_lag=lag, is_future_key=future))
            results.append(dlr.DescribeLogDirsResult(
                error_code=ErrorCode.NONE, log_dir=d.path,
                topics=[dlr.DescribeLogDirsTopic(name=n, partitions=ps) for n, ps in by_topic.items()],
                total_bytes=d.total_bytes, usable_bytes=d.usable_bytes, is_cordoned=d.cordoned))
        return dlr.DescribeLogDirsResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, results=results)

    def handle_alter_replica_log_dirs(self, header: RequestHeader, req: AlterReplicaLogDirsRequest,
                                      conn: KafkaConnection) -> Answer:
        assert self.mover is not None
        dirs: dict[TopicPartition, str] = {}
        for d in req.dirs:
            for t in d.topics:
                for p in t.partitions:
                    dirs[TopicPartition(t.name, p)] = d.path
        if self.authz.cluster(conn, AclOperation.ALTER):
            errors = self.mover.alter_replica_log_dirs(dirs)
        else:
            errors = {tp: ErrorCode.CLUSTER_AUTHORIZATION_FAILED for tp in dirs}
        by_topic: dict[str, list[arlr.AlterReplicaLogDirPartitionResult]] = {}
        for tp, code in errors.items():
            by_topic.setdefault(tp.topic, []).append(
                arlr.AlterReplicaLogDirPartitionResult(partition_index=tp.partition, error_code=code))
        return arlr.AlterReplicaLogDirsResponse(throttle_time_ms=0, results=[
            arlr.AlterReplicaLogDirTopicResult(topic_name=t, partitions=ps) for t, ps in by_topic.items()])
