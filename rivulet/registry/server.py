"""The registry as a whole: its ``_schemas`` store, its operations and its HTTP listener
(waitress, as the web console, on threads of its own so that the broker's event loop never
waits on a request)."""

from __future__ import annotations

import logging
import socket
import threading
from typing import Any

import waitress
from waitress.server import BaseWSGIServer, MultiSocketServer

from rivulet.registry.avro_schema import AvroProvider
from rivulet.registry.json_schema import JsonSchemaProvider
from rivulet.registry.protobuf_schema import ProtobufProvider
from rivulet.registry.election import SoleWriter, WriterElection, ZkWriterElection
from rivulet.registry.kafka_store import DEFAULT_TOPIC, KafkaStore
from rivulet.registry.rest import create_wsgi
from rivulet.registry.schema_types import AVRO, JSON, PROTOBUF
from rivulet.registry.service import SchemaRegistry

log = logging.getLogger("rivulet.registry")


class SchemaRegistryServer:
    """``bind`` (a port in use fails here, before anything is read), ``start`` with the
    clients' properties (``bootstrap.servers``...), ``close``. ``host`` empty listens on every
    address."""

    def __init__(self, host: str, port: int, topic: str = DEFAULT_TOPIC, replication_factor: int = 3,
                 wait_for_replicas: bool = False) -> None:
        self.host, self.port = host, port
        self.wait_for_replicas = wait_for_replicas
        self.topic = topic
        self.replication_factor = replication_factor
        self.store: KafkaStore | None = None
        self.election: WriterElection | None = None
        self._sock: socket.socket | None = None
        self._server: BaseWSGIServer | MultiSocketServer | None = None
        self._thread: threading.Thread | None = None

    def bind(self) -> int:
        """Listen; the bound port."""
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        self._sock = socket.create_server((self.host, self.port), family=family)
        self.port = self._sock.getsockname()[1]
        return self.port

    def start(self, client_config: dict[str, Any], advertised_host: str = "", zookeeper_connect: str = "") -> None:
        """``advertised_host``: how the other brokers' registries reach this one;
        ``zookeeper_connect``: a cluster's, where its registries elect their writer (else this
        one writes alone)."""
        assert self._sock is not None, "bind first"
        logging.getLogger("waitress").setLevel(logging.WARNING)
        store = self.store = KafkaStore(client_config, self.topic, replication_factor=self.replication_factor,
                                        wait_for_replicas=self.wait_for_replicas)
        store.start()
        url = f"http://{advertised_host or self.host or '127.0.0.1'}:{self.port}"
        election = self.election = ZkWriterElection(zookeeper_connect, url) if zookeeper_connect else SoleWriter(url)
        providers = {AVRO: AvroProvider(), JSON: JsonSchemaProvider(), PROTOBUF: ProtobufProvider()}
        registry = SchemaRegistry(store, providers, shared=election.shared())
        self._server = waitress.create_server(create_wsgi(registry, election), sockets=[self._sock], threads=8,
                                              ident="rivulet-schema-registry")
        self._thread = threading.Thread(target=self._server.run, name="rivulet-schema-registry", daemon=True)
        self._thread.start()
        log.info("schema registry on http://%s:%d", self.host or "0.0.0.0", self.port)

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        if self._thread is not None:
            self._thread.join(5)
        if self._sock is not None:
            self._sock.close()
        if self.election is not None:
            self.election.close()
        if self.store is not None:
            self.store.close()
