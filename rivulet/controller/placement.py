"""Replica placement for new topics and partitions, as Kafka's AdminUtils.assignReplicasToBrokers.

Without racks the replicas of partition p start at broker (start + p) and the followers
follow at a shift that grows once per round of brokers, so leaders and followers both spread
evenly. With racks the brokers are first interleaved rack by rack, and each partition's
followers skip a rack that already holds one of its replicas while some rack holds none, and
a broker that already holds one while some broker holds none.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from rivulet.protocol.errors import ApiError, ErrorCode


@dataclass(frozen=True)
class BrokerRack:
    broker_id: int
    rack: str | None = None


def assign_replicas_to_brokers(brokers: list[BrokerRack], num_partitions: int, replication_factor: int,
                               fixed_start_index: int = -1, start_partition_id: int = -1,
                               rng: random.Random | None = None) -> dict[int, list[int]]:
    """Partition id -> its replicas, the preferred leader first."""
    if num_partitions <= 0:
        raise ApiError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise ApiError(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise ApiError(ErrorCode.INVALID_REPLICATION_FACTOR,
                       f"Replication factor: {replication_factor} larger than available brokers: {len(brokers)}.")
    racks = {b.broker_id: b.rack for b in brokers if b.rack is not None}
    if not racks:
        return _rack_unaware(sorted(b.broker_id for b in brokers), num_partitions, replication_factor,
                             fixed_start_index, start_partition_id, rng or random.Random())
    if len(racks) < len(brokers):
        raise ApiError(ErrorCode.INVALID_REPLICATION_FACTOR,
                       "Not all brokers have rack information for replica rack aware assignment.")
    return _rack_aware(racks, num_partitions, replication_factor, fixed_start_index, start_partition_id,
                       rng or random.Random())


def _follower_index(first: int, shift: int, j: int, n: int) -> int:
    """Where partition's (j+1)th follower sits: never on the first replica's own index."""
    return (first + 1 + (shift + j) % (n - 1)) % n


def _partitions(n: int, num_partitions: int, fixed_start_index: int, start_partition_id: int,
                rng: random.Random) -> Iterator[tuple[int, int, int]]:
    """(partition id, index of its first replica, follower shift) for each new partition: the
    first replicas go round the brokers, the shift grows once per round."""
    start = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    shift = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    first_pid = max(0, start_partition_id)
    for pid in range(first_pid, first_pid + num_partitions):
        if pid > 0 and pid % n == 0:
            shift += 1
        yield pid, (pid + start) % n, shift


def _rack_unaware(ids: list[int], num_partitions: int, rf: int, fixed_start_index: int,
                  start_partition_id: int, rng: random.Random) -> dict[int, list[int]]:
    n = len(ids)
    return {pid: [ids[first]] + [ids[_follower_index(first, shift, j, n)] for j in range(rf - 1)]
            for pid, first, shift in _partitions(n, num_partitions, fixed_start_index, start_partition_id, rng)}


def rack_alternated(racks: dict[int, str]) -> list[int]:
    """The brokers taken one rack at a time (racks in name order, brokers by id within a rack)."""
    by_rack: dict[str, list[int]] = {}
    for broker_id in sorted(racks):
        by_rack.setdefault(racks[broker_id], []).append(broker_id)
    queues = [by_rack[r] for r in sorted(by_rack)]
    out: list[int] = []
    depth = 0
    while len(out) < len(racks):
        out.extend(q[depth] for q in queues if depth < len(q))
        depth += 1
    return out


def _rack_aware(racks: dict[int, str], num_partitions: int, rf: int, fixed_start_index: int,
                start_partition_id: int, rng: random.Random) -> dict[int, list[int]]:
    arranged = rack_alternated(racks)
    n = len(arranged)
    num_racks = len(set(racks.values()))
    out: dict[int, list[int]] = {}
    for pid, first, shift in _partitions(n, num_partitions, fixed_start_index, start_partition_id, rng):
        leader = arranged[first]
        replicas = [leader]
        used_racks = {racks[leader]}
        used_brokers = {leader}
        k = 0
        for _ in range(rf - 1):
            while True:
                broker = arranged[_follower_index(first, shift * num_racks, k, n)]
                k += 1
                rack_ok = racks[broker] not in used_racks or len(used_racks) == num_racks
                broker_ok = broker not in used_brokers or len(used_brokers) == n
                if rack_ok and broker_ok:
                    replicas.append(broker)
                    used_racks.add(racks[broker])
                    used_brokers.add(broker)
                    break
        out[pid] = replicas
    return out
