"""`rivulet consume`: print records in the manner of kcat -C.

    rivulet consume -b localhost:9092 -t orders -o beginning -e        # all, then exit
    rivulet consume -t orders -p 0 -o -10 -e                          # the last 10 of partition 0
    rivulet consume -t orders -o s@1700000000000                      # from a time (ms)
    rivulet consume -t orders -G billing                              # as a member of group billing
    rivulet consume -t orders -f '%t [%p] @%o %T key=%k: %s\\n'

Format tokens: %s value, %k key, %t topic, %p partition, %o offset, %T timestamp (ms),
%h headers (name=value,...), %S value size, %K key size, %% a percent sign; C escapes
(\\n, \\t, \\0) as in kcat.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from typing import Callable

from rivulet.cli.common import (EXIT_INTERRUPTED, CliError, add_connection_args, client_config, require_topics,
                                run_command)
from rivulet.cli.produce import props, unescape
from rivulet.client.errors import KafkaError, KafkaException
from rivulet.client.types import OFFSET_BEGINNING, OFFSET_END, OFFSET_STORED, Message, TopicPartition


def _null(v: bytes | None, null: bytes) -> bytes:
    return null if v is None else v


def compile_format(fmt: str, null: bytes = b"") -> Callable[[Message], bytes]:
    """A kcat-style format string as a function from a message to the bytes to print."""
    raw = unescape(fmt) if "\\" in fmt else fmt.encode()
    parts: list[bytes | Callable[[Message], bytes]] = []
    lit = bytearray()
    i = 0
    fields: dict[int, Callable[[Message], bytes]] = {
        ord("s"): lambda m: _null(m.value(), null),
        ord("k"): lambda m: _null(m.key(), null),
        ord("t"): lambda m: (m.topic() or "").encode(),
        ord("p"): lambda m: str(m.partition()).encode(),
        ord("o"): lambda m: str(m.offset()).encode(),
        ord("T"): lambda m: str(m.timestamp()[1]).encode(),
        ord("S"): lambda m: str(-1 if m.value() is None else len(m.value())).encode(),
        ord("K"): lambda m: str(-1 if m.key() is None else len(m.key())).encode(),
        ord("h"): lambda m: b",".join(k.encode() + b"=" + (v if v is not None else null)
                                      for k, v in (m.headers() or [])),
    }
    while i < len(raw):
        c = raw[i]
        if c == ord("%") and i + 1 < len(raw):
            nxt = raw[i + 1]
            if nxt == ord("%"):
                lit.append(ord("%"))
            elif nxt in fields:
                if lit:
                    parts.append(bytes(lit))
                    lit = bytearray()
                parts.append(fields[nxt])
            else:
                lit += raw[i:i + 2]
            i += 2
            continue
        lit.append(c)
        i += 1
    if lit:
        parts.append(bytes(lit))

    def render(m: Message) -> bytes:
        return b"".join(p if isinstance(p, bytes) else p(m) for p in parts)
    return render


_TSTYPES = {1: "create", 2: "logappend"}


def _text(b: bytes | None) -> str | None:
    # kcat passes bytes through as they are; surrogateescape carries invalid UTF-8 back out intact.
    return None if b is None else b.decode("utf-8", "surrogateescape")


def json_envelope(m: Message, broker: int) -> bytes:
    """kcat -J: one JSON object per record, with its metadata (headers only when it has some)."""
    tstype, ts = m.timestamp()
    env: dict[str, object] = {"topic": m.topic(), "partition": m.partition(), "offset": m.offset(),
                           "tstype": _TSTYPES.get(tstype, "unknown"), "ts": ts, "broker": broker}
    hdrs = m.headers()
    if hdrs:
        env["headers"] = [x for name, value in hdrs for x in (name, _text(value))]
    env["key"] = _text(m.key())
    env["payload"] = _text(m.value())
    return json.dumps(env, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogateescape")


def parse_offset(s: str) -> tuple[str, int]:
    """kcat's -o: beginning, end, stored, N, -N (N before the end), s@TIMESTAMP."""
    s = s.strip()
    if s in ("beginning", "earliest", "smallest"):
        return "abs", OFFSET_BEGINNING
    if s in ("end", "latest", "largest"):
        return "abs", OFFSET_END
    if s == "stored":
        return "abs", OFFSET_STORED
    if s.startswith("s@"):
        return "time", int(s[2:])
    n = int(s)
    return ("rel", n) if n < 0 else ("abs", n)


