"""The consume rows' load generator against a broker that answers every Fetch at once.

Where ``rdkafka_performance -C`` sets the pace (consume 100 B, issue 32 item 3), the row can go
no faster than the generator consuming from a broker that costs nothing. This stands in for
one: a proxy in front of a Rivulet broker that passes every request through (ApiVersions,
Metadata, ListOffsets) except Fetch, which it answers itself from one batch built once in
memory, shaped as Kafka 4.3.1 answers a stored topic: per partition ``max.partition.fetch.bytes``
of full batches (``batch.size=1000000`` filled: 9,082 records of 100 B), the last one cut, the
base offsets written for the offset asked. Nothing is read from disk and no broker work is done,
so the generator's CPU per record here is its own, and its rate its ceiling on this machine
(the proxy's Fetch threads' CPU, mostly the kernel's copy of each answer, is reported beside
it)::

    python -m benchmarks.instant_fetch --size 100 --records 3000000 --rounds 3

The proxy is for measuring the generator only: it keeps no log, so the records it serves are
never checked beyond what the client checks. Given ``Acks`` it also acknowledges Produce at once
(``benchmarks.ceiling`` uses both).
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import struct
import subprocess
import tempfile
import threading
import time
from typing import Sequence

from benchmarks import compare, rdkafka_perf
from rivulet.protocol.framing import decode_request, encode_response_parts
from rivulet.protocol.messages import fetch_response as fr
from rivulet.protocol.messages import produce_response as pr
from rivulet.protocol.messages.fetch_request import FetchRequest
from rivulet.protocol.messages.produce_request import ProduceRequest
from rivulet.protocol.records import Record, encode_batch, iter_batches
from rivulet.testing import BrokerProcess

PARTITIONS = 4
BATCH_SIZE = 1_000_000  # the load's batch.size: a batch holds what fits under it
_BASE = struct.Struct(">q")
_HIGH = 1 << 40  # the high watermark answered: never reached
_TICK = os.sysconf("SC_CLK_TCK")


def full_batch(size: int) -> tuple[bytes, int]:
    """One batch of as many ``size``-byte records as fit in ``BATCH_SIZE``, and its count."""
    value = b"x" * size

    def batch(n: int) -> bytes:
        return encode_batch([Record(i, 0, None, value, []) for i in range(n)], base_timestamp=0)

    per_record = len(batch(2)) - len(batch(1))
    n = max(1, (BATCH_SIZE - len(batch(1))) // per_record + 1)
    while n > 1 and len(batch(n)) > BATCH_SIZE:
        n -= 1
    return batch(n), n


class Answers:
    """Fetch answers from one stored batch repeated: whole batches up to the partition's max
    bytes, the next one cut (KIP-74: a first batch larger than that comes whole). Each
    partition's records are one buffer, its base offsets rewritten for each answer: the
    client has one Fetch in flight per connection, and an answer is sent before the next
    request is read. With ``ring`` > 1 each partition answers from that many buffers in turn,
    so the bytes sent come from memory as far apart as a stored topic's (not from one buffer
    the CPU's cache keeps)."""

    def __init__(self, batch: bytes, count: int, ring: int = 1) -> None:
        self.batch, self.count, self.ring = batch, count, ring
        self.template = batch * (1 + (4 << 20) // len(batch) + 1)
        self.buffers: dict[tuple[object, ...], list[bytearray]] = {}
        self.turn: dict[tuple[object, ...], int] = {}

    def records(self, key: tuple[object, int], offset: int, max_bytes: int) -> bytearray:
        size = max(min(max_bytes, len(self.template)), len(self.batch))
        # A ring is made once for every topic: making 1 GiB for each topic a run creates would
        # put that copy in the measured window; two readers of one ring are 256 answers apart.
        where = (key[1], size) if self.ring > 1 else (*key, size)
        ring = self.buffers.get(where)
        if ring is None:
            ring = self.buffers[where] = [bytearray(self.template[:size]) for _ in range(self.ring)]
        turn = self.turn.get(where, 0)
        self.turn[where] = (turn + 1) % len(ring)
        out = ring[turn]
        for i, pos in enumerate(range(0, size - 7, len(self.batch))):
            _BASE.pack_into(out, pos, offset + i * self.count)
        return out

    def answer(self, req: FetchRequest, version: int) -> fr.FetchResponse:
        topics = []
        for t in req.topics:
            key = t.topic_id if version >= 13 else t.topic
            parts = [fr.PartitionData(partition_index=p.partition, error_code=0, high_watermark=_HIGH,
                                      last_stable_offset=_HIGH, log_start_offset=0, aborted_transactions=None,
                                      preferred_read_replica=-1,
                                      records=memoryview(self.records((key, p.partition), p.fetch_offset,
                                                                      p.partition_max_bytes)))
                     for p in t.partitions]
            topics.append(fr.FetchableTopicResponse(topic=t.topic if version < 13 else "",
                                                    topic_id=t.topic_id, partitions=parts))
        return fr.FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=topics, node_endpoints=[])


