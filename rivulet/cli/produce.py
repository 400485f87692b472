"""`rivulet produce`: records from stdin, a file, or a generator, in the manner of kcat -P.

    rivulet produce -b localhost:9092 -t orders < orders.txt             # one record per line
    rivulet produce -t orders -K : -f orders.txt                        # "key:value" lines
    rivulet produce -t orders -D '\\0' -z zstd < blobs.bin               # NUL-separated records
    rivulet produce -t load --random 100000 --size 1024 --rate 5000     # generated, 5000/s
"""

from __future__ import annotations

import argparse
import codecs
import io
import random
import sys
import time
from typing import TYPE_CHECKING, BinaryIO, Iterator

from rivulet.cli.common import EXIT_INTERRUPTED, add_connection_args, client_config, require_topics, run_command
from rivulet.cli.output import progress
from rivulet.client.errors import KafkaError, KafkaException

if TYPE_CHECKING:
    from rivulet.client.sync import Producer
    from rivulet.client.types import Message


def unescape(s: str) -> bytes:
    """A delimiter as given on the command line, with C-style escapes (\\n, \\t, \\0, \\x1f)."""
    if s == "\\0":
        return b"\0"
    return codecs.escape_decode(s.encode())[0]  # type: ignore[attr-defined]


def props(items: list[str] | None) -> dict[str, str]:
    out = {}
    for item in items or []:
        if "=" not in item:
            raise SystemExit(f"-X expects property=value, got '{item}'")
        k, v = item.split("=", 1)
        out[k.strip()] = v
    return out


def split_stream(f: BinaryIO, delim: bytes, chunk: int = 1 << 16) -> Iterator[bytes]:
    """Records separated by ``delim``; a trailing record without delimiter counts, an empty one not."""
    buf = b""
    while True:
        # A buffered file reads what has arrived; stdin.buffer is one, typed as BinaryIO.
        data = f.read1(chunk) if isinstance(f, io.BufferedIOBase) else f.read(chunk)
        if not data:
            break
        buf += data
        parts = buf.split(delim)
        buf = parts.pop()
        yield from parts
    if buf:
        yield buf


def _headers(items: list[str] | None) -> list[tuple[str, bytes]] | None:
    out = []
    for h in items or []:
        name, _, value = h.partition("=")
        out.append((name, value.encode()))
    return out or None


