"""A partition replica: the log, the leader epoch, the ISR and the high watermark.

On the leader it tracks each follower (its LEO, when it last fetched, when it was last caught
up), moves the HW to the smallest LEO of the ISR, and proposes ISR changes (a follower that has
not caught up for ``replica.lag.time.max.ms`` leaves, one that reaches the HW in the current
leader epoch joins) through an ``AlterPartitionManager``; the change takes effect when the
controller accepts it. One change is in flight at a time. While an expansion is pending the HW
already waits for the joining replica (Kafka's maximal ISR); ``min.insync.replicas`` counts only
the committed ISR.

In single-node mode (no controller) the ISR is this node alone and the HW follows the LEO.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import Callable, Mapping, Protocol

from rivulet.common.time import SYSTEM_CLOCK, Clock
from rivulet.common.types import TopicPartition
from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.storage.log import Log

log = logging.getLogger(__name__)

UNKNOWN_OFFSET = -1
DEFAULT_REPLICA_LAG_TIME_MAX_MS = 30_000


@dataclass(slots=True)
class LeaderAndIsr:
    """A partition's leadership as the controller records it (the znode's state)."""

    leader: int
    leader_epoch: int
    isr: list[int]
    partition_epoch: int


@dataclass(slots=True)
class PartitionState:
    """One partition of a LeaderAndIsr request."""

    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: list[int]
    partition_epoch: int
    replicas: list[int]
    is_new: bool = False


AlterPartitionCallback = Callable[["LeaderAndIsr | ErrorCode"], None]


class AlterPartitionManager(Protocol):
    """Sends a leader's proposed ISR to the controller (AlterPartition). ``on_result`` gets the
    state the controller committed, or the error that refused it; retriable failures (no
    controller, a lost connection) are retried by the manager, not reported. ``broker_epochs``
    are the followers' broker epochs from their fetches (KIP-903), so that the controller
    refuses a member that has restarted since."""

    def submit(self, tp: TopicPartition, topic_id: uuid.UUID, proposed: LeaderAndIsr,
               on_result: AlterPartitionCallback, broker_epochs: Mapping[int, int]) -> None: ...


class HighWatermarkListener(Protocol):
    def on_high_watermark_advanced(self, tp: TopicPartition) -> None: ...


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower, from its fetches (Kafka's Replica)."""

    broker_id: int
    log_end_offset: int = UNKNOWN_OFFSET
    log_start_offset: int = UNKNOWN_OFFSET
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_time_ms: int = 0
    last_caught_up_time_ms: int = 0
    broker_epoch: int = -1  # from its fetches (Fetch v15+); -1 when it did not say

    def update_fetch(self, fetch_offset: int, log_start_offset: int, now_ms: int, leader_leo: int) -> None:
        # Caught up now if it asked for the leader's end; caught up as of its previous fetch if it
        # now asks for what the leader's end was then.
        if fetch_offset >= leader_leo:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, self.last_fetch_time_ms)
        self.log_end_offset = fetch_offset
        self.log_start_offset = log_start_offset
        self.last_fetch_leader_log_end_offset = leader_leo
        self.last_fetch_time_ms = now_ms

    def is_caught_up(self, leader_leo: int, now_ms: int, max_lag_ms: int) -> bool:
        return self.log_end_offset == leader_leo or now_ms - self.last_caught_up_time_ms <= max_lag_ms

    def reset(self, now_ms: int, leader_leo: int, in_sync: bool) -> None:
        """A new leadership: nothing is known of its LEO; an ISR member counts as caught up now."""
        self.log_end_offset = UNKNOWN_OFFSET
        self.log_start_offset = UNKNOWN_OFFSET
        self.last_fetch_leader_log_end_offset = leader_leo
        self.last_fetch_time_ms = now_ms
        self.last_caught_up_time_ms = now_ms if in_sync else 0


@dataclass(slots=True)
class PartitionStats:
    """Counters the broker's metrics read when scraped (``server/metrics``): bumped once per
    request and partition, never per record."""

    bytes_in: int = 0
    messages_in: int = 0
    bytes_out: int = 0
    messages_out: int = 0
    produce_requests: int = 0
    failed_produce_requests: int = 0
    fetch_requests: int = 0
    failed_fetch_requests: int = 0
    replication_bytes_in: int = 0
    replication_bytes_out: int = 0
    isr_shrinks: int = 0
    isr_expands: int = 0