class Acks:
    """Produce answered at once: every batch taken, at offsets counted per partition, nothing
    kept (the producer rows' ceiling: a broker that costs nothing). With ``write_dir``, each
    partition's records are first appended to a file of its own there, the one piece of work
    every broker does (into the page cache; nothing synced, as brokers do not by default)."""

    def __init__(self, write_dir: str | None = None) -> None:
        self.ends: dict[tuple[object, int], int] = {}
        self.write_dir = write_dir
        self.files: dict[tuple[object, int], int] = {}

    def _write(self, key: tuple[object, int], records: bytes | memoryview) -> None:
        fd = self.files.get(key)
        if fd is None:
            path = os.path.join(self.write_dir, f"{len(self.files)}.log")
            fd = self.files[key] = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        view = memoryview(records)
        while view:
            view = view[os.write(fd, view):]

    def close(self) -> None:
        for fd in self.files.values():
            os.close(fd)
        self.files.clear()

    def answer(self, req: ProduceRequest, version: int) -> pr.ProduceResponse:
        topics = []
        for t in req.topic_data:
            key = t.topic_id if version >= 13 else t.name
            parts = []
            for p in t.partition_data:
                base = self.ends.get((key, p.index), 0)
                if self.write_dir is not None and p.records:
                    self._write((key, p.index), p.records)
                self.ends[(key, p.index)] = base + sum(h.last_offset_delta + 1 for _, h in iter_batches(p.records or b""))
                parts.append(pr.PartitionProduceResponse(index=p.index, error_code=0, base_offset=base,
                                                         log_append_time_ms=-1, log_start_offset=0,
                                                         record_errors=[], error_message=None))
            topics.append(pr.TopicProduceResponse(name=t.name, topic_id=t.topic_id, partition_responses=parts))
        return pr.ProduceResponse(responses=topics, throttle_time_ms=0, node_endpoints=[])


def _frame(sock: socket.socket) -> bytes | None:
    """One size-prefixed frame's body, or None at the end of the stream."""
    head = _read_exactly(sock, 4)
    return None if head is None else _read_exactly(sock, struct.unpack(">i", head)[0])


def _read_exactly(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            return None
        got += k
    return bytes(buf)


def _send_parts(sock: socket.socket, parts: list[bytes | bytearray | memoryview]) -> None:
    """A vectored write of the whole list: the kernel copies the records once, Python never."""
    views = [memoryview(p).cast("B") for p in parts if len(p)]
    while views:
        sent = sock.sendmsg(views[:1024])
        while sent:
            if sent >= len(views[0]):
                sent -= len(views.pop(0))
            else:
                views[0] = views[0][sent:]
                sent = 0


class Proxy:
    """Requests through to the broker, Fetch answered from ``Answers`` and, given ``acks``,
    Produce from it; a thread each way per connection (blocking sockets: the answers go out
    with one ``sendmsg`` each)."""

    def __init__(self, upstream_port: int, answers: Answers, acks: Acks | None = None) -> None:
        self.upstream_port, self.answers, self.acks = upstream_port, answers, acks
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.cpu_s = 0.0  # of the threads that answer Fetch (and Produce)
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
        for sock in (client, upstream):  # as brokers do: an answer's last segment must not wait for an ack
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        write = threading.Lock()
        threading.Thread(target=self._back, args=(upstream, client, write), daemon=True).start()
        t0 = _thread_cpu()
        try:
            while (frame := _frame(client)) is not None:
                api_key = struct.unpack_from(">h", frame, 0)[0]
                if api_key != 1 and (api_key != 0 or self.acks is None):
                    upstream.sendall(struct.pack(">i", len(frame)) + frame)
                    continue
                header, req = decode_request(frame)
                if api_key == 0:
                    if req.acks == 0:
                        continue
                    response = self.acks.answer(req, header.api_version)
                else:
                    response = self.answers.answer(req, header.api_version)
                parts = encode_response_parts(response, api_key, header.api_version, header.correlation_id)
                with write:
                    _send_parts(client, parts)
        except OSError:
            pass
        finally:
            with self._lock:
                self.cpu_s += _thread_cpu() - t0
            upstream.close()
            client.close()

    @staticmethod
    def _back(upstream: socket.socket, client: socket.socket, write: threading.Lock) -> None:
        try:
            while (frame := _frame(upstream)) is not None:
                with write:
                    client.sendall(struct.pack(">i", len(frame)) + frame)
        except OSError:
            pass


def _thread_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_THREAD)
    return r.ru_utime + r.ru_stime


