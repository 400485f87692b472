"""The registry as a whole: its ``_schemas`` store, its operations and its HTTP listener
(waitress, as the web console, on threads of its own so that the broker's event loop never
waits on a request)."""

from __future__ import annotations

import logging
import socket
import threading
from typing import Any
from urllib.parse import urlsplit

import waitress
from waitress.server import BaseWSGIServer, MultiSocketServer

from rivulet.registry.avro_schema import AvroProvider
from rivulet.registry.kafka_store import DEFAULT_TOPIC, KafkaStore
from rivulet.registry.rest import create_app
from rivulet.registry.schema_types import AVRO
from rivulet.registry.service import SchemaRegistry

log = logging.getLogger("rivulet.registry")


def parse_listener(url: str) -> tuple[str, int]:
    """One of ``schema.registry.listeners``, ``http://host:port``, into (host, port); an empty
    host listens on every address."""
    parts = urlsplit(url.strip())
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "http" or port is None or parts.path not in ("", "/"):
        raise ValueError(f"schema.registry.listeners must be http://host:port, not {url!r}")
    return parts.hostname or "", port


class SchemaRegistryServer:
    """``bind`` (a port in use fails here, before anything is read), ``start``, ``close``."""

    def __init__(self, listener: str, client_config: dict[str, Any], topic: str = DEFAULT_TOPIC,
                 replication_factor: int = 3) -> None:
        self.host, self.port = parse_listener(listener)
        self.store = KafkaStore(client_config, topic, replication_factor=replication_factor)
        self.registry = SchemaRegistry(self.store, {AVRO: AvroProvider()})
        self._sock: socket.socket | None = None
        self._server: BaseWSGIServer | MultiSocketServer | None = None
        self._thread: threading.Thread | None = None

    def bind(self) -> int:
        """Listen; the bound port."""
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        self._sock = socket.create_server((self.host, self.port), family=family)
        self.port = self._sock.getsockname()[1]
        return self.port

    def start(self) -> None:
        assert self._sock is not None, "bind first"
        logging.getLogger("waitress").setLevel(logging.WARNING)
        self.store.start()
        self._server = waitress.create_server(create_app(self.registry), sockets=[self._sock], threads=8,
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
        self.store.close()
