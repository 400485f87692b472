"""Requests for the controller, in ZooKeeper mode: AlterPartition (a leader's ISR change) and
ControlledShutdown. Every broker answers them; one that is not the active controller says
NOT_CONTROLLER, as Kafka's, and the sender looks for the controller again."""

from __future__ import annotations

import asyncio

from rivulet.controller.controller import KafkaController
from rivulet.protocol.framing import RequestHeader
from rivulet.protocol.messages.alter_partition_request import AlterPartitionRequest
from rivulet.protocol.messages.controlled_shutdown_request import ControlledShutdownRequest
from rivulet.server.answer import Answer
from rivulet.server.handlers import Handler
from rivulet.server.network import KafkaConnection

# API key -> versions, added to KafkaApis' table in ZooKeeper mode only (a single node, like
# Kafka 4's brokers, does not list them).
CLUSTER_MODE_VERSIONS: dict[int, tuple[int, int]] = {
    7: (0, 3),    # ControlledShutdown
    56: (0, 3),   # AlterPartition
}


class ControllerHandlers:
    def __init__(self, controller: KafkaController) -> None:
        self.controller = controller

    def handlers(self) -> dict[int, Handler]:
        return {7: self.handle_controlled_shutdown, 56: self.handle_alter_partition}

    def handle_alter_partition(self, header: RequestHeader, req: AlterPartitionRequest,
                               conn: KafkaConnection) -> Answer:
        return asyncio.ensure_future(self.controller.alter_partition(req, header.api_version))

    def handle_controlled_shutdown(self, header: RequestHeader, req: ControlledShutdownRequest,
                                   conn: KafkaConnection) -> Answer:
        return asyncio.ensure_future(self.controller.controlled_shutdown(req.broker_id, req.broker_epoch))
