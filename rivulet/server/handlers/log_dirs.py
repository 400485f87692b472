"""DescribeLogDirs (API 35): each log dir with its partitions, or KAFKA_STORAGE_ERROR when
an I/O error took it offline."""

from __future__ import annotations

from rivulet.protocol.errors import ErrorCode
from rivulet.protocol.framing import RequestHeader
from rivulet.protocol.messages import describe_log_dirs_response as dlr
from rivulet.protocol.messages.describe_log_dirs_request import DescribeLogDirsRequest
from rivulet.server.answer import Answer
from rivulet.server.handlers import Handler
from rivulet.server.network import KafkaConnection
from rivulet.storage.manager import LogManager


class LogDirHandlers:
    def __init__(self, log_manager: LogManager) -> None:
        self.log_manager = log_manager

    def handlers(self) -> dict[int, Handler]:
        return {35: self.handle_describe_log_dirs}

    def handle_describe_log_dirs(self, header: RequestHeader, req: DescribeLogDirsRequest,
                                 conn: KafkaConnection) -> Answer:
        # Null topics ask for every partition; otherwise only the ones named.
        wanted = None if req.topics is None else {(t.topic, p) for t in req.topics for p in t.partitions}
        results = []
        for d in self.log_manager.describe_dirs():
            if d.offline_reason is not None:
                results.append(dlr.DescribeLogDirsResult(error_code=ErrorCode.KAFKA_STORAGE_ERROR, log_dir=d.path,
                                                         topics=[], total_bytes=-1, usable_bytes=-1))
                continue
            by_topic: dict[str, list[dlr.DescribeLogDirsPartition]] = {}
            for tp, size in sorted(d.partition_sizes.items()):
                if wanted is not None and (tp.topic, tp.partition) not in wanted:
                    continue
                by_topic.setdefault(tp.topic, []).append(dlr.DescribeLogDirsPartition(
                    partition_index=tp.partition, partition_size=size, offset_lag=0, is_future_key=False))
            results.append(dlr.DescribeLogDirsResult(
                error_code=ErrorCode.NONE, log_dir=d.path,
                topics=[dlr.DescribeLogDirsTopic(name=n, partitions=ps) for n, ps in by_topic.items()],
                total_bytes=d.total_bytes, usable_bytes=d.usable_bytes))
        return dlr.DescribeLogDirsResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, results=results)