def _decoding(args: argparse.Namespace, render: Callable[[Message], bytes]) -> Callable[[Message], bytes]:
    """Values in the schema registry's wire format printed as JSON, decoded with the schema
    the registry holds for their id."""
    try:
        from rivulet.registry.client import RegistryClient
        from rivulet.registry.wire import WireDecoder, WireFormatError
    except ImportError as e:
        raise CliError(f"--value-format needs the registry extra (pip install 'rivulet[registry]'): {e}", 2) \
            from None
    decoder = WireDecoder(RegistryClient(args.schema_registry or os.environ.get("RIVULET_SCHEMA_REGISTRY")
                                         or "http://127.0.0.1:8081"), args.value_format)

    def decoded(m: Message) -> bytes:
        try:
            m.set_value(decoder.decode(m.value()))
        except (WireFormatError, ValueError) as e:
            print(f"% ERROR: {m.topic()} [{m.partition()}] at offset {m.offset()}: {e}", file=sys.stderr)
            return b""
        return render(m)
    return decoded


def consume_main(args: argparse.Namespace) -> int:
    return run_command("consume", args, lambda: _consume(args))


def _consume(args: argparse.Namespace) -> int:
    from rivulet.client.sync import Consumer

    try:
        kind, off = parse_offset(args.offset) if args.offset else ("abs", None)
    except ValueError:
        print(f"rivulet consume: invalid offset '{args.offset}'", file=sys.stderr)
        return 2
    conf = client_config(args, **{"client.id": "rivulet-consume"})
    conf["enable.partition.eof"] = True
    if args.group:
        conf["group.id"] = args.group
        conf["auto.offset.reset"] = "latest" if off == OFFSET_END else "earliest"
        # Commit what was printed, as kcat does, not the whole batch a poll returned.
        conf["enable.auto.offset.store"] = False
    else:
        conf["group.id"] = "rivulet-consume"  # needed only for "-o stored"
        conf["enable.auto.commit"] = False
    conf.update(props(args.property))
    null = b"NULL" if args.null else b""
    leaders: dict[tuple[str, int], int] = {}
    if args.json:
        d = unescape(args.delimiter)

        def leader(m: Message) -> int:
            key = (m.topic() or "", m.partition())
            if key not in leaders:
                tm = c.list_topics(key[0], timeout=30).topics.get(key[0])
                for pm in (tm.partitions.values() if tm is not None else ()):
                    leaders[(key[0], pm.id)] = pm.leader
            return leaders.get(key, -1)
        render = lambda m: json_envelope(m, leader(m)) + d  # noqa: E731
    elif args.format:
        render = compile_format(args.format, null)
    else:
        d = unescape(args.delimiter)
        if args.key_delimiter is not None:
            kd = unescape(args.key_delimiter)
            render = lambda m: _null(m.key(), null) + kd + _null(m.value(), null) + d  # noqa: E731
        else:
            render = lambda m: _null(m.value(), null) + d  # noqa: E731
    if args.value_format:
        render = _decoding(args, render)
    try:
        c = Consumer(conf)
    except KafkaException as e:
        print(f"rivulet consume: {e.args[0].str()}", file=sys.stderr)
        return 2
    out = sys.stdout.buffer
    stop = [False]
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))
    eof: set[tuple[str, int]] = set()
    count = 0
    rc = 0
    try:
        if args.group:
            # kcat ends with "Subscribed topic not available" rather than waiting for the topic.
            require_topics(conf, [t for t in args.topic if not t.startswith("^")],
                           missing="Subscribed topic not available: {topic}: Broker: Unknown topic or partition")
            c.subscribe(args.topic)
        else:
            md = c.list_topics(timeout=30)
            tps = []
            for t in args.topic:
                tm = md.topics.get(t)
                if tm is None or tm.error is not None:
                    why = tm.error.str() if tm is not None and tm.error is not None else "unknown topic"
                    print(f"rivulet consume: {t}: {why}", file=sys.stderr)
                    return 1
                parts = [args.partition] if args.partition is not None else sorted(tm.partitions)
                for p in parts:
                    if p not in tm.partitions:
                        print(f"rivulet consume: {t} has no partition {p}", file=sys.stderr)
                        return 1
                    tps.append(TopicPartition(t, p, OFFSET_BEGINNING))  # kcat's default
            if kind == "abs" and off is not None:
                for tp in tps:
                    tp.offset = off
            elif kind == "rel":
                for tp in tps:
                    lo, hi = c.get_watermark_offsets(tp, timeout=30)
                    tp.offset = max(lo, hi + off)
            elif kind == "time":
                found = c.offsets_for_times([TopicPartition(tp.topic, tp.partition, off) for tp in tps], 30)
                for tp, f in zip(tps, found):
                    tp.offset = f.offset
            c.assign(tps)
        while not stop[0]:
            msgs = c.consume(500, 0.5)
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        eof.add((m.topic(), m.partition()))
                        if not args.quiet:
                            print(f"% Reached end of topic {m.topic()} [{m.partition()}] at offset {m.offset()}",
                                  file=sys.stderr)
                        continue
                    print(f"% ERROR: {err.str()}", file=sys.stderr)
                    if err.fatal():
                        rc = 1
                        stop[0] = True
                    continue
                eof.discard((m.topic(), m.partition()))
                out.write(render(m))
                if args.group:
                    c.store_offsets(m)
                count += 1
                if args.count and count >= args.count:
                    stop[0] = True
                    break
            if msgs:
                out.flush()
            if args.exit_at_end:
                assigned = {(tp.topic, tp.partition) for tp in c.assignment()}
                if assigned and assigned <= eof:
                    break
    except KeyboardInterrupt:
        rc = EXIT_INTERRUPTED
    finally:
        try:
            out.flush()
        except BrokenPipeError:
            pass  # the caller's handler sees the first one and ends quietly
        c.close()
    return rc


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("consume", help="print records from topics (like kcat -C)",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description=__doc__.split("\n\n", 1)[1] if __doc__ else None)
    add_connection_args(p)
    p.add_argument("-t", "--topic", action="append", required=True, help="topic (repeatable; ^regex with -G)")
    p.add_argument("-p", "--partition", type=int, help="only this partition")
    p.add_argument("-o", "--offset", help="beginning, end, stored, N, -N (from the end) or s@TIMESTAMP_MS")
    p.add_argument("-G", "--group", help="consume as a member of this group (subscribe)")
    p.add_argument("-f", "--format", help="output format, e.g. '%%k: %%s\\n'")
    p.add_argument("-J", "--json", action="store_true",
                   help="print each record as kcat's JSON envelope (topic, partition, offset, tstype, ts, "
                        "broker, headers, key, payload)")
    p.add_argument("-D", "--delimiter", default="\\n", help="printed after each value (default \\n)")
    p.add_argument("-K", "--key-delimiter", help="print the key, this, then the value")
    p.add_argument("-e", "--exit-at-end", action="store_true", help="exit when every partition is read to its end")
    p.add_argument("-c", "--count", type=int, default=0, help="exit after this many records")
    p.add_argument("-Z", "--null", action="store_true", help="print NULL for null keys and values")
    p.add_argument("-X", "--property", action="append", metavar="PROP=VALUE", help="a client property")
    p.add_argument("--value-format", choices=["avro", "json-schema", "protobuf"],
                   help="decode values in the schema registry's wire format (magic byte, schema id) to JSON")
    p.add_argument("-r", "--schema-registry", metavar="URL", help="the schema registry for --value-format "
                   "(default: $RIVULET_SCHEMA_REGISTRY, else http://127.0.0.1:8081)")
    p.add_argument("-q", "--quiet", action="store_true", help="print no progress or end-of-partition notes")
    p.set_defaults(func=consume_main)
