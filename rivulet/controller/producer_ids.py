"""Producer ids in ZooKeeper mode (Kafka's ZkProducerIdManager): every broker takes blocks of
1000 ids from ``/latest_producer_id_block`` with a conditional write on the znode's version,
so no two brokers (and no restart) ever hand out the same id. The znode holds the last block
taken, in Kafka's JSON: ``{"version":1,"broker":<id>,"block_start":"<first>","block_end":"<last>"}``.

A block is fetched once per 1000 producers, a short blocking ZooKeeper round trip.
"""

from __future__ import annotations

import json
import logging

from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError

from rivulet.controller import zk_data as z
from rivulet.controller.zk_client import KafkaZkClient
from rivulet.protocol.errors import ApiError, ErrorCode

log = logging.getLogger(__name__)

BLOCK_SIZE = 1000
LONG_MAX = 2**63 - 1


def encode_block(broker_id: int, first: int, last: int) -> bytes:
    return json.dumps({"version": 1, "broker": broker_id, "block_start": str(first), "block_end": str(last)},
                      separators=(",", ":")).encode()


def decode_block_end(data: bytes) -> int:
    """The last id of the block recorded in the znode."""
    return int(json.loads(data.decode())["block_end"])


class ZkProducerIdManager:
    def __init__(self, client: KafkaZkClient, broker_id: int, block_size: int = BLOCK_SIZE) -> None:
        self.client = client
        self.broker_id = broker_id
        self.block_size = block_size
        self._next_id = 0
        self._block_end = 0  # exclusive; nothing taken yet

    def generate_producer_id(self) -> int:
        if self._next_id >= self._block_end:
            try:
                first = self._take_block()
            except KazooException as e:
                # ZooKeeper out of reach: a retriable answer, as Kafka's when no block can be had.
                raise ApiError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, f"no producer id block: {e!r}") from e
            self._next_id, self._block_end = first, first + self.block_size
        pid = self._next_id
        self._next_id += 1
        return pid

    def _take_block(self) -> int:
        zk = self.client.zk
        while True:
            try:
                data, stat = zk.get(z.LATEST_PRODUCER_ID_BLOCK)
            except NoNodeError:
                data, stat = b"", None
            first = decode_block_end(data) + 1 if data else 0
            last = first + self.block_size - 1
            if last > LONG_MAX:
                raise ApiError(ErrorCode.UNKNOWN_SERVER_ERROR, "Exhausted all producerIds")
            block = encode_block(self.broker_id, first, last)
            try:
                if stat is None:
                    zk.create(z.LATEST_PRODUCER_ID_BLOCK, block, makepath=True)
                else:
                    zk.set(z.LATEST_PRODUCER_ID_BLOCK, block, version=stat.version)
            except (BadVersionError, NodeExistsError):
                continue  # another broker took a block meanwhile: read again
            log.info("took producer id block %d-%d", first, last)
            return first