@dataclass(slots=True)
class _PendingChange:
    proposed: LeaderAndIsr
    expanding: bool  # an expansion: the HW waits for the new member already


@dataclass(eq=False)
class Partition:
    tp: TopicPartition
    topic_id: uuid.UUID
    log: Log
    node_id: int
    leader_epoch: int = 0
    clock: Clock = SYSTEM_CLOCK
    replica_lag_time_max_ms: int = DEFAULT_REPLICA_LAG_TIME_MAX_MS
    alter_partition: AlterPartitionManager | None = None
    listener: HighWatermarkListener | None = None
    leader_id: int = -1
    partition_epoch: int = 0
    controller_epoch: int = -1
    replicas: list[int] = field(default_factory=list)
    isr: list[int] = field(default_factory=list)
    followers: dict[int, FollowerState] = field(default_factory=dict)
    leader_epoch_start_offset: int = UNKNOWN_OFFSET
    deleted: bool = False
    # This broker's ZooKeeper session expired (or is presumed so): another broker may lead now,
    # so this one stops leading until the controller's next LeaderAndIsr says what to do.
    fenced: bool = False
    stats: PartitionStats = field(default_factory=PartitionStats)
    _pending: _PendingChange | None = None

    def __post_init__(self) -> None:
        if self.leader_id < 0 and not self.replicas:
            # Single-node mode: this node leads, alone.
            self.leader_id = self.node_id
            self.replicas = [self.node_id]
            self.isr = [self.node_id]
            self._start_epoch_at_log_end()
            # Becoming leader: the checkpointed HW may lag after a crash; the ISR decides it now.
            self.maybe_increment_high_watermark()

    # ------------------------------------------------------------ views
    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.node_id and not self.fenced

    def followers_quiet(self, now_ms: int, quiet_ms: int) -> bool:
        """Whether the ISR has members besides this leader and none of them fetched in the last
        ``quiet_ms``: cut off from them, this leader can no longer commit anything."""
        others = [r for r in self.isr if r != self.node_id]
        return bool(others) and all(
            r not in self.followers or now_ms - self.followers[r].last_fetch_time_ms >= quiet_ms for r in others)

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: the first offset of an undecided transaction when it lies below the
        high watermark, else the high watermark. read_committed fetches stop here."""
        return self.watermarks()[1]

    def watermarks(self) -> tuple[int, int]:
        """(HW, LSO) in one call: a Fetch asks both of each of its partitions."""
        lg = self.log
        hw = lg.high_watermark
        fuo = lg.first_unstable_offset
        return hw, fuo if fuo is not None and fuo < hw else hw

    @property
    def maximal_isr(self) -> list[int]:
        """The ISR the HW waits for: the committed one plus a member being added."""
        p = self._pending
        if p is not None and p.expanding:
            return p.proposed.isr
        return self.isr

    @property
    def has_pending_isr_change(self) -> bool:
        return self._pending is not None

    # ------------------------------------------------------------ fencing
    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """KIP-320 fencing: a client that names an epoch must name ours."""
        if current_leader_epoch < 0:
            return
        if current_leader_epoch > self.leader_epoch:
            raise ApiError(ErrorCode.UNKNOWN_LEADER_EPOCH)
        if current_leader_epoch < self.leader_epoch:
            raise ApiError(ErrorCode.FENCED_LEADER_EPOCH)

    def check_leader(self, current_leader_epoch: int = -1) -> None:
        """Kafka's order: the epoch first, then whether this replica leads."""
        self.check_leader_epoch(current_leader_epoch)
        if not self.is_leader:
            raise ApiError(ErrorCode.NOT_LEADER_OR_FOLLOWER)

    def mark_deleted(self) -> None:
        """The partition left this broker (Kafka's Partition.delete, as far as this object goes:
        the log is the LogManager's); requests for it now fail."""
        self.deleted = True

    def fence(self) -> None:
        """Stop leading until the controller's next LeaderAndIsr (see ``fenced``)."""
        self.fenced = True

    def unfence(self) -> None:
        self.fenced = False

    def maybe_set_topic_id(self, topic_id: uuid.UUID) -> None:
        """A replica opened before the controller spoke takes the controller's topic id (the
        setting half of Kafka's checkOrSetTopicId); a zero id sets nothing."""
        if self.controller_epoch < 0 and topic_id.int != 0:
            self.topic_id = topic_id

    def replace_log(self, lg: Log) -> None:
        """AlterReplicaLogDirs done: the copy in the new directory is this replica's log now
        (Kafka's maybeReplaceCurrentWithFutureReplica, once the LogManager has swapped them)."""
        self.log = lg

    # ------------------------------------------------------------ leadership
    def _start_epoch_at_log_end(self) -> None:
        lg = self.log
        if lg.latest_epoch is None or lg.latest_epoch < self.leader_epoch:
            lg.assign_epoch(self.leader_epoch, lg.log_end_offset)
        self.leader_epoch_start_offset = lg.log_end_offset

    def make_leader(self, state: PartitionState) -> bool:
        """Become (or stay) the leader of ``state``; True when this is a new leadership or epoch."""
        now = self.clock.milliseconds()
        was_leader = self.is_leader
        new_epoch = state.leader_epoch != self.leader_epoch or not was_leader
        self._apply_state(state)
        leo = self.log.log_end_offset
        if new_epoch:
            self._start_epoch_at_log_end()
        for r in self.replicas:
            if r == self.node_id:
                continue
            fs = self.followers.get(r)
            if fs is None:
                fs = self.followers[r] = FollowerState(r)
                fs.reset(now, leo, r in self.isr)
            elif not was_leader:
                fs.reset(now, leo, r in self.isr)
        for r in list(self.followers):
            if r not in self.replicas:
                del self.followers[r]
        self._pending = None
        self.maybe_increment_high_watermark()
        return new_epoch

    def make_follower(self, state: PartitionState) -> bool:
        """Follow ``state.leader``; True when the leader or the epoch changed (refetch from it)."""
        changed = state.leader != self.leader_id or state.leader_epoch != self.leader_epoch
        self._apply_state(state)
        self.followers.clear()
        self._pending = None
        self.leader_epoch_start_offset = UNKNOWN_OFFSET
        return changed

    def _apply_state(self, state: PartitionState) -> None:
        self.fenced = False
        self.controller_epoch = state.controller_epoch
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.partition_epoch = state.partition_epoch
        self.replicas = list(state.replicas)
        self.isr = list(state.isr)

    # ------------------------------------------------------------ the leader's side
    def update_follower_fetch(self, replica_id: int, fetch_offset: int, log_start_offset: int,
                              broker_epoch: int = -1) -> bool:
        """A follower fetched from ``fetch_offset``: record it, maybe propose it joins the ISR,
        maybe advance the HW. True when the HW moved. Unknown replicas are refused."""
        fs = self.followers.get(replica_id)
        if fs is None or not self.is_leader:
            raise ApiError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                           f"broker {replica_id} is not a replica of {self.tp.topic}-{self.tp.partition}")
        now = self.clock.milliseconds()
        fs.update_fetch(fetch_offset, log_start_offset, now, self.log.log_end_offset)
        fs.broker_epoch = broker_epoch
        self.maybe_expand_isr(fs)
        return self.maybe_increment_high_watermark()

    def maybe_increment_high_watermark(self) -> bool:
        """Advance the HW to the smallest LEO in the (maximal) ISR; True when it moved. It
        never goes back on the leader, and stays while the ISR is below min.insync.replicas (as
        Kafka 4's leader, at every eligible.leader.replicas.version): every record under it is
        then on min ISR replicas, which is what makes a replica that left such an ISR safe to
        elect (KIP-966's ELR)."""
        if not self.is_leader:
            return False
        # A full ISR (the usual case) is never below min ISR: asked first, it keeps the check cheap.
        if len(self.isr) < len(self.replicas) and len(self.isr) < self.effective_min_isr:
            return False
        new_hw = self.log.log_end_offset
        for r in self.maximal_isr:
            if r == self.node_id:
                continue
            fs = self.followers.get(r)
            leo = fs.log_end_offset if fs is not None else UNKNOWN_OFFSET
            if leo < new_hw:
                new_hw = leo
        if new_hw > self.log.high_watermark:
            self.log.high_watermark = new_hw
            return True
        return False

    def maybe_expand_isr(self, fs: FollowerState) -> None:
        if self._pending is not None or fs.broker_id in self.isr or self.alter_partition is None:
            return
        leo = fs.log_end_offset
        if leo >= self.log.high_watermark and leo >= self.leader_epoch_start_offset >= 0:
            self._propose(self.isr + [fs.broker_id], expanding=True)

    def out_of_sync_replicas(self) -> list[int]:
        now = self.clock.milliseconds()
        leo = self.log.log_end_offset
        out = []
        for r in self.isr:
            if r == self.node_id:
                continue
            fs = self.followers.get(r)
            if fs is None or not fs.is_caught_up(leo, now, self.replica_lag_time_max_ms):
                out.append(r)
        return out

    def maybe_shrink_isr(self) -> bool:
        """Propose an ISR without the followers that have lagged too long; True if proposed."""
        if not self.is_leader or self._pending is not None or self.alter_partition is None:
            return False
        out = self.out_of_sync_replicas()
        if not out:
            return False
        log.info("%s-%d: shrinking ISR from %s; out of sync: %s (leader LEO %d, HW %d)", self.tp.topic,
                 self.tp.partition, self.isr, out, self.log.log_end_offset, self.high_watermark)
        self._propose([r for r in self.isr if r not in out], expanding=False)
        return True

    def _propose(self, new_isr: list[int], *, expanding: bool) -> None:
        assert self.alter_partition is not None
        proposed = LeaderAndIsr(self.node_id, self.leader_epoch, sorted(new_isr), self.partition_epoch)
        pending = self._pending = _PendingChange(proposed, expanding)
        epochs = {r: fs.broker_epoch for r, fs in self.followers.items() if r in proposed.isr}
        self.alter_partition.submit(self.tp, self.topic_id, proposed,
                                    lambda result: self._on_alter_result(pending, result), epochs)

    def _on_alter_result(self, pending: _PendingChange, result: LeaderAndIsr | ErrorCode) -> None:
        if self._pending is not pending:
            return  # a LeaderAndIsr replaced this state meanwhile
        self._pending = None
        if isinstance(result, ErrorCode):
            # Refused (a newer epoch or partition epoch exists): the controller's next
            # LeaderAndIsr brings the state to follow.
            log.info("%s-%d: ISR change to %s refused: %s", self.tp.topic, self.tp.partition,
                     pending.proposed.isr, result.name)
            return
        if result.leader_epoch != self.leader_epoch or result.partition_epoch < self.partition_epoch:
            return
        if len(result.isr) < len(self.isr):
            self.stats.isr_shrinks += 1
        elif len(result.isr) > len(self.isr):
            self.stats.isr_expands += 1
        self.isr = list(result.isr)
        self.partition_epoch = result.partition_epoch
        log.info("%s-%d: ISR now %s (partition epoch %d)", self.tp.topic, self.tp.partition, self.isr,
                 self.partition_epoch)
        if self.maybe_increment_high_watermark() and self.listener is not None:
            self.listener.on_high_watermark_advanced(self.tp)

    # ------------------------------------------------------------ acks=all
    @property
    def effective_min_isr(self) -> int:
        """min.insync.replicas capped at the replication factor, as Kafka's leader counts it: a
        topic asking for more in-sync replicas than it has still takes acks=all writes."""
        return min(self.log.config.min_insync_replicas, max(len(self.replicas), 1))

    def check_min_isr(self, required_acks: int) -> None:
        if required_acks == -1 and len(self.isr) < self.effective_min_isr:
            raise ApiError(ErrorCode.NOT_ENOUGH_REPLICAS,
                           f"The size of the current ISR {self.isr} is insufficient to satisfy the min.isr "
                           f"requirement of {self.effective_min_isr} for partition "
                           f"{self.tp.topic}-{self.tp.partition}")

    def check_enough_replicas_reach_offset(self, required_offset: int) -> tuple[bool, ErrorCode]:
        """DelayedProduce's question: (done, error) for an append that ends at ``required_offset``."""
        if not self.is_leader:
            return True, ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self.high_watermark < required_offset:
            return False, ErrorCode.NONE
        if len(self.isr) < self.effective_min_isr:
            return True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return True, ErrorCode.NONE

    # ------------------------------------------------------------ the follower's side
    def update_follower_high_watermark(self, leader_high_watermark: int) -> None:
        self.log.high_watermark = min(leader_high_watermark, self.log.log_end_offset)
