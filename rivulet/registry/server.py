"""The registry as a whole: its ``_schemas`` store, its operations and its HTTP listener
(waitress, as the web console, on threads of its own so that the broker's event loop never
waits on a request)."""

from __future__ import annotations

import logging
import socket
import socketserver
import ssl
import threading
from collections.abc import Callable
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer
from wsgiref.types import WSGIApplication, WSGIEnvironment

import waitress
from waitress.server import BaseWSGIServer, MultiSocketServer

from rivulet.client.config import ClientConf
from rivulet.registry.avro_schema import AvroProvider
from rivulet.registry.client import RegisteredSchema, RegistryError
from rivulet.registry.json_schema import JsonSchemaProvider
from rivulet.registry.protobuf_schema import ProtobufProvider
from rivulet.registry.election import SoleWriter, WriterElection, ZkWriterElection
from rivulet.registry.kafka_store import DEFAULT_TOPIC, KafkaStore
from rivulet.registry.rest import PEER_DN, create_wsgi
from rivulet.registry.schema_types import AVRO, JSON, PROTOBUF
from rivulet.registry.security import RegistrySecurity
from rivulet.security.tls import peer_dn
from rivulet.registry.service import SchemaRegistry

log = logging.getLogger("rivulet.registry")


TLS_HANDSHAKE_TIMEOUT_S = 30.0


class _TlsHandler(WSGIRequestHandler):
    """One HTTPS connection: the TLS handshake on the connection's own thread (a slow client
    holds up no other), the client certificate's subject in the environ."""

    def setup(self) -> None:
        self.request.settimeout(TLS_HANDSHAKE_TIMEOUT_S)
        self.request.do_handshake()
        super().setup()

    def get_environ(self) -> WSGIEnvironment:
        env = super().get_environ()
        env[PEER_DN] = peer_dn(self.request)
        env["REQUEST_URI"] = self.path  # as sent, as waitress gives it: a subject's %2F stays encoded
        return env

    def log_message(self, format: str, *args: object) -> None:
        pass


class _TlsServer(socketserver.ThreadingMixIn, WSGIServer):
    """The registry's listener for https:// (waitress speaks no TLS): a thread per connection
    over the socket already bound."""

    daemon_threads = True

    def __init__(self, sock: socket.socket, context: ssl.SSLContext, app: WSGIApplication) -> None:
        super().__init__(sock.getsockname()[:2], _TlsHandler, bind_and_activate=False)
        self.socket.close()
        self.socket = sock
        self.server_name, self.server_port = "rivulet-schema-registry", sock.getsockname()[1]
        self.setup_environ()
        self.set_app(app)
        self.context = context

    def get_request(self) -> tuple[ssl.SSLSocket, object]:
        conn, addr = self.socket.accept()
        return self.context.wrap_socket(conn, server_side=True, do_handshake_on_connect=False), addr

    def handle_error(self, request: object, client_address: object) -> None:
        log.debug("schema registry connection from %s failed", client_address, exc_info=True)


class SchemaRegistryServer:
    """``bind`` (a port in use fails here, before anything is read), ``start`` with the
    clients' properties (``bootstrap.servers``...), ``close``. ``host`` empty listens on every
    address."""

    def __init__(self, host: str, port: int, topic: str = DEFAULT_TOPIC, replication_factor: int = 3,
                 wait_for_replicas: bool = False, tls: ssl.SSLContext | None = None,
                 forward_tls: ssl.SSLContext | None = None) -> None:
        """``tls``: serve https with this context (its client certificates as it asks for them);
        ``forward_tls``: the client context that reaches the other brokers' https registries."""
        self.host, self.port = host, port
        self.tls = tls
        self.forward_tls = forward_tls
        self.wait_for_replicas = wait_for_replicas
        self.topic = topic
        self.replication_factor = replication_factor
        self.store: KafkaStore | None = None
        self.registry: SchemaRegistry | None = None
        self.election: WriterElection | None = None
        self._sock: socket.socket | None = None
        self._server: BaseWSGIServer | MultiSocketServer | _TlsServer | None = None
        self._thread: threading.Thread | None = None

    def bind(self) -> int:
        """Listen; the bound port."""
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        self._sock = socket.create_server((self.host, self.port), family=family)
        self.port = self._sock.getsockname()[1]
        return self.port

    def start(self, client_config: ClientConf, advertised_host: str = "", zookeeper_connect: str = "",
              security: RegistrySecurity | None = None) -> None:
        """``advertised_host``: how the other brokers' registries reach this one;
        ``zookeeper_connect``: a cluster's, where its registries elect their writer (else this
        one writes alone); ``security``: who may ask what (None: anyone, anything)."""
        assert self._sock is not None, "bind first"
        logging.getLogger("waitress").setLevel(logging.WARNING)
        store = self.store = KafkaStore(client_config, self.topic, replication_factor=self.replication_factor,
                                        wait_for_replicas=self.wait_for_replicas)
        store.start()
        scheme = "https" if self.tls is not None else "http"
        url = f"{scheme}://{advertised_host or self.host or '127.0.0.1'}:{self.port}"
        election = self.election = ZkWriterElection(zookeeper_connect, url) if zookeeper_connect else SoleWriter(url)
        providers = {AVRO: AvroProvider(), JSON: JsonSchemaProvider(), PROTOBUF: ProtobufProvider()}
        registry = self.registry = SchemaRegistry(store, providers, shared=election.shared())
        app = create_wsgi(registry, election, security, self.forward_tls)
        if self.tls is not None:
            server = self._server = _TlsServer(self._sock, self.tls, app)
            run: Callable[[], None] = server.serve_forever
        else:
            server = self._server = waitress.create_server(app, sockets=[self._sock], threads=8,
                                                           ident="rivulet-schema-registry")
            run = server.run
        self._thread = threading.Thread(target=run, name="rivulet-schema-registry", daemon=True)
        self._thread.start()
        log.info("schema registry on %s://%s:%d", scheme, self.host or "0.0.0.0", self.port)

    # A SubjectLookup in the broker's process: what the Iceberg translator reads schemas with.
    def schema_by_id(self, schema_id: int) -> RegisteredSchema:
        return self._started().registered_by_id(schema_id)

    def latest(self, subject: str) -> RegisteredSchema:
        return self._started().registered_latest(subject)

    def _started(self) -> SchemaRegistry:
        if self.registry is None:
            raise RegistryError("the broker's schema registry has not started yet", 503)
        return self.registry

    def close(self) -> None:
        if isinstance(self._server, _TlsServer):
            self._server.shutdown()
            self._server.server_close()
        elif self._server is not None:
            self._server.close()
        if self._thread is not None:
            self._thread.join(5)
        if self._sock is not None:
            self._sock.close()
        if self.election is not None:
            self.election.close()
        if self.store is not None:
            self.store.close()
