"""Producer ids, unique across restarts.

Kafka's controller hands brokers blocks of 1000 ids and records each block in its metadata
log. Rivulet records the start of the next free block in ``producer-id-block.json`` in the
first log dir, durably, before any id of a new block is handed out; a restart resumes at
that mark, so ids are never reused (the rest of the old block is skipped, as in Kafka).
"""

from __future__ import annotations

import json
import os
from typing import Protocol

from rivulet.protocol.errors import ApiError, ErrorCode
from rivulet.storage.checkpoints import write_atomic

BLOCK_SIZE = 1000
FILE_NAME = "producer-id-block.json"
LONG_MAX = 2**63 - 1


class ProducerIdGenerator(Protocol):
    """Hands out producer ids never handed out before (this manager, or ZooKeeper's blocks)."""

    def generate_producer_id(self) -> int: ...


class ProducerIdManager:
    def __init__(self, data_dir: str, block_size: int = BLOCK_SIZE) -> None:
        self.path = os.path.join(data_dir, FILE_NAME)
        self.block_size = block_size
        self._next_block_start = self._read()
        self._next_id = 0
        self._block_end = 0  # exclusive; nothing allocated yet

    def _read(self) -> int:
        try:
            with open(self.path, encoding="utf-8") as f:
                doc = json.load(f)
            value = int(doc["next_block_start"])
            if value < 0:
                raise ValueError(value)
            return value
        except FileNotFoundError:
            return 0
        except (ValueError, KeyError, TypeError) as e:
            raise RuntimeError(f"{self.path} is corrupt ({e}); refusing to risk reusing producer ids") from None

    def generate_producer_id(self) -> int:
        if self._next_id >= self._block_end:
            start = self._next_block_start
            end = start + self.block_size
            if end > LONG_MAX:
                raise ApiError(ErrorCode.UNKNOWN_SERVER_ERROR, "Exhausted all producerIds")
            # Durable before use: a crash must never hand out an id of this block again.
            try:
                write_atomic(self.path, json.dumps({"version": 0, "next_block_start": end}))
            except OSError as e:
                # Kafka's answer while no block can be had; the client retries.
                raise ApiError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                               f"Producer ID block is not yet available: recording it failed ({e.strerror})") from e
            self._next_block_start = end
            self._next_id, self._block_end = start, end
        pid = self._next_id
        self._next_id += 1
        return pid
