"""``rivulet registry``: the schema registry (docs/schema-registry.md) on its own, against any
Kafka-compatible cluster, as Confluent's registry runs beside Apache Kafka."""

from __future__ import annotations

import argparse
import os
import signal
import threading

from rivulet.cli.common import CliError, add_connection_args, client_config, run_command


def registry_main(args: argparse.Namespace) -> int:
    return run_command("registry", args, lambda: _serve(args))


def _serve(args: argparse.Namespace) -> int:
    try:
        from rivulet.registry.server import SchemaRegistryServer
    except ImportError as e:
        raise CliError(f"the schema registry needs the registry extra (pip install 'rivulet[registry]'): {e}", 2) \
            from None
    conf = client_config(args)
    server = SchemaRegistryServer(args.host, args.port, args.topic, args.replication_factor)
    try:
        port = server.bind()
    except OSError as e:
        why = os.strerror(e.errno) if e.errno else str(e)
        raise CliError(f"cannot serve on {args.host}:{args.port}: {why}") from None
    stop = threading.Event()

    def on_signal(*_: object) -> None:
        stop.set()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    # One instance writes: run one registry per cluster this way (a broker's own registries elect theirs).
    server.start(conf, args.host)
    shown = f"[{args.host}]" if ":" in args.host else args.host
    print(f"Rivulet schema registry on http://{shown}:{port} for {conf['bootstrap.servers']} "
          f"(topic {args.topic})", flush=True)
    try:
        stop.wait()
    finally:
        server.close()
    return 0


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    r = sub.add_parser("registry", help="serve a schema registry (Confluent's REST API) on a Kafka cluster's "
                                        "_schemas topic")
    add_connection_args(r)
    r.add_argument("--host", default="127.0.0.1", help="address to serve on (default: 127.0.0.1)")
    r.add_argument("--port", type=int, default=8081, help="port to serve on (default: 8081, Confluent's; 0 picks a "
                                                          "free one)")
    r.add_argument("--topic", default="_schemas", help="the topic keeping the schemas (default: _schemas)")
    r.add_argument("--replication-factor", type=int, default=3,
                   help="replicas of the topic when it is created (default: 3, fewer if the cluster has fewer)")
    r.set_defaults(func=registry_main)
