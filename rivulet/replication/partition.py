"""A partition replica as its leader sees it: the log, the leader epoch, the ISR and the HW.

With one node the ISR is just this node, so the high watermark follows the log end offset
as soon as an append lands. The methods are the seams replication will plug into: a
follower's fetch advances its LEO, and the HW becomes the smallest LEO across the ISR.
"""

from __future__ import annotations

import uuid

from rivulet.common.types import TopicPartition
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.storage.log import Log


class Partition:
    def __init__(self, tp: TopicPartition, topic_id: uuid.UUID, log: Log, node_id: int,
                 leader_epoch: int = 0) -> None:
        self.tp = tp
        self.topic_id = topic_id
        self.log = log
        self.node_id = node_id
        self.leader_epoch = leader_epoch
        self.replicas = [node_id]
        self.isr = [node_id]
        self.deleted = False
        if log.latest_epoch is None or log.latest_epoch < leader_epoch:
            log.assign_epoch(leader_epoch, log.log_end_offset)
        # Becoming leader: the checkpointed HW may lag after a crash; the ISR decides it now.
        self.maybe_increment_high_watermark()

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: the first offset of an undecided transaction when it lies below the
        high watermark, else the high watermark. read_committed fetches stop here."""
        hw = self.log.high_watermark
        fuo = self.log.first_unstable_offset
        return fuo if fuo is not None and fuo < hw else hw

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """KIP-320 fencing: a client that names an epoch must name ours."""
        if current_leader_epoch < 0:
            return
        if current_leader_epoch > self.leader_epoch:
            raise ApiError(ErrorCode.UNKNOWN_LEADER_EPOCH)
        if current_leader_epoch < self.leader_epoch:
            raise ApiError(ErrorCode.FENCED_LEADER_EPOCH)

    def maybe_increment_high_watermark(self) -> bool:
        """Advance the HW to the smallest LEO in the ISR; True when it moved."""
        new_hw = self.log.log_end_offset  # one replica: the leader's own LEO
        if new_hw > self.log.high_watermark:
            self.log.high_watermark = new_hw
            return True
        return False