class Pacer:
    """Spreads sends over time so the average is ``rate`` records per second."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.t0 = time.monotonic()

    def wait(self, i: int, producer: Producer) -> None:
        if self.rate <= 0:
            return
        ahead = self.t0 + i / self.rate - time.monotonic()
        if ahead > 0.001:
            producer.poll(ahead)  # serve delivery reports while waiting
            rest = self.t0 + i / self.rate - time.monotonic()
            if rest > 0:
                time.sleep(rest)


def generated(count: int, size: int, keys: int, seed: int | None) -> Iterator[tuple[bytes | None, bytes]]:
    rnd = random.Random(seed)
    block = rnd.randbytes(max(size * 2, 1 << 16))
    i = 0
    while count <= 0 or i < count:
        start = rnd.randrange(0, len(block) - size + 1) if size else 0
        key = f"key-{i % keys}".encode() if keys > 0 else None
        yield key, block[start:start + size]
        i += 1


def produce_main(args: argparse.Namespace) -> int:
    return run_command("produce", args, lambda: _produce(args))


def _produce(args: argparse.Namespace) -> int:
    from rivulet.client.sync import Producer

    conf = client_config(args, **{"client.id": "rivulet-produce"})
    if args.compression:
        conf["compression.type"] = args.compression
    if args.acks is not None:
        conf["acks"] = args.acks
    conf.update(props(args.property))
    try:
        p = Producer(conf)
    except KafkaException as e:
        print(f"rivulet produce: {e.args[0].str()}", file=sys.stderr)
        return 2
    require_topics(conf, [args.topic], allow_auto_create=True,
                   missing="Topic '{topic}' not present in metadata: Broker: Unknown topic or partition")
    headers = _headers(args.header)
    failed = [0]
    first_error: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            failed[0] += 1
            if not first_error:
                first_error.append(err)
            if not args.quiet:
                print(f"rivulet produce: delivery failed: {err.str()}", file=sys.stderr)

    if args.random is not None:
        source: Iterator[tuple[bytes | None, bytes]] = generated(args.random, args.size, args.keys, args.seed)
    else:
        f: BinaryIO = open(args.file, "rb") if args.file else sys.stdin.buffer
        delim = unescape(args.delimiter)
        kdelim = unescape(args.key_delimiter) if args.key_delimiter is not None else None

        def from_input() -> Iterator[tuple[bytes | None, bytes]]:
            for rec in split_stream(f, delim):
                if kdelim is not None and kdelim in rec:
                    k, v = rec.split(kdelim, 1)
                    yield k, v
                else:
                    yield None, rec
        source = from_input()
    pacer = Pacer(args.rate)
    interrupted = False
    sent = 0
    t0 = time.monotonic()
    # Generated records show progress on a terminal (stderr); records from stdin or a file do not.
    total = (min(args.random, args.count) if args.count else args.random) if args.random else None
    try:
        with progress(f"producing to {args.topic}", total, "records",
                      enabled=args.random is not None and not args.quiet) as bar:
            for key, value in source:
                pacer.wait(sent, p)
                while True:
                    try:
                        p.produce(args.topic, value, key, args.partition, on_delivery, 0, headers)
                        break
                    except BufferError:
                        p.poll(0.01)
                sent += 1
                bar.completed(sent)
                if sent % 1000 == 0:
                    p.poll(0)
                if args.count and sent >= args.count:
                    break
    except KeyboardInterrupt:
        interrupted = True
    except (KafkaException, TypeError) as e:
        print(f"rivulet produce: {e}", file=sys.stderr)
    left = p.close(args.timeout)
    dt = time.monotonic() - t0
    if not args.quiet:
        rate = sent / dt if dt > 0 else 0.0
        print(f"% {sent - failed[0] - left} of {sent} records produced to {args.topic} in {dt:.2f} s "
              f"({rate:,.0f}/s)" + (f", {failed[0]} failed" if failed[0] else "")
              + (f", {left} undelivered" if left else ""), file=sys.stderr)
    if interrupted:
        return EXIT_INTERRUPTED
    return 1 if failed[0] or left else 0


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("produce", help="produce records from stdin, a file or a generator (like kcat -P)",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description=__doc__.split("\n\n", 1)[1] if __doc__ else None)
    add_connection_args(p)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-p", "--partition", type=int, default=-1, help="partition (default: the partitioner)")
    p.add_argument("-f", "-l", "--file", help="read records from this file instead of stdin (kcat: -l)")
    p.add_argument("-D", "--delimiter", default="\\n", help="record delimiter (default \\n)")
    p.add_argument("-K", "--key-delimiter", help="split each record into key and value at this delimiter")
    p.add_argument("-H", "--header", action="append", metavar="NAME=VALUE", help="add a header to every record")
    p.add_argument("-z", "--compression", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    p.add_argument("-a", "--acks", choices=["0", "1", "all", "-1"])
    p.add_argument("-X", "--property", action="append", metavar="PROP=VALUE", help="a client property")
    p.add_argument("-c", "--count", type=int, default=0, help="stop after this many records")
    p.add_argument("--random", type=int, metavar="N", help="generate N random records (0: until interrupted)")
    p.add_argument("--size", type=int, default=100, help="value size of generated records (bytes)")
    p.add_argument("--keys", type=int, default=0, help="generated records use this many distinct keys")
    p.add_argument("--seed", type=int, help="random seed for generated records")
    p.add_argument("--rate", type=float, default=0, help="target records per second (default: as fast as possible)")
    p.add_argument("--timeout", type=float, default=None, help="seconds to wait for delivery at the end")
    p.add_argument("-q", "--quiet", action="store_true", help="print no progress or end-of-partition notes")
    p.set_defaults(func=produce_main)
