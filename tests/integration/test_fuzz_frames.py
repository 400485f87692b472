"""Mutated requests against a live broker while a healthy client produces and consumes.

The corpus is real clients' requests: librdkafka (producer with idempotence and
transactions, a consumer group, admin calls) and kafka-python, recorded by a proxy on their
way to a broker. Each is mutated (bits flipped, bytes overwritten, truncated, extended,
spliced, header fields replaced, size prefixes that lie) and sent to a second broker over
many short connections. Meanwhile an idempotent acks=all producer writes and a consumer
reads. Afterwards: the broker is alive and answers, its RSS stayed bounded, and every
acknowledged record is there, in order, once.
"""

from __future__ import annotations

import os
import random
import socket
import struct
import threading
import time

import pytest

from rivulet.testing import BrokerProcess, free_port

pytestmark = pytest.mark.integration

FRAMES = int(os.environ.get("RIVULET_FUZZ_FRAMES", "100000"))
SEED = int(os.environ.get("RIVULET_FUZZ_SEED", "20261124"))
RSS_LIMIT_MIB = 400


class RecordingProxy:
    """Forwards one port to another and keeps every client-to-broker frame."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port  # may start listening only later
        self.port = free_port()
        self.frames: list[bytes] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()  # the broker behind is already gone
                continue
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, record: bool) -> None:
        pending = b""
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
                if record:
                    pending += data
                    while len(pending) >= 4:
                        size = struct.unpack_from(">i", pending)[0]
                        if len(pending) < 4 + size:
                            break
                        with self._lock:
                            self.frames.append(pending[4:4 + size])
                        pending = pending[4 + size:]
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._stop = True
        self._listener.close()


def record_corpus() -> list[bytes]:
    """Drive real clients through a recording proxy; their request frames are the corpus."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic
    port = free_port()
    proxy = RecordingProxy(port)
    # Clients must come back through the proxy, so the broker behind it advertises it.
    target = BrokerProcess({"num.partitions": "2", "listeners": f"PLAINTEXT://127.0.0.1:{port}",
                            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"}, port=port)
    try:
        with target:
            boot = f"127.0.0.1:{proxy.port}"
            admin = AdminClient({"bootstrap.servers": boot})
            for f in admin.create_topics([NewTopic("corpus", 2)]).values():
                f.result(30)
            for f in admin.describe_configs([ConfigResource("topic", "corpus"), ConfigResource("broker", "1")]).values():
                f.result(30)
            for f in admin.create_partitions([NewPartitions("corpus", 3)]).values():
                f.result(30)
            admin.list_consumer_groups().result(30)
            p = Producer({"bootstrap.servers": boot, "enable.idempotence": True, "linger.ms": 5,
                          "compression.type": "lz4"})
            for i in range(200):
                p.produce("corpus", value=b"v%d" % i, key=b"k%d" % (i % 7), headers=[("h", b"x")])
            assert p.flush(30) == 0
            t = Producer({"bootstrap.servers": boot, "transactional.id": "fuzz-corpus"})
            t.init_transactions(30)
            t.begin_transaction()
            t.produce("corpus", value=b"in-txn")
            t.commit_transaction(30)
            c = Consumer({"bootstrap.servers": boot, "group.id": "fuzz-corpus-group",
                          "auto.offset.reset": "earliest", "fetch.wait.max.ms": 50})
            c.subscribe(["corpus"])
            got, deadline = 0, time.monotonic() + 30
            while got < 50 and time.monotonic() < deadline:
                m = c.poll(0.5)
                if m is not None and m.error() is None:
                    got += 1
            c.commit(asynchronous=False)
            c.close()
            admin.describe_consumer_groups(["fuzz-corpus-group"])["fuzz-corpus-group"].result(30)
            from kafka import KafkaConsumer, KafkaProducer
            kp = KafkaProducer(bootstrap_servers=boot, compression_type="gzip")
            for i in range(20):
                kp.send("corpus", key=b"kp", value=b"kafka-python %d" % i)
            kp.flush(30)
            kp.close()
            kc = KafkaConsumer("corpus", bootstrap_servers=boot, group_id="fuzz-kp", auto_offset_reset="earliest",
                               consumer_timeout_ms=3000)
            for _ in kc:
                pass
            kc.close()
    finally:
        proxy.close()
    # Distinct frames only; many heartbeats and fetches look alike.
    return sorted(set(proxy.frames))


INTERESTING = [0, 1, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF]


def mutate(rng: random.Random, frame: bytes, corpus: list[bytes]) -> bytes:
    """One mutated frame, size prefix included (sometimes a lying one)."""
    body = bytearray(frame)
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        op = rng.randrange(9)
        n = len(body)
        if op == 0 and n:  # flip bits
            for _ in range(rng.randint(1, 8)):
                i = rng.randrange(n)
                body[i] ^= 1 << rng.randrange(8)
        elif op == 1 and n:  # overwrite bytes
            for _ in range(rng.randint(1, 4)):
                body[rng.randrange(n)] = rng.choice((0, 0xFF, rng.randrange(256)))
        elif op == 2:  # truncate
            del body[rng.randrange(n + 1):]
        elif op == 3:  # extend
            body += os.urandom(rng.randint(1, 64)) if rng.random() < 0.5 else b"\0" * rng.randint(1, 64)
        elif op == 4 and n >= 4:  # another API version
            struct.pack_into(">h", body, 2, rng.choice((-1, 0, 1, 3, 7, 9, 12, 15, 17, 40, rng.randrange(-32768, 32768))))
        elif op == 5 and n >= 2:  # another API key
            struct.pack_into(">h", body, 0, rng.choice((-1, 0, 1, 2, 3, 8, 9, 10, 11, 12, 14, 22, 32, 60,
                                                        rng.randrange(-32768, 32768))))
        elif op == 6 and n > 8:  # an interesting integer somewhere
            i = rng.randrange(n - 3)
            struct.pack_into(">I", body, i, rng.choice(INTERESTING))
        elif op == 7:  # splice with another frame
            other = rng.choice(corpus)
            body = body[:rng.randrange(n + 1)] + other[rng.randrange(len(other) + 1):]
        elif op == 8 and n > 2:  # duplicate a slice
            a = rng.randrange(n)
            b = rng.randrange(a, min(n, a + 256) + 1)
            at = rng.randrange(n + 1)
            body[at:at] = body[a:b]
    size = len(body)
    if rng.random() < 0.03:
        size = rng.choice((size - rng.randint(1, 16), size + rng.randint(1, 16), -1, 0x7FFFFFFF))
    return struct.pack(">i", size) + bytes(body)


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


class HealthyTraffic(threading.Thread):
    """An idempotent acks=all producer that records what was acknowledged."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.topic = topic
        self.halt = threading.Event()
        self.acked: list[tuple[int, int, bytes]] = []
        self.errors: list[str] = []

    def run(self) -> None:
        from confluent_kafka import Producer
        p = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
                      "linger.ms": 2})

        def done(err, msg) -> None:
            if err is not None:
                self.errors.append(str(err))
            else:
                self.acked.append((msg.partition(), msg.offset(), msg.value()))
        i = 0
        while not self.halt.is_set():
            p.produce(self.topic, value=b"healthy-%d" % i, on_delivery=done)
            i += 1
            p.poll(0.005)
        assert p.flush(60) == 0


def plan_connections(frames: list[bytes], rng: random.Random) -> list[tuple[bytes, str, bool]]:
    """Group frames into connections, decided up front so that a seed replays a run exactly:
    (bytes to send, loopback source address, whether to read what comes back)."""
    plan = []
    i = 0
    while i < len(frames):
        k = rng.choice((1, 1, 2, 4, 8, 16))
        plan.append((b"".join(frames[i:i + k]), f"127.0.{rng.randrange(1, 8)}.{rng.randrange(1, 250)}",
                     rng.random() < 0.1))
        i += k
    return plan


def send(port: int, plan: list[tuple[bytes, str, bool]]) -> None:
    """One short connection per entry, ended with RST so no TIME_WAIT piles up."""
    linger = struct.pack("ii", 1, 0)
    for data, source, read_back in plan:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
        s.bind((source, 0))
        s.settimeout(2)
        try:
            s.connect(("127.0.0.1", port))
            s.sendall(data)
            if read_back:
                # Drives the response path too.
                s.settimeout(0.2)
                try:
                    while s.recv(65536):
                        pass
                except OSError:
                    pass
        except OSError:
            pass  # the broker closed the connection first: expected for most garbage
        finally:
            s.close()


def test_mutated_frames_from_real_clients_do_not_hurt_the_broker():
    corpus = record_corpus()
    api_keys = {struct.unpack_from(">h", f)[0] for f in corpus if len(f) >= 2}
    assert len(corpus) >= 50 and {0, 1, 3, 10, 11, 14, 22} <= api_keys, sorted(api_keys)
    rng = random.Random(SEED)
    plan = plan_connections([mutate(rng, rng.choice(corpus), corpus) for _ in range(FRAMES)], rng)
    with BrokerProcess({"num.partitions": "3", "log.segment.bytes": "1048576"}) as broker:
        pid = broker.proc.pid
        traffic = HealthyTraffic(broker.bootstrap, "healthy")
        traffic.start()
        peak = 0.0
        try:
            for start in range(0, len(plan), 500):
                send(broker.port, plan[start:start + 500])
                peak = max(peak, rss_mib(pid))
                assert broker.proc.poll() is None, f"broker died (seed {SEED}): {broker.output()[-3000:]}"
        finally:
            traffic.halt.set()
            traffic.join(120)
        assert not traffic.is_alive(), "the healthy producer hung"
        assert traffic.errors == [], traffic.errors[:5]
        assert len(traffic.acked) > 100
        assert peak < RSS_LIMIT_MIB, f"broker RSS reached {peak:.0f} MiB"
        assert "Traceback" not in broker.output(), broker.output()[-5000:]
        # Every acknowledged record is there, in order, once.
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
        by_partition: dict[int, dict[int, bytes]] = {}
        for p, off, value in traffic.acked:
            by_partition.setdefault(p, {})[off] = value
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "fuzz-check", "enable.auto.commit": False})
        c.assign([TopicPartition("healthy", p, OFFSET_BEGINNING) for p in range(3)])
        read: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(3)}
        want = len(traffic.acked)
        got, deadline = 0, time.monotonic() + 120
        while got < want and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is None or m.error() is not None:
                continue
            read[m.partition()].append((m.offset(), m.value()))
            got += 1
        c.close()
        for p, acked in by_partition.items():
            offsets = [o for o, _ in read[p]]
            assert offsets == sorted(set(offsets)), f"partition {p}: offsets repeat or go back"
            values = dict(read[p])
            missing = [o for o in acked if values.get(o) != acked[o]]
            assert not missing, f"partition {p}: {len(missing)} acknowledged records missing or changed"