def run_sampled(argv: list[str], timeout: float = 600.0, check: bool = True) -> tuple[str, float, dict[str, float]]:
    """Run ``argv`` to its end: its stdout, its CPU seconds (rusage) and those per thread name
    (sampled from /proc every 20 ms until it exits, so the last tick or two of each thread may
    be missing). With ``check``, a non-zero exit raises."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    deadline = time.monotonic() + timeout
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        threads: dict[str, tuple[str, float]] = {}
        while proc.poll() is None:
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise subprocess.TimeoutExpired(argv, timeout)
            try:
                tids = os.listdir(f"/proc/{proc.pid}/task")
            except OSError:  # exited meanwhile
                tids = []
            for tid in tids:
                try:
                    stat = open(f"/proc/{proc.pid}/task/{tid}/stat").read()
                except OSError:
                    continue
                fields = stat[stat.rindex(")") + 2:].split()
                threads[tid] = (stat[stat.index("(") + 1:stat.rindex(")")], (int(fields[11]) + int(fields[12])) / _TICK)
            time.sleep(0.02)
        if check and proc.returncode != 0:
            raise subprocess.CalledProcessError(proc.returncode, argv)
        out.seek(0)
        stdout = out.read()
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    by_name: dict[str, float] = {}
    for name, seconds in threads.values():
        by_name[name] = by_name.get(name, 0.0) + seconds
    return stdout, r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime, by_name


def consume_sampled(bootstrap: str, topic: str, records: int, extra: Sequence[str] = ()
                    ) -> tuple[rdkafka_perf.Summary, float, dict[str, float]]:
    """``rdkafka_performance -C`` with its CPU, in all and per thread name (``run_sampled``).
    ``extra``: more arguments, such as the listener's security settings."""
    argv = [str(rdkafka_perf.require_binary()),
            *rdkafka_perf.consumer_args(bootstrap, topic, PARTITIONS, records, extra=extra)]
    out, cpu, by_name = run_sampled(argv, check=False)
    return rdkafka_perf.parse_consumer(out), cpu, by_name


def run(size: int, records: int, rounds: int) -> list[dict[str, float | str]]:
    batch, count = full_batch(size)
    broker = BrokerProcess({})
    proxy = Proxy(broker.port, Answers(batch, count))
    broker.overrides["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{proxy.port}"
    broker.start()
    topic = f"instant-{size}"
    out: list[dict[str, float | str]] = []
    try:
        compare._create(broker.bootstrap, [topic], PARTITIONS)
        for _ in range(rounds + 1):  # the first is a warm-up
            load = os.getloadavg()[0]
            s, cpu, by_thread = consume_sampled(f"127.0.0.1:{proxy.port}", topic, records)
            busiest = max(by_thread.items(), key=lambda kv: kv[1])
            out.append({"records_per_sec": s.records_per_sec, "generator_cpu_s": cpu,
                        "generator_ns_per_record": cpu / records * 1e9, "load": load,
                        "busiest_thread": busiest[0], "busiest_ns_per_record": busiest[1] / records * 1e9})
    finally:
        proxy.close()
        broker.stop()
        broker.cleanup()
    print(f"batch of {count} records, {len(batch):,} bytes; the proxy's Fetch threads {proxy.cpu_s:.2f} s CPU "
          f"over {rounds + 1} rounds")
    return out[1:]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--records", type=int, default=3_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    for i, r in enumerate(run(args.size, args.records, args.rounds)):
        print(f"round {i + 1}: {r['records_per_sec']:,.0f} records/s, generator {r['generator_cpu_s']:.2f} s CPU "
              f"({r['generator_ns_per_record']:.0f} ns a record; its busiest thread, {r['busiest_thread']}, "
              f"{r['busiest_ns_per_record']:.0f}), 1-minute load {r['load']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
