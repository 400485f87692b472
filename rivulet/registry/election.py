"""Which registry writes. Every instance serves reads from its own replay of ``_schemas``;
only one writes, so that ids and versions are taken once. The others forward their writes to
it, as Confluent's followers do.

``SoleWriter``: this instance is the only one (one broker, or a registry run on its own).
``ZkWriterElection``: brokers of a cluster race for an ephemeral znode in ZooKeeper (Confluent's
ZooKeeper-era ``/schema_registry/schema_registry_master``, holding the winner's address); the
winner writes until its session ends, when another takes the znode over.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Protocol

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError

log = logging.getLogger("rivulet.registry")

ELECTION_PATH = "/schema_registry/schema_registry_master"


class WriterElection(Protocol):
    def is_writer(self) -> bool:
        ...

    def writer_url(self) -> str | None:
        """Where the writer listens, ``http://host:port`` (or https); None while none is known."""
        ...

    def shared(self) -> bool:
        """Whether others may have written (a writer then reads the topic to its end first)."""
        ...

    def close(self) -> None:
        ...


class SoleWriter:
    def __init__(self, url: str = "") -> None:
        self.url = url

    def is_writer(self) -> bool:
        return True

    def writer_url(self) -> str | None:
        return self.url

    def shared(self) -> bool:
        return False

    def close(self) -> None:
        pass


class ZkWriterElection:
    """``connect``: ZooKeeper's connect string (with the cluster's chroot); ``url``: this
    instance's advertised address."""

    def __init__(self, connect: str, url: str, session_timeout_s: float = 6.0) -> None:
        self.url = url
        self._lock = threading.Lock()
        self._writer: str | None = None
        self._vacant = threading.Event()
        self._closing = threading.Event()
        self._zk = KazooClient(hosts=connect, timeout=session_timeout_s)
        self._zk.start(timeout=30)
        self._zk.ensure_path(ELECTION_PATH.rsplit("/", 1)[0])
        # The race runs on a thread of its own: kazoo's watch callbacks must not block.
        self._racer = threading.Thread(target=self._race, name="rivulet-registry-election", daemon=True)
        self._racer.start()
        self._zk.DataWatch(ELECTION_PATH, self._changed)

    def _changed(self, data: bytes | None, _stat: object) -> None:
        """The znode changed or went (kazoo's watch thread)."""
        writer = None
        if data is not None:
            try:
                doc = json.loads(data)
                writer = f"{doc.get('scheme', 'http')}://{doc['host']}:{doc['port']}"
            except (ValueError, KeyError, TypeError):
                log.warning("schema registry writer znode unreadable: %r", data)
        with self._lock:
            self._writer = writer
        if data is None:
            self._vacant.set()

    def _race(self) -> None:
        scheme, _, address = self.url.partition("://")
        host, port = address.rsplit(":", 1)
        claim = json.dumps({"host": host, "port": int(port), "master_eligibility": True, "scheme": scheme,
                            "version": 1}).encode()
        while not self._closing.is_set():
            if not self._vacant.wait(1.0):
                continue
            self._vacant.clear()
            try:
                self._zk.create(ELECTION_PATH, claim, ephemeral=True)
                log.info("schema registry writer: this broker (%s)", self.url)
            except NodeExistsError:
                pass  # another won; the watch tells who
            except Exception as e:  # a lost connection: try again when the znode is seen gone
                log.warning("schema registry election: %s", e)
                self._vacant.set()
                self._closing.wait(1.0)

    def is_writer(self) -> bool:
        with self._lock:
            return self._writer == self.url

    def writer_url(self) -> str | None:
        with self._lock:
            return self._writer

    def shared(self) -> bool:
        return True

    def close(self) -> None:
        self._closing.set()
        self._zk.stop()
        self._zk.close()
