"""The registry's ``Store`` on a Kafka topic, as Confluent's KafkaStore: one reader thread
replays ``_schemas`` (one partition, compacted) from the start into the state and follows it;
a write is produced with acks=all and returns once the reader has replayed it, so that what a
client is answered next already holds it."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from rivulet.client.admin.client import AdminClient, NewTopic
from rivulet.client.config import ClientConf
from rivulet.client.errors import KafkaError, KafkaException
from rivulet.client.sync import Consumer, Producer
from rivulet.client.types import OFFSET_BEGINNING, Message, TopicPartition
from rivulet.protocol.errors import ErrorCode
from rivulet.registry import errors as E
from rivulet.registry.state import RegistryState, noop_key

log = logging.getLogger("rivulet.registry")

DEFAULT_TOPIC = "_schemas"


class KafkaStore:
    """``client_config``: the clients' properties (``bootstrap.servers`` and any security
    settings); ``timeout_s``: how long a write or the first replay may take (Confluent's
    ``kafkastore.timeout.ms``)."""

    def __init__(self, client_config: ClientConf, topic: str = DEFAULT_TOPIC, timeout_s: float = 60.0,
                 replication_factor: int = 3, wait_for_replicas: bool = False) -> None:
        self.client_config = dict(client_config)
        self.topic = topic
        self.timeout_s = timeout_s
        self.replication_factor = replication_factor
        # A cluster's brokers starting one by one: wait (up to timeout_s) for enough to hold
        # every replica before making the topic; otherwise make it with the brokers there are.
        self.wait_for_replicas = wait_for_replicas
        self.state = RegistryState()
        self._lock = threading.RLock()
        self._replayed = threading.Condition(self._lock)
        self._next_offset = 0  # the offset after the last record replayed
        self._stopping = threading.Event()
        self._ready = threading.Event()
        self._failure: str | None = None
        self._producer: Producer | None = None
        self._thread: threading.Thread | None = None

    # -- life cycle

    def start(self) -> None:
        """Create the topic if need be and start replaying it, on a thread of its own (the
        broker that embeds the registry serves the very requests this makes)."""
        self._thread = threading.Thread(target=self._run, name="rivulet-registry-store", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(10)
        if self._producer is not None:
            self._producer.close(5)

    def _run(self) -> None:
        consumer: Consumer | None = None
        try:
            # A cluster still forming (the topic's leader not elected yet...): try again.
            while consumer is None and not self._stopping.is_set():
                try:
                    consumer, tp, high = self._open()
                except Exception as e:
                    log.warning("schema registry store: %s; trying again", e)
                    self._stopping.wait(2.0)
            if consumer is not None:
                self._follow(consumer, tp, high)
        except Exception as e:  # the registry answers 50001 with it rather than dying unseen
            log.exception("schema registry store stopped")
            with self._lock:
                self._failure = f"Error while reading {self.topic}: {e}"
                self._replayed.notify_all()
            self._ready.set()
        finally:
            if consumer is not None:
                consumer.close()

    def _open(self) -> tuple[Consumer, TopicPartition, int]:
        """The topic made if need be, the producer, and a consumer at its start; the end
        offset to replay up to before answering."""
        self._ensure_topic()
        if self._producer is None:
            self._producer = Producer({**self.client_config, "acks": "all", "linger.ms": 0,
                                       "enable.idempotence": True})
        consumer = Consumer({**self.client_config, "enable.auto.commit": False, "fetch.wait.max.ms": 100})
        try:
            tp = TopicPartition(self.topic, 0)
            _low, high = consumer.get_watermark_offsets(tp, timeout=self.timeout_s)
            consumer.assign([TopicPartition(self.topic, 0, OFFSET_BEGINNING)])
        except Exception:
            consumer.close()
            raise
        return consumer, tp, high

    def _ensure_topic(self) -> None:
        admin = AdminClient(self.client_config)
        try:
            md = admin.list_topics(timeout=self.timeout_s)
            deadline = time.monotonic() + self.timeout_s
            while self.wait_for_replicas and self.topic not in md.topics and \
                    len(md.brokers) < self.replication_factor and \
                    time.monotonic() < deadline and not self._stopping.is_set():
                self._stopping.wait(1.0)
                md = admin.list_topics(timeout=self.timeout_s)
            if self.topic in md.topics:
                return
            rf = max(1, min(self.replication_factor, len(md.brokers)))
            if rf < self.replication_factor:
                log.warning("creating %s with %d replica(s): only %d broker(s) are up", self.topic, rf, rf)
            futures = admin.create_topics([NewTopic(self.topic, 1, rf, config={"cleanup.policy": "compact"})])
            try:
                futures[self.topic].result(self.timeout_s)
            except KafkaException as e:
                # Another broker's registry made it meanwhile.
                if e.error.code() != ErrorCode.TOPIC_ALREADY_EXISTS:
                    raise
        finally:
            admin.close()

    def _follow(self, consumer: Consumer, tp: TopicPartition, caught_up_at: int) -> None:
        if caught_up_at <= 0:
            self._ready.set()
        while not self._stopping.is_set():
            # Compaction may have left the last offsets empty: the position tells the end.
            if not self._ready.is_set() and consumer.position([tp])[0].offset >= caught_up_at:
                self._ready.set()
            for msg in consumer.consume(500, 0.2):
                if msg.error() is not None:
                    log.warning("reading %s: %s", self.topic, msg.error())
                    continue
                with self._lock:
                    self.state.apply(msg.key(), msg.value())
                    self._next_offset = msg.offset() + 1
                    self._replayed.notify_all()

    # -- the Store interface

    def _wait_ready(self) -> None:
        if not self._ready.wait(self.timeout_s):
            raise E.error(E.OPERATION_TIMEOUT, f"Timed out while reading {self.topic} to its end")
        if self._failure is not None:
            raise E.error(E.STORE_ERROR, self._failure)

    @contextmanager
    def reading(self) -> Iterator[object]:
        self._wait_ready()
        with self._lock:
            yield self.state

    def sync(self) -> None:
        """A NOOP record written and read back (Confluent's way to learn the topic's end)."""
        self.write([(noop_key(), None)])

    def write(self, records: list[tuple[bytes, bytes | None]]) -> None:
        self._wait_ready()
        producer = self._producer
        assert producer is not None
        offsets: list[int] = []
        failures: list[str] = []

        def delivered(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                failures.append(str(err))
            else:
                offsets.append(msg.offset())
        for key, value in records:
            producer.produce(self.topic, value, key, partition=0, on_delivery=delivered)
        if producer.flush(self.timeout_s) or failures:
            raise E.error(E.STORE_ERROR, f"Error while writing to {self.topic}: {failures or 'timed out'}")
        last = max(offsets)
        deadline = time.monotonic() + self.timeout_s
        with self._lock:
            while self._next_offset <= last:
                left = deadline - time.monotonic()
                if left <= 0 or self._failure is not None:
                    raise E.error(E.OPERATION_TIMEOUT,
                                  f"Write to {self.topic} at offset {last} was not read back in time")
                self._replayed.wait(left)
